package s2g

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestConverter: the driver tells what Ollama accepts from what it refuses,
// the refusals of issue 11 included, with the converter's own reason.
func TestConverter(t *testing.T) {
	c := Build(t)
	cases := []struct {
		schema string
		want   string // "" accepted, else a piece of the reason
	}{
		{`{"type":"object","properties":{"a":{"type":"string","maxLength":3}},"required":["a"]}`, ""},
		{`{"oneOf":[{"type":"integer","minimum":1,"maximum":9},{"type":"null"}]}`, ""},
		{`{"anyOf":[{"type":"integer"},{"minimum":2}]}`, `Unrecognized schema: {"minimum":2}`},
		{`{"type":"object","properties":{"a":{"description":"x"}}}`, "Unrecognized schema"},
		{`{"items":[true,false]}`, "Unrecognized schema: true"},
		{`{"$ref":"#/$defs/a%20b","$defs":{"a b":{"type":"string"}}}`, "Error resolving ref"},
		{`{"type":"object","properties":{"$ref":{"type":"string"}}}`, "type must be string"},
		{`{"type":"string","pattern":"abc"}`, "Pattern must start with '^'"},
		{`["not an object"]`, "expected a JSON Schema object"},
		{`{"type":"array","items":{"type":"string","pattern":"^(a|b)` + strings.Repeat("{2}", 1) + `$"}}`, ""},
	}
	var in [][]byte
	for _, tc := range cases {
		in = append(in, []byte(tc.schema))
	}
	errs, err := c.Check(in...)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		switch {
		case tc.want == "" && errs[i] != nil:
			t.Errorf("%s: refused: %v", tc.schema, errs[i])
		case tc.want != "" && (errs[i] == nil || !errors.Is(errs[i], ErrRefused) || !strings.Contains(errs[i].Error(), tc.want)):
			t.Errorf("%s: got %v, want a refusal saying %q", tc.schema, errs[i], tc.want)
		}
	}
}

// TestGrammarTooBig: a grammar past the buffer Ollama converts into is cut
// there, so it counts as refused.
func TestGrammarTooBig(t *testing.T) {
	c := Build(t)
	// Integer ranges cost the grammar a hundred times their bytes.
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{"type":"integer","minimum":%d,"maximum":%d}`, i, 123456789+i, 987654321987-i)
	}
	b.WriteString(`}}`)
	errs, err := c.Check([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "over Ollama's buffer") {
		t.Errorf("got %v", errs[0])
	}
}
