package schema

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

// moviesSchema is the arguments of search_movies in the decode tests: a
// required string, bounded integers, an enum, an array, and nested objects
// with a field name that needs quoting in a path.
const moviesSchema = `{"type":"object","properties":{
	"query":{"type":"string","minLength":1},
	"year":{"type":"integer","minimum":1900,"maximum":2100},
	"kind":{"type":"string","enum":["movie","tv"]},
	"ids":{"type":"array","items":{"type":"integer"}},
	"count":{"type":"integer"},
	"code":{"type":"string","maxLength":3},
	"opts":{"type":"object","properties":{
		"a b":{"type":"string"},
		"deep":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}
	},"additionalProperties":false}
},"required":["query"],"additionalProperties":false}`

var (
	decodeUnionOnce sync.Once
	decodeUnion     *Union
	decodeUnionErr  error
)

// testUnion is the union of the decode tests, built once (fuzzing calls it
// for every input).
func testUnion(t testing.TB) *Union {
	t.Helper()
	decodeUnionOnce.Do(func() {
		decodeUnion, decodeUnionErr = NewUnion([]Tool{
			{Name: "search_movies", Description: "Search movies.", Schema: json.RawMessage(moviesSchema)},
			{Name: "get_status", Description: "Daemon status.", Schema: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)},
		})
	})
	if decodeUnionErr != nil {
		t.Fatal(decodeUnionErr)
	}
	return decodeUnion
}

// problemsOf returns the problems of a Decode error (nil for no error).
func problemsOf(t testing.TB, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var re *ReplyError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T) is not a *ReplyError", err, err)
	}
	return re.Problems
}

const (
	listing   = "get_status, search_movies, final_response"
	validArgs = `{"query":"Dune","year":2021}`
	valid     = `{"thought":"Look it up.","action":"search_movies","args":` + validArgs + `}`
	truncated = `{"thought":"t","action":"search_movies","args":{"query":"Du`
	extraTop  = "unknown field; the reply has exactly thought, action and args"
)

// search builds a search_movies reply with the given args.
func search(args string) string {
	return `{"thought":"t","action":"search_movies","args":` + args + `}`
}

type decodeCase struct {
	name  string
	reply string
	want  *Decision // nil: want exactly problems
	probs []string
}

func decided(thought, action, args string) *Decision {
	return &Decision{Thought: thought, Action: action, Args: json.RawMessage(args)}
}

var decodeCases = []decodeCase{
	// Valid replies, and what models wrap them in.
	{name: "valid plain", reply: valid, want: decided("Look it up.", "search_movies", validArgs)},
	{name: "valid in a json fence", reply: "```json\n" + valid + "\n```", want: decided("Look it up.", "search_movies", validArgs)},
	{name: "valid in a fence without language", reply: "```\n" + valid + "\n```", want: decided("Look it up.", "search_movies", validArgs)},
	{name: "valid with prose before and after", reply: "Sure, here is my reply:\n" + valid + "\nLet me know if that works.", want: decided("Look it up.", "search_movies", validArgs)},
	{name: "valid with surrounding whitespace", reply: "\n\t " + valid + " \r\n", want: decided("Look it up.", "search_movies", validArgs)},
	{name: "prose braces that are not JSON", reply: "I use {braces} and {\"not\": json} in prose. " + valid + " {sic}", want: decided("Look it up.", "search_movies", validArgs)},
	{name: "braces and quotes inside strings", reply: `Reply: {"thought":"use { and } and \"quotes\" }","action":"get_status","args":{}}`, want: decided(`use { and } and "quotes" }`, "get_status", `{}`)},
	{name: "whitespace before args", reply: "{\"thought\":\"t\",\"action\":\"get_status\",\"args\" :\n  {}}", want: decided("t", "get_status", `{}`)},
	{name: "members in another order", reply: `{"args":{"query":"x"},"action":"search_movies","thought":"t"}`, want: decided("t", "search_movies", `{"query":"x"}`)},
	{name: "final response", reply: `{"thought":"Done.","action":"final_response","args":{"answer":"Dune (2021)."}}`, want: decided("Done.", FinalAction, `{"answer":"Dune (2021)."}`)},
	{name: "large number kept exactly", reply: search(`{"query":"x","count":12345678901234567890}`), want: decided("t", "search_movies", `{"query":"x","count":12345678901234567890}`)},
	{name: "integer written as a decimal", reply: search(`{"query":"x","year":2.021e3}`), want: decided("t", "search_movies", `{"query":"x","year":2.021e3}`)},
	{name: "empty thought", reply: `{"thought":"","action":"get_status","args":{}}`, want: decided("", "get_status", `{}`)},
	{name: "thought of 1000 two-byte characters", reply: `{"thought":"` + strings.Repeat("é", 1000) + `","action":"get_status","args":{}}`, want: decided(strings.Repeat("é", 1000), "get_status", `{}`)},

	// Where the JSON object is not one.
	{name: "two objects", reply: valid + "\n" + valid, probs: []string{"reply: holds 2 JSON objects; send exactly one"}},
	{name: "truncated", reply: truncated, probs: []string{"reply: the JSON object starting at byte 0 is incomplete (cut off?); send the whole object"}},
	{name: "truncated after blank lines and prose", reply: "\n\nSure: " + truncated, probs: []string{"reply: the JSON object starting at byte 8 is incomplete (cut off?); send the whole object"}},
	{name: "valid object then a lone brace", reply: valid + " {", probs: []string{"reply: the JSON object starting at byte 87 is incomplete (cut off?); send the whole object"}},
	{name: "no JSON at all", reply: "I cannot help with that.", probs: []string{"reply: no JSON object found; send one JSON object and nothing else"}},
	{name: "single quotes", reply: `{'thought': 't'}`, probs: []string{`reply: invalid JSON: invalid character '\'' looking for beginning of object key string`}},
	{name: "trailing comma in a fence", reply: "```json\n{\"thought\":\"t\",}\n```", probs: []string{`reply: invalid JSON: invalid character '}' looking for beginning of object key string`}},
	{name: "reply null", reply: `null`, probs: []string{"reply: expected a JSON object, got null"}},
	{name: "reply an array holding a valid object", reply: "[" + valid + "]", probs: []string{"reply: expected a JSON object, got array"}},
	{name: "fenced array holding a valid object", reply: "```json\n[ " + valid + " ]\n```", probs: []string{"reply: expected a JSON object, got array"}},
	{name: "reply a JSON string", reply: `"hello"`, probs: []string{`reply: expected a JSON object, got string "hello"`}},
	{name: "reply a number", reply: `42`, probs: []string{"reply: expected a JSON object, got number 42"}},
	{name: "empty", reply: "", probs: []string{"reply: empty; send one JSON object"}},
	{name: "whitespace only", reply: " \n\t\r ", probs: []string{"reply: empty; send one JSON object"}},
	{name: "1 MB of text", reply: strings.Repeat("a", 1<<20), probs: []string{"reply: too long (1048576 bytes, at most 262144); send only the JSON object"}},
	{name: "valid object one byte over the limit", reply: valid + strings.Repeat(" ", MaxReplyBytes+1-len(valid)), probs: []string{"reply: too long (262145 bytes, at most 262144); send only the JSON object"}},
	{name: "valid object at the limit", reply: valid + strings.Repeat(" ", MaxReplyBytes-len(valid)), want: decided("Look it up.", "search_movies", validArgs)},
	{name: "invalid UTF-8", reply: `{"thought":"caf` + "\xe9" + `","action":"get_status","args":{}}`, probs: []string{"reply: not valid UTF-8 text"}},

	// The envelope.
	{name: "unknown action", reply: `{"thought":"t","action":"search","args":{}}`, probs: []string{`action: unknown action "search"; valid actions: ` + listing}},
	{name: "unknown action, args not validated", reply: `{"thought":"t","action":"nope","args":{"zzz":1}}`, probs: []string{`action: unknown action "nope"; valid actions: ` + listing}},
	{name: "action in another case", reply: `{"thought":"t","action":"Get_Status","args":{}}`, probs: []string{`action: unknown action "Get_Status"; valid actions: ` + listing}},
	{name: "action missing", reply: `{"thought":"t","args":{}}`, probs: []string{"action: missing required field; one of: " + listing}},
	{name: "action a number", reply: `{"thought":"t","action":42,"args":{}}`, probs: []string{"action: expected string, got number 42; one of: " + listing}},
	{name: "action null", reply: `{"thought":"t","action":null,"args":{}}`, probs: []string{"action: expected string, got null; one of: " + listing}},
	{name: "action an object", reply: `{"thought":"t","action":{"name":"get_status"},"args":{}}`, probs: []string{"action: expected string, got object; one of: " + listing}},
	{name: "thought missing", reply: `{"action":"get_status","args":{}}`, probs: []string{"thought: missing required field"}},
	{name: "thought a number", reply: `{"thought":7,"action":"get_status","args":{}}`, probs: []string{"thought: expected string, got number 7"}},
	{name: "thought null", reply: `{"thought":null,"action":"get_status","args":{}}`, probs: []string{"thought: expected string, got null"}},
	{name: "thought too long", reply: `{"thought":"` + strings.Repeat("é", 1001) + `","action":"get_status","args":{}}`, probs: []string{"thought: too long (1001 characters, at most 1000); one or two sentences"}},
	{name: "args missing", reply: `{"thought":"t","action":"get_status"}`, probs: []string{"args: missing required field"}},
	{name: "args a string holding the object", reply: search(`"{\"query\":\"Dune\"}"`), probs: []string{`args: expected object, got string "{\"query\":\"Dune\"}"; put the object itself there, not a string containing it`}},
	{name: "args a plain string", reply: search(`"Dune"`), probs: []string{`args: expected object, got string "Dune"`}},
	{name: "args a string holding a number", reply: search(`"42"`), probs: []string{`args: expected object, got string "42"`}},
	{name: "args null", reply: search(`null`), probs: []string{"args: expected object, got null"}},
	{name: "args an array", reply: search(`[{"query":"Dune"}]`), probs: []string{"args: expected object, got array"}},
	{name: "args a number", reply: search(`5`), probs: []string{"args: expected object, got number 5"}},
	{name: "extra top-level field", reply: `{"thought":"t","action":"get_status","args":{},"confidence":0.9}`, probs: []string{"confidence: " + extraTop}},
	{name: "extra top-level field needing quotes", reply: `{"thought":"t","action":"get_status","args":{},"my note":1}`, probs: []string{`["my note"]: ` + extraTop}},
	{name: "field names are case-sensitive", reply: `{"thought":"t","Action":"get_status","args":{}}`, probs: []string{"Action: " + extraTop, "action: missing required field; one of: " + listing}},
	{name: "every envelope problem at once, sorted", reply: `{"zeta":1,"action":"nope","args":"x","alpha":2}`, probs: []string{
		`action: unknown action "nope"; valid actions: ` + listing,
		"alpha: " + extraTop,
		`args: expected object, got string "x"`,
		"thought: missing required field",
		"zeta: " + extraTop,
	}},

	// The arguments, against the chosen tool's schema.
	{name: "extra field inside args", reply: search(`{"query":"x","extra":true}`), probs: []string{"args.extra: unknown field; remove it"}},
	{name: "extra field inside args needing quotes", reply: search(`{"query":"x","c d":1}`), probs: []string{`args["c d"]: unknown field; remove it`}},
	{name: "wrong type", reply: search(`{"query":"x","year":"2010"}`), probs: []string{`args.year: expected integer, got string "2010"`}},
	{name: "fraction for an integer", reply: search(`{"query":"x","year":2010.5}`), probs: []string{"args.year: expected integer, got number 2010.5"}},
	{name: "enum violation", reply: search(`{"query":"x","kind":"film"}`), probs: []string{`args.kind: expected one of "movie", "tv", got "film"`}},
	{name: "array item type", reply: search(`{"query":"x","ids":[1,"2",3]}`), probs: []string{`args.ids[1]: expected integer, got string "2"`}},
	{name: "several array items", reply: search(`{"query":"x","ids":["a",2,null]}`), probs: []string{`args.ids[0]: expected integer, got string "a"`, "args.ids[2]: expected integer, got null"}},
	{name: "required field missing in args", reply: search(`{"year":2021}`), probs: []string{"args.query: missing required field"}},
	{name: "required field missing in a nested object", reply: search(`{"query":"x","opts":{"deep":{}}}`), probs: []string{"args.opts.deep.n: missing required field"}},
	{name: "field needing quotes in a path", reply: search(`{"query":"x","opts":{"a b":5}}`), probs: []string{`args.opts["a b"]: expected string, got number 5`}},
	{name: "below minimum", reply: search(`{"query":"x","year":1800}`), probs: []string{"args.year: minimum: got 1,800, want 1,900 (got 1800)"}},
	{name: "large number over maximum", reply: search(`{"query":"x","year":12345678901234567890}`), probs: []string{"args.year: maximum: got 1.2345678901234567×10¹⁹, want 2,100 (got 12345678901234567890)"}},
	{name: "empty string against minLength", reply: search(`{"query":""}`), probs: []string{`args.query: must have at least 1 character, got ""`}},
	{name: "over maxLength", reply: search(`{"query":"x","code":"abcd"}`), probs: []string{"args.code: must have at most 3 characters, got 4"}},
	{name: "maxLength counts characters", reply: search(`{"query":"x","code":"ééé"}`), want: decided("t", "search_movies", `{"query":"x","code":"ééé"}`)},
	{name: "several fields wrong, sorted", reply: search(`{"year":"x","kind":1,"ids":{},"zzz":0}`), probs: []string{
		"args.ids: expected array, got object",
		"args.kind: expected string, got number 1",
		"args.query: missing required field",
		`args.year: expected integer, got string "x"`,
		"args.zzz: unknown field; remove it",
	}},
	{name: "final response with an empty answer", reply: `{"thought":"t","action":"final_response","args":{"answer":""}}`, probs: []string{
		`args.answer: must have at least 1 character, got ""`,
		`args.answer: must match the pattern \S, got ""`,
	}},
	{name: "final response with a whitespace answer", reply: `{"thought":"t","action":"final_response","args":{"answer":"  \n "}}`, probs: []string{`args.answer: must match the pattern \S, got "  \n "`}},
	{name: "final response without an answer", reply: `{"thought":"t","action":"final_response","args":{}}`, probs: []string{"args.answer: missing required field"}},
	{name: "args for another tool", reply: `{"thought":"t","action":"get_status","args":{"query":"x"}}`, probs: []string{"args.query: unknown field; remove it"}},
}

func TestDecode(t *testing.T) {
	u := testUnion(t)
	if n := len(decodeCases); n < 25 {
		t.Fatalf("only %d cases", n)
	}
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			for range 5 { // the same answer every time: no map order leaks out
				d, err := u.Decode(tc.reply)
				if tc.want != nil {
					if err != nil {
						t.Fatalf("Decode = %v, want %+v", err, *tc.want)
					}
					if d.Thought != tc.want.Thought || d.Action != tc.want.Action || string(d.Args) != string(tc.want.Args) {
						t.Fatalf("Decode = {%q %q %s}, want {%q %q %s}", d.Thought, d.Action, d.Args, tc.want.Thought, tc.want.Action, tc.want.Args)
					}
					continue
				}
				if err == nil {
					t.Fatalf("Decode = %+v, want problems %q", d, tc.probs)
				}
				if d.Action != "" || d.Thought != "" || d.Args != nil {
					t.Errorf("Decode returned %+v with its error", d)
				}
				got := problemsOf(t, err)
				if !slices.Equal(got, tc.probs) {
					t.Fatalf("problems:\n got %q\nwant %q", got, tc.probs)
				}
				if !slices.IsSorted(got) {
					t.Errorf("problems not sorted: %q", got)
				}
			}
		})
	}
}

func TestReplyErrorMessage(t *testing.T) {
	e := &ReplyError{Problems: []string{"args.a: x", "thought: y"}}
	if got, want := e.Error(), "invalid reply: args.a: x; thought: y"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestDecodeAnswer(t *testing.T) {
	d, err := testUnion(t).Decode("```json\n{\"thought\":\"t\",\"action\":\"final_response\",\"args\":{\"answer\":\"Dune \\u2014 2021\"}}\n```")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Final() || d.Answer() != "Dune — 2021" {
		t.Errorf("Final() = %v, Answer() = %q", d.Final(), d.Answer())
	}
}

func TestObjectSpans(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		spans [][2]int
		open  int
	}{
		{"empty", "", nil, -1},
		{"no braces", "hello", nil, -1},
		{"one object", `{"a":1}`, [][2]int{{0, 7}}, -1},
		{"nested", `x {"a":{"b":{}}} y`, [][2]int{{2, 16}}, -1},
		{"two", `{}{}`, [][2]int{{0, 2}, {2, 4}}, -1},
		{"brace in a string", `{"a":"}"}`, [][2]int{{0, 9}}, -1},
		{"escaped quote in a string", `{"a":"\"}"}`, [][2]int{{0, 11}}, -1},
		{"escaped backslash before quote", `{"a":"\\"}`, [][2]int{{0, 10}}, -1},
		{"stray closing brace outside", `} {} }`, [][2]int{{2, 4}}, -1},
		{"quote outside objects is prose", `it's "x {}`, [][2]int{{8, 10}}, -1},
		{"open at the end", `{} {"a":`, [][2]int{{0, 2}}, 3},
		{"open inside a string", `{"a":"}`, nil, 0},
		{"multi-byte text", `é {"é":"}é"} é`, [][2]int{{3, 15}}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spans, open := objectSpans(tt.in)
			if !slices.Equal(spans, tt.spans) || open != tt.open {
				t.Errorf("objectSpans(%q) = %v, %d; want %v, %d", tt.in, spans, open, tt.spans, tt.open)
			}
		})
	}
}

func TestPath(t *testing.T) {
	tests := []struct{ p, field, want string }{
		{"", "query", "query"},
		{"args", "query", "args.query"},
		{"args", "snake_case-1", "args.snake_case-1"},
		{"args", "a b", `args["a b"]`},
		{"args", "", `args[""]`},
		{"args", "a.b", `args["a.b"]`},
		{"args", `"q"`, `args["\"q\""]`},
		{"args", "é", `args["é"]`},
		{"", "a b", `["a b"]`},
		{"args", strings.Repeat("x y", 20), `args["` + strings.Repeat("x y", 13) + `x..."]`},
	}
	for _, tt := range tests {
		if got := path(tt.p, tt.field); got != tt.want {
			t.Errorf("path(%q, %q) = %s, want %s", tt.p, tt.field, got, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 5, "hello"},
		{"hello", 4, "hell..."},
		{"héllo", 2, "h..."}, // é is two bytes: never cut in half
		{"héllo", 3, "hé..."},
		{"日本語", 4, "日..."},
		{"日本語", 0, "..."},
	}
	for _, tt := range tests {
		if got := clip(tt.s, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}
