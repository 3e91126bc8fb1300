package schema

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"lower case", "search", true},
		{"with digits and underscores", "search_movies_2", true},
		{"one letter", "a", true},
		{"64 characters", "a" + strings.Repeat("b", 63), true},
		{"65 characters", "a" + strings.Repeat("b", 64), false},
		{"empty", "", false},
		{"upper case", "Search", false},
		{"upper case inside", "searchMovies", false},
		{"leading digit", "1search", false},
		{"leading underscore", "_search", false},
		{"hyphen", "search-movies", false},
		{"space", "search movies", false},
		{"dot", "search.movies", false},
		{"non-ASCII letter", "recherché", false},
		{"trailing newline", "search\n", false},
		{"final_response is reserved", FinalAction, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckName(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckName(%q) = %v, want ok=%v", tt.in, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), strconv.Quote(tt.in)) {
				t.Errorf("error %q does not name %q", err, tt.in)
			}
		})
	}
}

type reflectNested struct {
	From int `json:"from" jsonschema:"minimum=1900"`
	To   int `json:"to,omitempty"`
}

type reflectArgs struct {
	Query  string        `json:"query" jsonschema:"description=What to look for,minLength=1"`
	Kind   string        `json:"kind,omitempty" jsonschema:"enum=movie,enum=tv,default=movie"`
	Limit  int           `json:"limit,omitempty" jsonschema:"minimum=1,maximum=20,default=5"`
	Tags   []string      `json:"tags,omitempty"`
	Range  reflectNested `json:"range"`
	hidden int           // unexported: not in the schema
}

// TestReflect checks the schema of a tagged argument struct keyword by keyword.
func TestReflect(t *testing.T) {
	raw, err := Reflect(reflectArgs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{`"$ref"`, `"$defs"`, `"$schema"`, `"$id"`, `"hidden"`} {
		if strings.Contains(string(raw), banned) {
			t.Errorf("schema contains %s: %s", banned, raw)
		}
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"required":             []any{"query", "range"},
		"properties": map[string]any{
			"query": map[string]any{"type": "string", "minLength": 1.0, "description": "What to look for"},
			"kind":  map[string]any{"type": "string", "enum": []any{"movie", "tv"}, "default": "movie"},
			"limit": map[string]any{"type": "integer", "minimum": 1.0, "maximum": 20.0, "default": 5.0},
			"tags":  map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			"range": map[string]any{
				"type":                 "object",
				"additionalProperties": false,
				"required":             []any{"from"},
				"properties": map[string]any{
					"from": map[string]any{"type": "integer", "minimum": 1900.0},
					"to":   map[string]any{"type": "integer"},
				},
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("schema:\n%s\nwant:\n%s", g, w)
	}
	// Properties keep the struct's field order (Ollama emits them in it).
	if keys := objectKeys(t, raw, "properties"); !slices.Equal(keys, []string{"query", "kind", "limit", "tags", "range"}) {
		t.Errorf("property order %v", keys)
	}

	// A pointer to the struct gives the same schema.
	ptr, err := Reflect(&reflectArgs{})
	if err != nil || string(ptr) != string(raw) {
		t.Errorf("Reflect(&v) = %s, %v; want %s", ptr, err, raw)
	}
	// And the result is accepted by NewUnion as it is.
	if err := CheckTool(Tool{Name: "search", Schema: raw}); err != nil {
		t.Errorf("CheckTool(reflected) = %v", err)
	}
}

type recursiveList struct {
	Value int            `json:"value"`
	Next  *recursiveList `json:"next,omitempty"`
}

type recursiveTree struct {
	Children []recursiveTree `json:"children"`
}

type recursiveMap struct {
	Sub map[string]*recursiveMapInner `json:"sub"`
}

type recursiveMapInner struct {
	Back []recursiveMap `json:"back"`
}

type sharedTwice struct {
	A reflectNested `json:"a"`
	B reflectNested `json:"b"` // the same type twice is not recursion
}

func TestReflectRefuses(t *testing.T) {
	tests := []struct {
		name string
		v    any
		msg  string
	}{
		{"recursive through a pointer", recursiveList{}, "recursive"},
		{"recursive through a slice", recursiveTree{}, "recursive"},
		{"mutually recursive through a map", &recursiveMap{}, "recursive"},
		{"int", 42, "not a struct"},
		{"string", "x", "not a struct"},
		{"slice of structs", []reflectArgs{}, "not a struct"},
		{"map", map[string]string{}, "not a struct"},
		{"nil", nil, "not a struct"},
		{"nil pointer to int", (*int)(nil), "not a struct"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Reflect(tt.v)
			if err == nil {
				t.Fatalf("Reflect(%T) = %s, want an error", tt.v, b)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
		})
	}
	if _, err := Reflect(sharedTwice{}); err != nil {
		t.Errorf("Reflect(sharedTwice) = %v; a type used twice is not recursive", err)
	}
}

func TestFinalResponseSchema(t *testing.T) {
	var got map[string]any
	if err := json.Unmarshal(finalSchema, &got); err != nil {
		t.Fatal(err)
	}
	answer := got["properties"].(map[string]any)["answer"].(map[string]any)
	if answer["type"] != "string" || answer["minLength"] != 1.0 || answer["pattern"] != `\S` {
		t.Errorf("answer schema %v", answer)
	}
	if !reflect.DeepEqual(got["required"], []any{"answer"}) || got["additionalProperties"] != false {
		t.Errorf("final schema %s", finalSchema)
	}
}

func TestDecisionAnswer(t *testing.T) {
	tests := []struct {
		name  string
		d     Decision
		final bool
		want  string
	}{
		{"final", Decision{Action: FinalAction, Args: json.RawMessage(`{"answer":"Dune (2021)"}`)}, true, "Dune (2021)"},
		{"escaped text", Decision{Action: FinalAction, Args: json.RawMessage(`{"answer":"a\nb \u00e9"}`)}, true, "a\nb é"},
		{"tool call", Decision{Action: "search", Args: json.RawMessage(`{"query":"x"}`)}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.d.Final(); got != tt.final {
				t.Errorf("Final() = %v", got)
			}
			if got := tt.d.Answer(); got != tt.want {
				t.Errorf("Answer() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestExample(t *testing.T) {
	got := Example(FinalAction, map[string]string{"answer": "yes"})
	want := `{"thought":"...","action":"final_response","args":{"answer":"yes"}}`
	if got != want {
		t.Errorf("Example = %s, want %s", got, want)
	}
}

// objectKeys returns the member names of the object at path (a chain of
// object keys) inside raw, in the order they are written. It reads tokens
// itself so that it does not share code with the package's ordered nodes.
func objectKeys(t testing.TB, raw []byte, path ...string) []string {
	t.Helper()
	for _, p := range path {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("objectKeys: %v", err)
		}
		raw = m[p]
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("objectKeys: %s is not an object", raw)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}
