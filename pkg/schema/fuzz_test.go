package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	fullOnce   sync.Once
	fullSchema *jsonschema.Schema
)

// FuzzDecode holds Decode to an independent oracle: the whole union compiled
// by santhosh v6. For any reply, Decode either returns a Decision whose
// action is one of the union's and whose object validates against the whole
// union, or a *ReplyError with sorted, distinct problems; and when the one
// object in the reply validates against the union, Decode accepts it.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases {
		if len(tc.reply) <= 4<<10 {
			f.Add(tc.reply)
		}
	}
	// Found while fuzzing or worth keeping near the edges.
	f.Add(`{"thought":"t","action":"search_movies","args":{"query":"x","query":5}}`)
	f.Add(`{"thought":"t","thought":null,"action":"get_status","args":{}}`)
	f.Add(`{"thought":"\ud800","action":"get_status","args":{}}`)
	f.Add(`{"thought":"t","action":"get_status","args":{}}]`)
	f.Add(`[{"thought":"t","action":"get_status","args":{}}`)
	f.Add("```json\n[\n{\"thought\":\"t\",\"action\":\"get_status\",\"args\":{}}\n]\n```")

	u := testUnion(f)
	fullOnce.Do(func() { fullSchema = compileRaw(f, u.Schema()) })
	f.Fuzz(func(t *testing.T, reply string) { checkDecode(t, u, reply) })
}

// FuzzDecodeStructured builds well-formed replies from fuzzed parts, so that
// the validation and explanation paths get most of the inputs (random text
// is rarely a JSON object).
func FuzzDecodeStructured(f *testing.F) {
	f.Add("t", uint8(1), "Dune", int64(2021), "movie", `[1,2]`, `{"a b":"x","deep":{"n":1}}`, "", uint8(0))
	f.Add("", uint8(0), "", int64(1800), "film", `[1,"2"]`, `{"deep":{}}`, "extra", uint8(3))
	f.Add(strings.Repeat("é", 1001), uint8(2), "x", int64(-1), "tv", `null`, `[]`, "args", uint8(5))
	f.Add("t", uint8(7), "x", int64(0), "", `"[]"`, `{"deep":{"n":"1"}}`, "", uint8(6))

	u := testUnion(f)
	fullOnce.Do(func() { fullSchema = compileRaw(f, u.Schema()) })
	f.Fuzz(func(t *testing.T, thought string, action uint8, query string, year int64, kind, ids, opts, extra string, shape uint8) {
		actions := append(slices.Clone(u.Actions()), "nope", "")
		args := map[string]any{"query": query, "year": year, "kind": kind}
		for k, v := range map[string]string{"ids": ids, "opts": opts} {
			if json.Valid([]byte(v)) {
				args[k] = json.RawMessage(v)
			}
		}
		if shape&1 != 0 {
			delete(args, "year")
		}
		if shape&2 != 0 {
			delete(args, "kind")
		}
		if extra != "" {
			args[extra] = true
		}
		env := map[string]any{"thought": thought, "action": actions[int(action)%len(actions)], "args": args}
		switch shape >> 2 & 3 {
		case 1:
			env["args"] = map[string]any{"answer": query} // final_response's shape
		case 2:
			env["thought"] = nil
		case 3:
			delete(env, "args")
		}
		b, err := json.Marshal(env)
		if err != nil {
			return // a field name or string that is not valid UTF-8
		}
		checkDecode(t, u, string(b))
	})
}

// checkDecode is the oracle of the Decode fuzz targets.
func checkDecode(t *testing.T, u *Union, reply string) {
	d, err := u.Decode(reply)
	raw, xerr := extract(reply)
	var unionErr error = errors.New("no object")
	if xerr == nil {
		inst, perr := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if perr != nil {
			t.Fatalf("extract returned invalid JSON %q: %v", raw, perr)
		}
		unionErr = fullSchema.Validate(inst)
	}
	if err == nil {
		if !slices.Contains(u.Actions(), d.Action) {
			t.Fatalf("Decision action %q is not one of %v", d.Action, u.Actions())
		}
		if xerr != nil {
			t.Fatalf("Decode accepted a reply extract refuses: %v", xerr)
		}
		if unionErr != nil {
			t.Fatalf("Decode accepted %q, which the whole union refuses: %v", raw, unionErr)
		}
		var env map[string]json.RawMessage
		if err := json.Unmarshal(raw, &env); err != nil || !bytes.Equal(env["args"], d.Args) {
			t.Fatalf("Decision args %s are not the reply's %s", d.Args, env["args"])
		}
		return
	}
	var re *ReplyError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T) is not a *ReplyError", err, err)
	}
	if len(re.Problems) == 0 {
		t.Fatal("ReplyError without problems")
	}
	if !slices.IsSorted(re.Problems) || len(slices.Compact(slices.Clone(re.Problems))) != len(re.Problems) {
		t.Fatalf("problems not sorted and distinct: %q", re.Problems)
	}
	for _, p := range re.Problems {
		if p == "" || !utf8.ValidString(p) {
			t.Fatalf("empty or invalid problem in %q", re.Problems)
		}
	}
	if unionErr == nil {
		t.Fatalf("Decode refused %q, which the whole union accepts: %q", raw, re.Problems)
	}
}

// FuzzObjectSpans checks the scanner's invariants on any text.
func FuzzObjectSpans(f *testing.F) {
	for _, s := range []string{"", "{}", `x {"a":"}"} y {`, `{"a":"\"}"}{}`, "}{", `{"é":"\\"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spans, open := objectSpans(s)
		end := 0
		for _, sp := range spans {
			if sp[0] < end || sp[1] <= sp[0] || sp[1] > len(s) {
				t.Fatalf("spans %v out of order or bounds in %q", spans, s)
			}
			if s[sp[0]] != '{' || s[sp[1]-1] != '}' {
				t.Fatalf("span %v of %q is not {...}", sp, s)
			}
			end = sp[1]
		}
		if open != -1 && (open < end || open >= len(s) || s[open] != '{') {
			t.Fatalf("open %d after spans %v in %q", open, spans, s)
		}
		// A valid JSON object is found whole, alone.
		if t0 := strings.TrimSpace(s); len(t0) > 0 && t0[0] == '{' && json.Valid([]byte(t0)) {
			if spans, open := objectSpans(t0); open != -1 || !slices.Equal(spans, [][2]int{{0, len(t0)}}) {
				t.Fatalf("valid object %q gives spans %v, open %d", t0, spans, open)
			}
		}
	})
}

// FuzzExtractWrapped puts a valid reply between any two pieces of prose
// without braces: extract must find exactly that object, unless the prose
// opens an array right before it (then it is an array's element).
func FuzzExtractWrapped(f *testing.F) {
	f.Add("", "")
	f.Add("Sure:\n```json\n", "\n```")
	f.Add(`He said "hi`, `" and left.`)
	f.Add("[note] ", " (done)")
	f.Add("é\u00a0", "\u2028")
	f.Add("\xe5", "\x98\x98") // valid UTF-8 together, not apart
	f.Fuzz(func(t *testing.T, before, after string) {
		reply := before + valid + after
		if strings.ContainsAny(before, "{}") || strings.ContainsAny(after, "{}") || !utf8.ValidString(reply) || len(reply) > MaxReplyBytes {
			return
		}
		raw, err := extract(reply)
		inArray := strings.HasSuffix(strings.TrimRightFunc(before, unicode.IsSpace), "[")
		if inArray {
			if err == nil {
				t.Fatalf("extract(%q) dug an object out of an array", reply)
			}
			return
		}
		if err != nil {
			t.Fatalf("extract(%q) = %v", reply, err)
		}
		if string(raw) != valid {
			t.Fatalf("extract(%q) = %s, want %s", reply, raw, valid)
		}
	})
}
