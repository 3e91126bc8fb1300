package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const objSchema = `{"type":"object","properties":{"q":{"type":"string"}},"additionalProperties":false}`

func tool(name, schema string) Tool {
	return Tool{Name: name, Description: "Tool " + name + ".", Schema: json.RawMessage(schema)}
}

// noLoader fails the test if the compiler tries to load any URL.
type noLoader struct{ t testing.TB }

func (l noLoader) Load(url string) (any, error) {
	l.t.Errorf("the compiler tried to load %s", url)
	return nil, errors.New("no loading in tests")
}

// compileRaw compiles a whole schema document (a union) with santhosh v6.
func compileRaw(t testing.TB, raw []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("union is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{t})
	if err := c.AddResource("https://test.invalid/union.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("https://test.invalid/union.json")
	if err != nil {
		t.Fatalf("union does not compile: %v", err)
	}
	return s
}

func validate(t testing.TB, s *jsonschema.Schema, reply string) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(reply))
	if err != nil {
		t.Fatalf("reply is not JSON: %v", err)
	}
	return s.Validate(inst)
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// branches splits a union into its oneOf branches, raw.
func branches(t testing.TB, union []byte) []json.RawMessage {
	t.Helper()
	if keys := objectKeys(t, union); !slices.Equal(keys, []string{"oneOf"}) {
		t.Fatalf("union keys %v, want [oneOf]", keys)
	}
	var u struct{ OneOf []json.RawMessage }
	if err := json.Unmarshal(union, &u); err != nil {
		t.Fatal(err)
	}
	return u.OneOf
}

// jsonAt returns the raw value at a chain of object keys.
func jsonAt(t testing.TB, raw []byte, path ...string) json.RawMessage {
	t.Helper()
	for _, p := range path {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("jsonAt %v: %v", path, err)
		}
		v, ok := m[p]
		if !ok {
			t.Fatalf("jsonAt %v: no %q in %s", path, p, raw)
		}
		raw = v
	}
	return raw
}

func TestNewUnionBranches(t *testing.T) {
	in := []Tool{
		tool("zeta", objSchema),
		{Name: "alpha", Schema: json.RawMessage(`{"type":"object"}`)}, // no description
		tool("mid", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
	}
	orig := slices.Clone(in)
	u, err := NewUnion(in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, orig) {
		t.Errorf("NewUnion reordered or changed its argument: %v", in)
	}
	wantActions := []string{"alpha", "mid", "zeta", FinalAction}
	if got := u.Actions(); !slices.Equal(got, wantActions) {
		t.Errorf("Actions() = %v, want %v", got, wantActions)
	}
	var names []string
	for _, tl := range u.Tools() {
		names = append(names, tl.Name)
	}
	if !slices.Equal(names, wantActions[:3]) {
		t.Errorf("Tools() names = %v", names)
	}
	byName := map[string]Tool{FinalAction: {Description: "Answer the user and end the turn. Use it when you have what you need, or when no tool can help.", Schema: finalSchema}}
	for _, tl := range in {
		byName[tl.Name] = tl
	}

	for _, which := range []struct {
		name string
		raw  []byte
	}{{"Schema", u.Schema()}, {"Format", u.Format()}} {
		bs := branches(t, which.raw)
		if len(bs) != len(wantActions) {
			t.Fatalf("%s: %d branches, want %d", which.name, len(bs), len(wantActions))
		}
		for i, b := range bs {
			action := wantActions[i]
			t.Run(which.name+"/"+action, func(t *testing.T) {
				described := true
				wantKeys := []string{"type", "description", "properties", "required", "additionalProperties"}
				if byName[action].Description == "" || !described {
					wantKeys = slices.Delete(wantKeys, 1, 2)
				}
				if keys := objectKeys(t, b); !slices.Equal(keys, wantKeys) {
					t.Errorf("branch keys %v, want %v", keys, wantKeys)
				}
				// The order a constrained model fills them in: reason first.
				if keys := objectKeys(t, b, "properties"); !slices.Equal(keys, []string{"thought", "action", "args"}) {
					t.Errorf("properties in order %v, want [thought action args]", keys)
				}
				checks := []struct {
					path []string
					want string
				}{
					{[]string{"type"}, `"object"`},
					{[]string{"required"}, `["thought","action","args"]`},
					{[]string{"additionalProperties"}, `false`},
					{[]string{"properties", "action"}, `{"const":"` + action + `"}`},
				}
				thought := `{"type":"string","maxLength":1000}`
				if described {
					thought = `{"type":"string","maxLength":1000,"description":"Why this step: one or two sentences."}`
				}
				checks = append(checks, struct {
					path []string
					want string
				}{[]string{"properties", "thought"}, thought})
				if d := byName[action].Description; d != "" && described {
					checks = append(checks, struct {
						path []string
						want string
					}{[]string{"description"}, fmt.Sprintf("%q", d)})
				}
				for _, c := range checks {
					if got := jsonAt(t, b, c.path...); string(got) != c.want {
						t.Errorf("%v = %s, want %s", c.path, got, c.want)
					}
				}
				if which.name == "Schema" {
					if got := jsonAt(t, b, "properties", "args"); !jsonEqual(t, got, byName[action].Schema) {
						t.Errorf("args = %s, want the tool's schema %s", got, byName[action].Schema)
					}
				}
			})
		}
	}
}

func TestNewUnionNoTools(t *testing.T) {
	u, err := NewUnion(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Actions(); !slices.Equal(got, []string{FinalAction}) {
		t.Errorf("Actions() = %v", got)
	}
	if len(u.Tools()) != 0 {
		t.Errorf("Tools() = %v", u.Tools())
	}
	s := compileRaw(t, u.Schema())
	if err := validate(t, s, `{"thought":"t","action":"final_response","args":{"answer":"hi"}}`); err != nil {
		t.Errorf("valid final reply refused by the union: %v", err)
	}
	if err := validate(t, s, `{"thought":"t","action":"search","args":{}}`); err == nil {
		t.Error("the union accepts an unknown action")
	}
}

func TestNewUnionRefuses(t *testing.T) {
	tests := []struct {
		name  string
		tools []Tool
		want  []string // substrings of the error
	}{
		{"duplicate name", []Tool{tool("a", objSchema), tool("b", objSchema), tool("a", objSchema)}, []string{`tool "a": declared twice`}},
		{"upper case name", []Tool{tool("Search", objSchema)}, []string{`"Search"`, "must match"}},
		{"hyphenated name", []Tool{tool("web-search", objSchema)}, []string{`"web-search"`, "must match"}},
		{"empty name", []Tool{tool("", objSchema)}, []string{`""`, "must match"}},
		{"final_response alone", []Tool{tool(FinalAction, objSchema)}, []string{`"final_response" is reserved`}},
		// Sorted, a tool named final_response is not next to the real one.
		{"final_response before another tool", []Tool{tool("search", objSchema), tool(FinalAction, objSchema)}, []string{`"final_response" is reserved`}},
		{"not JSON", []Tool{tool("bad", `{"type":`)}, []string{`tool "bad": schema is not valid JSON`}},
		{"no schema", []Tool{{Name: "bad"}}, []string{`tool "bad": schema is not valid JSON`}},
		{"trailing data", []Tool{tool("bad", `{"type":"object"} {}`)}, []string{`tool "bad": schema is not valid JSON`}},
		{"array", []Tool{tool("bad", `[]`)}, []string{`tool "bad": schema must be an object schema`}},
		{"boolean schema", []Tool{tool("bad", `true`)}, []string{`tool "bad": schema must be an object schema`}},
		{"type missing", []Tool{tool("bad", `{"properties":{"a":{"type":"string"}}}`)}, []string{`tool "bad": schema must be an object schema`}},
		{"type string", []Tool{tool("bad", `{"type":"string"}`)}, []string{`tool "bad": schema must be an object schema`}},
		{"type list", []Tool{tool("bad", `{"type":["object","null"]}`)}, []string{`tool "bad": schema must be an object schema`}},
		{"unknown type", []Tool{tool("bad", `{"type":"object","properties":{"a":{"type":"nosuch"}}}`)}, []string{`tool "bad": schema does not compile`}},
		{"bad regex", []Tool{tool("bad", `{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`)}, []string{`tool "bad": schema does not compile`}},
		{"minimum not a number", []Tool{tool("bad", `{"type":"object","properties":{"a":{"type":"integer","minimum":"1"}}}`)}, []string{`tool "bad": schema does not compile`}},
		{"dangling local ref", []Tool{tool("bad", `{"type":"object","properties":{"a":{"$ref":"#/$defs/nope"}}}`)}, []string{`tool "bad": schema does not compile`}},
		{"file ref", []Tool{tool("bad", `{"type":"object","properties":{"a":{"$ref":"file:///etc/hostname"}}}`)}, []string{`tool "bad": schema does not compile`, "external references are not allowed"}},
		{"https ref", []Tool{tool("bad", `{"type":"object","properties":{"a":{"$ref":"https://example.com/x.json"}}}`)}, []string{`tool "bad": schema does not compile`, "external references are not allowed"}},
		{"relative ref", []Tool{tool("bad", `{"type":"object","properties":{"a":{"$ref":"other.json"}}}`)}, []string{`tool "bad": schema does not compile`, "external references are not allowed"}},
		{"ref through $id", []Tool{tool("bad", `{"$id":"file:///etc/","type":"object","properties":{"a":{"$ref":"hostname"}}}`)}, []string{`tool "bad": schema does not compile`, "external references are not allowed"}},
		{"good tools do not hide a bad one", []Tool{tool("a", objSchema), tool("bad", `{"type":"string"}`), tool("z", objSchema)}, []string{`tool "bad": schema must be an object schema`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := NewUnion(tt.tools)
			if err == nil {
				t.Fatalf("NewUnion = %v, want an error", u.Actions())
			}
			if u != nil {
				t.Error("NewUnion returned a union with its error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if len(tt.tools) == 1 {
				cerr := CheckTool(tt.tools[0])
				if cerr == nil || cerr.Error() != err.Error() {
					t.Errorf("CheckTool = %v, want the same error as NewUnion", cerr)
				}
			}
		})
	}
}

func TestCheckToolAccepts(t *testing.T) {
	for _, s := range []string{
		`{"type":"object"}`,
		objSchema,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://plugin.example/x.json","type":"object"}`,
		`{"type":"object","$defs":{"y":{"type":"integer"}},"properties":{"y":{"$ref":"#/$defs/y"}}}`,
	} {
		if err := CheckTool(Tool{Name: "ok", Schema: json.RawMessage(s)}); err != nil {
			t.Errorf("CheckTool(%s) = %v", s, err)
		}
	}
}

// TestExternalRefIsNotRead makes the refusal observable: the file holds a
// schema that would compile, and a compiler with the default loader does read
// it; the union's compiler must not.
func TestExternalRefIsNotRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(file, []byte(`{"type":"object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf(`{"type":"object","properties":{"a":{"$ref":%q}}}`, "file://"+file)

	// Control: without a refusing loader, santhosh v6 reads the file.
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("https://test.invalid/t.json", doc); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compile("https://test.invalid/t.json"); err != nil {
		t.Fatalf("control: default loader did not read %s: %v", file, err)
	}

	_, err = NewUnion([]Tool{tool("reader", schema)})
	if err == nil || !strings.Contains(err.Error(), "external references are not allowed") {
		t.Fatalf("NewUnion = %v, want the reference refused", err)
	}
}

func TestLocalRefs(t *testing.T) {
	defsRef := `{"type":"object",
		"$defs":{"year":{"type":"integer","minimum":1900}},
		"properties":{"year":{"$ref":"#/$defs/year"}},
		"required":["year"],"additionalProperties":false}`
	// A tree refers to its own root.
	rootRef := `{"type":"object",
		"properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}},
		"required":["name"],"additionalProperties":false}`
	// An anchor names a subschema wherever it is; it must not be rebased.
	anchorRef := `{"type":"object",
		"$defs":{"kind":{"$anchor":"kind","enum":["movie","tv"]}},
		"properties":{"kind":{"$ref":"#kind"}},
		"required":["kind"],"additionalProperties":false}`
	// A property may be named "$ref": its schema is walked, not taken as a
	// reference.
	refNamed := `{"type":"object",
		"$defs":{"id":{"type":"integer"}},
		"properties":{"$ref":{"type":"object","properties":{"id":{"$ref":"#/$defs/id"}},"additionalProperties":false}},
		"additionalProperties":false}`
	u, err := NewUnion([]Tool{tool("movies", defsRef), tool("a_first", objSchema), tool("tree", rootRef), tool("typed", anchorRef), tool("v_ref_named", refNamed)})
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Actions(); !slices.Equal(got, []string{"a_first", "movies", "tree", "typed", "v_ref_named", FinalAction}) {
		t.Fatalf("Actions() = %v", got)
	}
	for _, which := range []struct {
		name string
		raw  []byte
	}{{"Schema", u.Schema()}, {"Format", u.Format()}} {
		t.Run(which.name, func(t *testing.T) {
			s := string(which.raw)
			wants := []string{
				`"$ref":"#/oneOf/1/properties/args/$defs/year"`,
				`"$ref":"#/oneOf/2/properties/args"`,
				`"$ref":"#/oneOf/4/properties/args/$defs/id"`,
			}
			if which.name == "Format" {
				// The copy points every reference at a copy of its target
				// in the branch's own $defs, the root at the branch's args.
				wants = []string{
					`"$ref":"#/oneOf/1/$defs/d0"`,
					`"$ref":"#/oneOf/2/properties/args"`,
					`"$ref":"#/oneOf/3/$defs/d0"`,
					`"$ref":"#/oneOf/4/$defs/d0"`,
				}
			}
			for _, want := range wants {
				if !strings.Contains(s, want) {
					t.Errorf("union lacks %s", want)
				}
			}
			// Ollama's converter resolves only "#/..." pointers: the
			// copy resolves the anchor itself.
			if got, want := strings.Contains(s, `"$ref":"#kind"`), which.name == "Schema"; got != want {
				t.Errorf("anchor reference present: %v, want %v", got, want)
			}
			if strings.Contains(s, `"#/$defs/year"`) {
				t.Error("union still holds the tool-relative reference #/$defs/year")
			}
			full := compileRaw(t, which.raw)
			tests := []struct {
				reply string
				valid bool
			}{
				{`{"thought":"t","action":"movies","args":{"year":2000}}`, true},
				{`{"thought":"t","action":"movies","args":{"year":1800}}`, false},
				{`{"thought":"t","action":"movies","args":{"year":"2000"}}`, false},
				{`{"thought":"t","action":"tree","args":{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}}`, true},
				{`{"thought":"t","action":"tree","args":{"name":"a","children":[{"name":"b","children":[{"nom":"c"}]}]}}`, false},
				{`{"thought":"t","action":"typed","args":{"kind":"tv"}}`, true},
				{`{"thought":"t","action":"typed","args":{"kind":"film"}}`, false},
				{`{"thought":"t","action":"v_ref_named","args":{"$ref":{"id":7}}}`, true},
				{`{"thought":"t","action":"v_ref_named","args":{"$ref":{"id":"7"}}}`, false},
			}
			for _, tt := range tests {
				if err := validate(t, full, tt.reply); (err == nil) != tt.valid {
					t.Errorf("union validates %s: %v, want valid=%v", tt.reply, err, tt.valid)
				}
			}
		})
	}
	// Decode validates against the tool's own schema, where the references
	// were never rebased.
	tests := []struct {
		reply string
		want  []string
	}{
		{`{"thought":"t","action":"movies","args":{"year":2000}}`, nil},
		{`{"thought":"t","action":"movies","args":{"year":1800}}`, []string{"args.year: minimum: got 1,800, want 1,900 (got 1800)"}},
		{`{"thought":"t","action":"tree","args":{"name":"a","children":[{"name":"b","children":[{"nom":"c"}]}]}}`, []string{
			"args.children[0].children[0].name: missing required field",
			"args.children[0].children[0].nom: unknown field; remove it",
		}},
		{`{"thought":"t","action":"typed","args":{"kind":"film"}}`, []string{`args.kind: expected one of "movie", "tv", got "film"`}},
		{`{"thought":"t","action":"v_ref_named","args":{"$ref":{"id":"7"}}}`, []string{`args["$ref"].id: expected integer, got string "7"`}},
	}
	for _, tt := range tests {
		_, err := u.Decode(tt.reply)
		if got := problemsOf(t, err); !slices.Equal(got, tt.want) {
			t.Errorf("Decode(%s) problems:\n got %q\nwant %q", tt.reply, got, tt.want)
		}
	}
}

func TestUnionDropsRootIDAndSchema(t *testing.T) {
	u, err := NewUnion([]Tool{tool("ided", `{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://plugin.example/x.json","type":"object"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range [][]byte{u.Schema(), u.Format()} {
		if bytes.Contains(raw, []byte(`"$id"`)) || bytes.Contains(raw, []byte(`"$schema"`)) {
			t.Errorf("union keeps the tool's root $id/$schema: %s", raw)
		}
		compileRaw(t, raw)
	}
}

// formatArgs returns the args schema of the branch for action in a union.
func formatArgs(t testing.TB, union []byte, u *Union, action string) json.RawMessage {
	t.Helper()
	i := slices.Index(u.Actions(), action)
	if i < 0 {
		t.Fatalf("no action %q", action)
	}
	return jsonAt(t, branches(t, union)[i], "properties", "args")
}

func TestFormatForOllama(t *testing.T) {
	in := `{"type":"object","properties":{
		"loose":{"type":"string","pattern":"[a-z]+"},
		"starts":{"type":"string","pattern":"^[a-z]+"},
		"ends":{"type":"string","pattern":"[a-z]+$"},
		"flags":{"type":"string","pattern":"^(?i)[a-z]+$"},
		"anchored":{"type":"string","pattern":"^[a-z]+$"},
		"anything":true,
		"list":{"type":"array","items":true},
		"either":{"anyOf":[true,{"type":"string","pattern":"b"}]},
		"map":{"type":"object","additionalProperties":{"type":"string","pattern":"c"}},
		"open":{"type":"object","additionalProperties":true},
		"defd":{"$ref":"#/$defs/d"}
	},"$defs":{"d":true},"required":["loose"],"additionalProperties":false}`
	// Any value is the list of every type: the converter reads {} as "any
	// object". A reference to true is any value too.
	anyV := `{"type":["string","number","boolean","null","object","array"]}`
	want := `{"type":"object","properties":{
		"loose":{"type":"string"},
		"starts":{"type":"string"},
		"ends":{"type":"string"},
		"flags":{"type":"string"},
		"anchored":{"type":"string","pattern":"^[a-z]+$"},
		"anything":` + anyV + `,
		"list":{"type":"array"},
		"either":{"anyOf":[` + anyV + `,{"type":"string"}]},
		"map":{"type":"object","additionalProperties":{"type":"string"}},
		"open":{"type":"object","additionalProperties":true},
		"defd":` + anyV + `
	},"required":["loose"],"additionalProperties":false}`
	u, err := NewUnion([]Tool{tool("norm", in)})
	if err != nil {
		t.Fatal(err)
	}
	if got := formatArgs(t, u.Format(), u, "norm"); !jsonEqual(t, got, []byte(want)) {
		t.Errorf("Format() args:\n got %s\nwant %s", got, want)
	}
	// Property order survives the rewrite.
	if keys := objectKeys(t, formatArgs(t, u.Format(), u, "norm"), "properties"); keys[0] != "loose" || keys[len(keys)-1] != "defd" {
		t.Errorf("Format() property order %v", keys)
	}
	// Schema() keeps every keyword as the plugin wrote it.
	fullWant := strings.Replace(in, `"#/$defs/d"`, `"#/oneOf/0/properties/args/$defs/d"`, 1)
	if got := formatArgs(t, u.Schema(), u, "norm"); !jsonEqual(t, got, []byte(fullWant)) {
		t.Errorf("Schema() args:\n got %s\nwant %s", got, fullWant)
	}
	// FinalResponse's answer pattern (\S) is not anchored: the grammar gets
	// minLength only, the validation both.
	if got := string(formatArgs(t, u.Format(), u, FinalAction)); strings.Contains(got, "pattern") {
		t.Errorf("Format() keeps the answer pattern: %s", got)
	}
	if got := string(formatArgs(t, u.Schema(), u, FinalAction)); !strings.Contains(got, `"pattern":"\\S"`) {
		t.Errorf("Schema() lost the answer pattern: %s", got)
	}
	compileRaw(t, u.Format())
	compileRaw(t, u.Schema())
}

// TestGrammarPatterns: only patterns the converter turns into a grammar
// that writes valid JSON string content are kept.
func TestGrammarPatterns(t *testing.T) {
	tests := []struct {
		pattern string
		kept    bool
	}{
		{`^[a-z]+$`, true},
		{`^(a|b)$`, true},
		{`^tt[0-9]{7,8}$`, true},
		{`^[A-Za-z0-9_-]+$`, true},
		{`^a\.b$`, true},
		{`^(ab)+c?$`, true},
		{`[a-z]+`, false},       // unanchored
		{`^a`, false},           // only start
		{`a$`, false},           // only end
		{`^(?=.*\d).+$`, false}, // lookahead
		{`^(?<!x)a$`, false},    // lookbehind
		{`^(?:ab)+$`, false},    // non-capturing group
		{`^(?i)abc$`, false},    // flags
		{``, false},             // empty
		{`^$`, false},           // empty sequence
		{`^.+$`, false},         // "." writes quotes and backslashes
		{`^[^a]+$`, false},      // so does a negated class
		{`^[ -~]+$`, false},     // a range holding the quote
		{`^\d+$`, false},        // the grammar parser knows no \d
		{`^a\.+$`, false},       // the converter repeats the whole run
		{`^a"b$`, false},        // a raw quote ends the JSON string
		{`^*a$`, false},         // a quantifier with nothing before it
		{`^a{2,1}$`, false},     // bounds the wrong way round
		{`^a{1000}$`, false},    // repetition too large
		{`^a+?$`, false},        // lazy
		{`^(a|)$`, false},       // empty alternative
		{`^(a$`, false},         // unbalanced
		{`^[]$`, false},         // empty class
		{`^é$`, false},          // not ASCII
		{`^a\$`, false},         // the closing $ is escaped
	}
	for _, tt := range tests {
		if got := grammarPattern(tt.pattern); got != tt.kept {
			t.Errorf("grammarPattern(%q) = %v, want %v", tt.pattern, got, tt.kept)
		}
	}
}

func TestDocs(t *testing.T) {
	raw, err := Reflect(reflectArgs{})
	if err != nil {
		t.Fatal(err)
	}
	u, err := NewUnion([]Tool{
		{Name: "search", Description: "Find   a movie\nby title.", Schema: raw},
		{Name: "status", Schema: json.RawMessage(`{"type":"object"}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `- search: Find a movie by title.
  - args.query (string, required): What to look for
  - args.kind (one of "movie", "tv", default "movie")
  - args.limit (integer >= 1, <= 20, default 5)
  - args.tags (array of string)
  - args.range (object with from, to, required)
- status
  args: {} (none)
- final_response: Answer the user and end the turn. Use it when you have what you need, or when no tool can help.
  - args.answer (string, required): The complete answer for the user in plain language
`
	if got := u.Docs(); got != want {
		t.Errorf("Docs():\n%s\nwant:\n%s", got, want)
	}
}

func TestCache(t *testing.T) {
	a := tool("alpha", objSchema)
	b := tool("beta", `{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"additionalProperties":false}`)
	var c Cache

	u1, err := c.Union([]Tool{a, b})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("same set, same order", func(t *testing.T) {
		if u2, err := c.Union([]Tool{a, b}); err != nil || u2 != u1 {
			t.Errorf("second call = %p, %v; want the cached %p", u2, err, u1)
		}
	})
	t.Run("equal copies", func(t *testing.T) {
		cp := []Tool{
			{Name: a.Name, Description: a.Description, Schema: bytes.Clone(a.Schema)},
			{Name: b.Name, Description: b.Description, Schema: bytes.Clone(b.Schema)},
		}
		if u2, err := c.Union(cp); err != nil || u2 != u1 {
			t.Errorf("equal copy = %p, %v; want the cached %p", u2, err, u1)
		}
	})
	t.Run("other order", func(t *testing.T) {
		// The key follows the given order, so another order may be built
		// again; what must hold is that it is the same union.
		u2, err := c.Union([]Tool{b, a})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(u2.Schema(), u1.Schema()) || !bytes.Equal(u2.Format(), u1.Format()) || !slices.Equal(u2.Actions(), u1.Actions()) {
			t.Error("another order of the same tools gives another union")
		}
		if u3, _ := c.Union([]Tool{b, a}); u3 != u2 {
			t.Error("the second order is not cached")
		}
	})
	t.Run("changed schema byte", func(t *testing.T) {
		b2 := b
		b2.Schema = bytes.Replace(bytes.Clone(b.Schema), []byte(`"minimum":1`), []byte(`"minimum":2`), 1)
		u2, err := c.Union([]Tool{a, b2})
		if err != nil {
			t.Fatal(err)
		}
		if u2 == u1 {
			t.Fatal("a changed schema gives the cached union")
		}
		reply := `{"thought":"t","action":"beta","args":{"n":1}}`
		if _, err := u1.Decode(reply); err != nil {
			t.Errorf("old union: %v", err)
		}
		if _, err := u2.Decode(reply); err == nil {
			t.Error("new union accepts n=1 against minimum 2")
		}
	})
	t.Run("changed schema byte in place", func(t *testing.T) {
		buf := bytes.Clone(b.Schema)
		set := []Tool{a, {Name: b.Name, Description: b.Description, Schema: buf}}
		before, err := c.Union(set)
		if err != nil {
			t.Fatal(err)
		}
		copy(buf[bytes.Index(buf, []byte(`"minimum":1`)):], `"minimum":3`)
		after, err := c.Union(set)
		if err != nil {
			t.Fatal(err)
		}
		if after == before {
			t.Error("a schema changed in the caller's buffer gives the cached union")
		}
	})
	t.Run("changed description", func(t *testing.T) {
		a2 := a
		a2.Description = "Another description."
		u2, err := c.Union([]Tool{a2, b})
		if err != nil || u2 == u1 || !bytes.Contains(u2.Schema(), []byte("Another description.")) {
			t.Errorf("changed description = %p, %v", u2, err)
		}
	})
	t.Run("invalid set", func(t *testing.T) {
		bad := []Tool{a, tool("bad", `{"type":"string"}`)}
		u, err1 := c.Union(bad)
		if err1 == nil || u != nil {
			t.Fatalf("Union(bad) = %v, %v", u, err1)
		}
		u, err2 := c.Union(bad)
		if u != nil || err2 == nil {
			t.Fatalf("second Union(bad) = %v, %v", u, err2)
		}
		if err2 != err1 { // the same error value: it was not built again
			t.Errorf("second call built again: %p vs %p", err2, err1)
		}
	})
	t.Run("no tools", func(t *testing.T) {
		u, err := c.Union(nil)
		if err != nil || !slices.Equal(u.Actions(), []string{FinalAction}) {
			t.Fatalf("Union(nil) = %v, %v", u, err)
		}
		if u2, _ := c.Union([]Tool{}); u2 != u {
			t.Error("nil and empty tool lists give different unions")
		}
	})
}

func TestCacheBounded(t *testing.T) {
	var c Cache
	first := []Tool{tool("t0", objSchema)}
	u0, err := c.Union(first)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2*maxCached; i++ {
		name := fmt.Sprintf("t%d", i)
		u, err := c.Union([]Tool{tool(name, objSchema)})
		if err != nil {
			t.Fatal(err)
		}
		if got := u.Actions()[0]; got != name {
			t.Fatalf("Union for %s has actions %v", name, u.Actions())
		}
		if n := len(c.entries); n > maxCached {
			t.Fatalf("%d entries, bound is %d", n, maxCached)
		}
	}
	u, err := c.Union(first)
	if err != nil || !slices.Equal(u.Actions(), u0.Actions()) {
		t.Errorf("after eviction: %v, %v", u, err)
	}
}

func TestCacheConcurrent(t *testing.T) {
	sets := [][]Tool{
		{tool("alpha", objSchema)},
		{tool("alpha", objSchema), tool("beta", objSchema)},
		{tool("bad", `{"type":"object","properties":{"a":{"type":"nosuch"}}}`)},
	}
	var c Cache
	const workers, rounds = 16, 50
	got := make([][]*Union, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[w] = make([]*Union, len(sets))
			for r := range rounds {
				i := (w + r) % len(sets)
				u, err := c.Union(sets[i])
				if (err != nil) != (i == 2) {
					t.Errorf("set %d: %v", i, err)
					return
				}
				if got[w][i] != nil && got[w][i] != u {
					t.Errorf("set %d: union changed between calls", i)
				}
				got[w][i] = u
				if u != nil {
					if _, err := u.Decode(`{"thought":"t","action":"alpha","args":{"q":"x"}}`); err != nil {
						t.Errorf("set %d: %v", i, err)
					}
					_ = u.Docs() + string(u.Schema()) + string(u.Format())
				}
			}
		}()
	}
	wg.Wait()
	for w := 1; w < workers; w++ {
		for i := range sets {
			if got[w][i] != got[0][i] {
				t.Errorf("workers 0 and %d got different unions for set %d", w, i)
			}
		}
	}
}
