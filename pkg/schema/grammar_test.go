package schema

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/mmcpd/mmcpd/internal/needs"
	"github.com/mmcpd/mmcpd/internal/s2g"
)

// trickyCase is a tool argument schema of the kind real tools declare (MCP
// servers, Pydantic, zod, OpenAPI generators) and replies it allows.
type trickyCase struct {
	name   string
	schema string
	valid  []string // args the schema allows: the grammar must allow them too
}

var tricky = []trickyCase{
	{"no_type_anyof", `{"type":"object","properties":{"n":{"anyOf":[{"type":"integer"},{"minimum":2}]}}}`,
		[]string{`{"n":1}`, `{"n":2.5}`, `{"n":"x"}`}},
	{"only_max_length", `{"type":"object","properties":{"s":{"maxLength":2}}}`, []string{`{"s":"ab"}`, `{"s":7}`, `{"s":[1,2,3]}`}},
	{"only_annotations", `{"type":"object","properties":{"a":{"title":"t","default":1},"b":{"description":"x"},"c":{"uniqueItems":true}}}`,
		[]string{`{"a":{"x":[1]},"b":null,"c":[1,2]}`}},
	{"pydantic_any", `{"type":"object","properties":{"x":{"title":"X"},"y":{"not":{"type":"null"}},"z":{"if":{"type":"string"},"then":{"minLength":1}}},"dependencies":{"x":["y"]}}`,
		[]string{`{"x":1,"y":2,"z":"a"}`, `{"z":5}`}},
	{"zod_any_describe", `{"type":"object","properties":{"v":{"description":"anything"}},"required":["v"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`,
		[]string{`{"v":{"deep":[true]}}`, `{"v":"s"}`}},
	{"tuple_booleans", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"t":{"type":"array","items":[true,false]}}}`,
		[]string{`{"t":[]}`, `{"t":[{"a":1}]}`, `{"t":["x"]}`}},
	{"tuple_2020", `{"type":"object","properties":{"p":{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":1}}}`,
		[]string{`{"p":["a"]}`, `{"p":["a",2]}`}},
	{"tuple_open", `{"type":"object","properties":{"p":{"prefixItems":[{"type":"string"}],"items":{"type":"boolean"}}}}`,
		[]string{`{"p":["a",true,false]}`, `{"p":3}`}},
	{"percent_ref", `{"type":"object","$defs":{"a b":{"type":"string","enum":["x","y"]},"c/d":{"type":"integer"},"e~f":{"type":"boolean"}},
		"properties":{"p":{"$ref":"#/$defs/a%20b"},"q":{"$ref":"#/$defs/c~1d"},"r":{"$ref":"#/$defs/e~0f"}},"required":["p"]}`,
		[]string{`{"p":"x","q":3,"r":true}`}},
	{"property_named_ref", `{"type":"object","properties":{"$ref":{"type":"string"},"id":{"type":"integer"}},"required":["$ref"],"additionalProperties":false}`,
		[]string{`{"$ref":"#/x","id":1}`, `{"$ref":"y"}`}},
	{"ref_in_const", `{"type":"object","properties":{"c":{"const":{"$ref":"#/nowhere"}},"e":{"enum":[{"$ref":1},2]}}}`,
		[]string{`{"c":{"$ref":"#/nowhere"},"e":2}`, `{"e":{"$ref":1}}`}},
	{"recursive", `{"type":"object","$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"}},"name":{"type":"string"}}}},
		"properties":{"root":{"$ref":"#/$defs/node"},"self":{"$ref":"#"}}}`,
		[]string{`{"root":{"name":"a","kids":[{"kids":[]}]},"self":{"self":{}}}`}},
	{"anchor_ref", `{"type":"object","$defs":{"k":{"$anchor":"kind","enum":["movie","tv"]}},"properties":{"kind":{"$ref":"#kind"}}}`,
		[]string{`{"kind":"tv"}`}},
	{"allof_pydantic", `{"type":"object","$defs":{"Color":{"type":"string","enum":["red","blue"]}},"properties":{"c":{"allOf":[{"$ref":"#/$defs/Color"}],"description":"c","default":"red"}}}`,
		[]string{`{"c":"blue"}`}},
	{"allof_objects", `{"type":"object","properties":{"o":{"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"properties":{"b":{"type":"integer"}},"required":["b"]}]}}}`,
		[]string{`{"o":{"a":"x","b":1}}`}},
	{"oneof_with_siblings", `{"type":"object","properties":{"q":{"type":"string"},"id":{"type":"integer"}},"oneOf":[{"required":["q"]},{"required":["id"]}]}`,
		[]string{`{"q":"x"}`, `{"id":1}`}},
	{"required_undeclared", `{"type":"object","required":["x","y-1"],"patternProperties":{"^y-":{"type":"integer"}},"additionalProperties":{"type":"string"}}`,
		[]string{`{"x":"s","y-1":2}`}},
	{"type_lists", `{"type":"object","properties":{"n":{"type":["string","null"],"minLength":1},"m":{"type":["integer","number"],"minimum":0.5}}}`,
		[]string{`{"n":null,"m":0.7}`, `{"n":"a","m":3}`}},
	{"draft4_bounds", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"i":{"type":"integer","minimum":1,"exclusiveMinimum":true,"maximum":10}}}`,
		[]string{`{"i":2}`, `{"i":10}`}},
	{"wide_bounds", `{"type":"object","properties":{"i":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991},"s":{"type":"string","minLength":5000},"a":{"type":"array","maxItems":100000}}}`,
		[]string{`{"i":5}`, `{"a":[]}`}},
	{"bad_patterns", `{"type":"object","properties":{"a":{"type":"string","pattern":"^.+$"},"b":{"type":"string","pattern":"^\\d{3}$"},"c":{"type":"string","pattern":"^[^\"]*$"},"d":{"type":"string","pattern":"^[a-z]{2}$"}}}`,
		[]string{`{"a":"x\"y","b":"123","c":"ok","d":"ab"}`}},
	{"formats", `{"type":"object","properties":{"d":{"type":"string","format":"date"},"t":{"type":"string","format":"date-time"},"e":{"type":"string","format":"email"},"u":{"format":"uuid"}}}`,
		[]string{`{"d":"2024-01-31","t":"2024-01-31T10:00:00Z","e":"a@b.co","u":"123e4567-e89b-12d3-a456-426614174000"}`}},
	{"many_ranges", `{"type":"object","properties":{` + manyRanges(30) + `}}`, []string{`{"p0":5,"p29":123456}`}},
	{"nested_anyof_siblings", `{"type":"object","properties":{"x":` + strings.Repeat(`{"type":["object","string"],"anyOf":[{"minLength":1},{"maxLength":9},{"properties":{"a":`, 12) + `{"type":"string"}` + strings.Repeat(`}}]}`, 12) + `}}`,
		[]string{`{"x":"s"}`}},
	{"numbers", `{"type":"object","properties":{"big":{"enum":[1e400,2]},"f":{"type":"integer","minimum":1.5,"maximum":3.5}}}`,
		[]string{`{"big":2,"f":2}`}},
	{"min_over_max", `{"type":"object","properties":{"s":{"type":"string","minLength":5,"maxLength":2},"a":{"type":"array","minItems":3,"maxItems":1}}}`, nil},
	{"false_property", `{"type":"object","properties":{"gone":false,"here":{"type":"string"}},"additionalProperties":false}`,
		[]string{`{"here":"x"}`}},
	{"deep", `{"type":"object","properties":{"a":` + strings.Repeat(`{"type":"array","items":`, 40) + `{"type":"string"}` + strings.Repeat(`}`, 40) + `}}`,
		[]string{`{"a":` + strings.Repeat("[", 40) + `"x"` + strings.Repeat("]", 40) + `}`}},
	{"nested_resource", `{"type":"object","$defs":{"inner":{"$id":"https://x.invalid/inner.json","$defs":{"v":{"type":"integer"}},"type":"object","properties":{"v":{"$ref":"#/$defs/v"}}}},"properties":{"i":{"$ref":"#/$defs/inner"},"j":{"$ref":"https://x.invalid/inner.json"}}}`,
		[]string{`{"i":{"v":1},"j":{"v":2}}`}},
	{"mcp_filesystem_like", `{"type":"object","properties":{"path":{"type":"string"},"edits":{"type":"array","items":{"type":"object","properties":{"oldText":{"type":"string","description":"Text to search for - must match exactly"},"newText":{"type":"string"}},"required":["oldText","newText"],"additionalProperties":false}},"dryRun":{"type":"boolean","default":false}},"required":["path","edits"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`,
		[]string{`{"path":"/a","edits":[{"oldText":"a","newText":"b"}]}`}},
}

// refusedTricky are schemas no union takes, each refused alone with why.
var refusedTricky = []struct{ name, schema, refuse string }{
	{"type_any", `{"type":"object","properties":{"u":{"type":"any"}}}`, "schema does not compile"},
	{"format_object", `{"type":"object","properties":{"x":{"type":"string","format":{"weird":1}}}}`, "schema does not compile"},
	{"not_schema_values", `{"type":"object","properties":{"x":{"type":"string","items":7,"properties":[],"anyOf":[]}}}`, "schema does not compile"},
	{"not_object", `{"type":"string"}`, "must be an object schema"},
	{"duplicate_key", `{"type":"object","properties":{"a":{"type":"string","type":"integer"}}}`, `has the key "type" twice`},
	{"external_ref", `{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`, "external references are not allowed"},
}

// TestTrickySchemasJoinTheUnion: every tricky schema joins a union whose
// format Ollama's converter accepts, alone and all together, and the format
// allows whatever the schema allows.
func TestTrickySchemasJoinTheUnion(t *testing.T) {
	conv := s2g.Build(t)
	var tools []Tool
	var formats [][]byte
	for i, tc := range tricky {
		tl := Tool{Name: fmt.Sprintf("t%02d_%s", i, tc.name), Description: tc.name, Schema: json.RawMessage(tc.schema)}
		if err := CheckTool(tl); err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
			continue
		}
		tools = append(tools, tl)
		u, err := NewUnion([]Tool{tl})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		formats = append(formats, u.Format())
		checkSuperset(t, u, tl.Name, tc.valid, true)
	}
	for _, tc := range refusedTricky {
		tl := Tool{Name: tc.name, Schema: json.RawMessage(tc.schema)}
		if err := CheckTool(tl); err == nil || !strings.Contains(err.Error(), tc.refuse) {
			t.Errorf("%s: CheckTool = %v, want a refusal saying %q", tc.name, err, tc.refuse)
		}
		if _, err := NewUnion([]Tool{tl}); err == nil {
			t.Errorf("%s: CheckTool refuses it, NewUnion takes it", tc.name)
		}
	}
	all, err := NewUnion(tools)
	if err != nil {
		t.Fatal(err)
	}
	formats = append(formats, all.Format())
	errs, err := conv.Check(formats...)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			what := "the union of all"
			if i < len(tools) {
				what = tools[i].Name
			}
			t.Errorf("%s: %v\nformat: %s", what, e, formats[i])
		}
	}
	// The raw schemas themselves are what Ollama would refuse: the corpus
	// tests something.
	refusedRaw := 0
	var raw [][]byte
	for _, tl := range tools {
		raw = append(raw, tl.Schema)
	}
	rawErrs, err := conv.Check(raw...)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rawErrs {
		if e != nil {
			refusedRaw++
		}
	}
	if refusedRaw < 10 {
		t.Errorf("only %d of %d tricky schemas are refused as they are", refusedRaw, len(raw))
	}
}

// checkSuperset: each args the tool's own schema accepts (Decode) is valid
// against the format copy too (read as JSON Schema).
func checkSuperset(t *testing.T, u *Union, name string, args []string, mustBeValid bool) {
	t.Helper()
	if len(args) == 0 {
		return
	}
	format := compileRaw(t, u.Format())
	for _, a := range args {
		reply := `{"thought":"t","action":"` + name + `","args":` + a + `}`
		if _, err := u.Decode(reply); err != nil {
			if mustBeValid {
				t.Errorf("%s: the schema refuses %s: %v", name, a, err)
			}
			continue
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(reply))
		if err != nil {
			t.Fatal(err)
		}
		if err := format.Validate(inst); err != nil {
			t.Errorf("%s: the format copy refuses %s, which the schema allows:\n%v\nformat: %s", name, a, err, u.Format())
		}
	}
}

// TestSchemaTestSuite: the schemas of the JSON Schema Test Suite (Debian's
// json-schema-test-suite), each as a tool's argument: every one the union
// takes gets a format Ollama accepts, and the format allows every instance
// the schema allows.
func TestSchemaTestSuite(t *testing.T) {
	root := needs.File(t, "/usr/share/json-schema-test-suite/tests", "the JSON Schema Test Suite", "json-schema-test-suite")
	conv := s2g.Build(t)
	drafts := map[string]string{
		"draft4": "http://json-schema.org/draft-04/schema#",
		"draft6": "http://json-schema.org/draft-06/schema#",
		"draft7": "http://json-schema.org/draft-07/schema#",
	}
	var names []string
	var formats [][]byte
	joined, refused := 0, map[string]int{}
	for draft, uri := range drafts {
		files, _ := filepath.Glob(filepath.Join(root, draft, "*.json"))
		more, _ := filepath.Glob(filepath.Join(root, draft, "optional", "*.json"))
		more2, _ := filepath.Glob(filepath.Join(root, draft, "optional", "format", "*.json"))
		files = append(append(files, more...), more2...)
		if len(files) == 0 {
			continue
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var groups []struct {
				Description string          `json:"description"`
				Schema      json.RawMessage `json:"schema"`
				Tests       []struct {
					Data  json.RawMessage `json:"data"`
					Valid bool            `json:"valid"`
				} `json:"tests"`
			}
			if err := json.Unmarshal(b, &groups); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for gi, g := range groups {
				tl, err := suiteTool(fmt.Sprintf("s%d", len(names)), uri, g.Schema)
				if err != nil {
					t.Fatalf("%s #%d: %v", f, gi, err)
				}
				if err := CheckTool(tl); err != nil {
					refused[firstLine(err.Error())]++
					continue
				}
				u, err := NewUnion([]Tool{tl})
				if err != nil {
					t.Errorf("%s #%d (%s): CheckTool takes it, NewUnion refuses: %v", f, gi, g.Description, err)
					continue
				}
				joined++
				names = append(names, fmt.Sprintf("%s/%s #%d (%s)", draft, filepath.Base(f), gi, g.Description))
				formats = append(formats, u.Format())
				var args []string
				for _, c := range g.Tests {
					args = append(args, `{"v":`+string(c.Data)+`}`)
				}
				checkSuperset(t, u, tl.Name, args, false)
			}
		}
	}
	errs, err := conv.Check(formats...)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Errorf("%s: %v\nformat: %s", names[i], e, formats[i])
		}
	}
	t.Logf("%d suite schemas joined a union; refused: %v", joined, refused)
	if joined < 300 {
		t.Errorf("only %d suite schemas joined a union", joined)
	}
}

// suiteTool wraps a suite schema as the property v of a tool's arguments,
// its local references pointed at its new place.
func suiteTool(name, draft string, schema json.RawMessage) (Tool, error) {
	n, err := parseNode(schema)
	if err != nil {
		return Tool{}, err
	}
	rebase(n, "#/properties/v")
	wrapped := obj(member{"$schema", str(draft)}, member{"type", lit(`"object"`)},
		member{"properties", obj(member{"v", n})}, member{"required", lit(`["v"]`)})
	return Tool{Name: name, Description: "suite", Schema: wrapped.bytes()}, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if i := strings.Index(s, ": "); i > 0 && strings.HasPrefix(s, "tool ") {
		s = s[i+2:]
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// manyRanges declares n integers with wide ranges: their grammar is many
// times their size, and the copy keeps only some.
func manyRanges(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"p%d":{"type":"integer","minimum":%d,"maximum":%d}`, i, i, 1000000-i))
	}
	return strings.Join(parts, ",")
}

// TestFormatsAsserted pins which formats validation asserts (SPEC lists
// them): each refuses a bad value. Others, idn-email and idn-hostname
// among them, are annotations: any string passes.
func TestFormatsAsserted(t *testing.T) {
	asserted := map[string]string{
		"date": "2024-13-01", "time": "25:00:00Z", "date-time": "2024-01-01 10:00", "duration": "P1X",
		"period": "x", "email": "no-at-sign", "hostname": "-bad-.example", "ipv4": "300.1.1.1", "ipv6": "1::2::3",
		"uri": "no scheme", "iri": "no scheme", "uri-reference": "\\\\bad", "iri-reference": "\\\\bad",
		"uri-template": "{unclosed", "json-pointer": "no-slash", "relative-json-pointer": "/x", "uuid": "123",
		"semver": "1.2", "regex": "(",
	}
	unchecked := map[string]string{"idn-email": "no-at-sign", "idn-hostname": "-bad-", "unknown-format": "x"}
	check := func(format, value string, wantValid bool) {
		v, _ := json.Marshal(value)
		tl := Tool{Name: "f", Schema: json.RawMessage(`{"type":"object","properties":{"v":{"type":"string","format":"` + format + `"}}}`)}
		a, err := CompileArgs(tl)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if probs := a.Check([]byte(`{"v":` + string(v) + `}`)); (len(probs) == 0) != wantValid {
			t.Errorf("format %s, value %q: problems %q, want valid=%v", format, value, probs, wantValid)
		}
	}
	for f, bad := range asserted {
		check(f, bad, false)
	}
	for f, bad := range unchecked {
		check(f, bad, true)
	}
}
