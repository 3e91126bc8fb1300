package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/internal/s2g"
)

const searchSchema = `{"type":"object","properties":{"query":{"type":"string","minLength":1},"year":{"type":"integer"}},"required":["query"],"additionalProperties":false}`

func batchTools() []Tool {
	return []Tool{
		tool("tmdb_search", searchSchema),
		tool("radarr_add", `{"type":"object","properties":{"tmdb_id":{"type":"integer"}},"required":["tmdb_id"],"additionalProperties":false}`),
		tool("sonarr_queue", `{"type":"object","properties":{},"additionalProperties":false}`),
	}
}

func batchUnion(t testing.TB) *Union {
	t.Helper()
	u, err := NewBatchUnion(batchTools(), Batch{Max: 3, Solo: []string{"radarr_add"}})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestBatchBranch checks the batch branch's shape: last, after
// final_response, its items the tools that may be batched, each pointing at
// its own branch's args; and that the whole union, compiled as one schema,
// holds replies to exactly what Decode does.
func TestBatchBranch(t *testing.T) {
	u := batchUnion(t)
	if u.BatchMax() != 3 {
		t.Errorf("BatchMax = %d", u.BatchMax())
	}
	for k, raw := range []json.RawMessage{u.Schema(), u.Format()} {
		// The full union's items point at the args where they stand; the
		// format's at the one definition the branch and the items share.
		ref := func(i int) string { return fmt.Sprintf("#/oneOf/%d/properties/args", i) }
		if k == 1 {
			ref = func(i int) string { return fmt.Sprintf("#/oneOf/%d/$defs/args", i) }
		}
		var doc struct {
			OneOf []struct {
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			} `json:"oneOf"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.OneOf) != 5 {
			t.Fatalf("%d branches, want 3 tools, final_response and the batch", len(doc.OneOf))
		}
		last := doc.OneOf[4]
		if !slices.Equal(last.Required, []string{"thought", "calls"}) {
			t.Errorf("batch branch requires %v", last.Required)
		}
		calls := string(last.Properties["calls"])
		for _, want := range []string{`"maxItems":3`, `"minItems":1`,
			`{"action":{"const":"sonarr_queue"},"args":{"$ref":"` + ref(1) + `"}}`,
			`{"action":{"const":"tmdb_search"},"args":{"$ref":"` + ref(2) + `"}}`} {
			if !strings.Contains(calls, want) {
				t.Errorf("calls lacks %s:\n%s", want, calls)
			}
		}
		if strings.Contains(calls, "radarr_add") {
			t.Errorf("a tool that asks first is in calls: %s", calls)
		}
		if k == 1 && (string(doc.OneOf[2].Properties["args"]) != `{"$ref":"`+ref(2)+`"}` || !strings.Contains(string(doc.OneOf[0].Properties["args"]), "tmdb_id")) {
			t.Errorf("format branches' args: %s, %s", doc.OneOf[2].Properties["args"], doc.OneOf[0].Properties["args"])
		}
	}

	full := compileRaw(t, u.Schema())
	format := compileRaw(t, u.Format()) // its references resolve, to the same args
	for _, tc := range []struct {
		reply string
		ok    bool
	}{
		{`{"thought":"a","calls":[{"action":"tmdb_search","args":{"query":"Dune"}},{"action":"sonarr_queue","args":{}}]}`, true},
		{`{"thought":"a","calls":[{"action":"tmdb_search","args":{"query":"Dune"}},{"action":"tmdb_search","args":{"query":"Arrival"}}]}`, true},
		{`{"thought":"a","calls":[{"action":"radarr_add","args":{"tmdb_id":1}}]}`, false},
		{`{"thought":"a","calls":[{"action":"tmdb_search","args":{"query":"Dune","year":"2021"}}]}`, false},
		{`{"thought":"a","calls":[]}`, false},
		{`{"thought":"a","calls":[{"action":"sonarr_queue","args":{}},{"action":"sonarr_queue","args":{}},{"action":"sonarr_queue","args":{}},{"action":"sonarr_queue","args":{}}]}`, false},
	} {
		err := validate(t, full, tc.reply)
		ferr := validate(t, format, tc.reply)
		_, derr := u.Decode(tc.reply)
		if (err == nil) != tc.ok || (derr == nil) != tc.ok || (ferr == nil) != tc.ok {
			t.Errorf("%s: whole union %v, format %v, Decode %v; want ok=%v", tc.reply, err, ferr, derr, tc.ok)
		}
	}
}

func TestBatchDecode(t *testing.T) {
	u := batchUnion(t)
	d, err := u.Decode("```json\n" + `{"thought":"both at once","calls":[{"action":"tmdb_search","args":{"query":"Dune","year":2021}},{"action":"sonarr_queue","args":{}}]}` + "\n```")
	if err != nil {
		t.Fatal(err)
	}
	want := Decision{Thought: "both at once", Calls: []Call{
		{Action: "tmdb_search", Args: json.RawMessage(`{"query":"Dune","year":2021}`)},
		{Action: "sonarr_queue", Args: json.RawMessage(`{}`)},
	}}
	if !reflect.DeepEqual(d, want) || d.Final() {
		t.Errorf("decision = %+v", d)
	}
	// Re-encoded for the conversation: thought and calls only.
	if b, _ := json.Marshal(d); string(b) != `{"thought":"both at once","calls":[{"action":"tmdb_search","args":{"query":"Dune","year":2021}},{"action":"sonarr_queue","args":{}}]}` {
		t.Errorf("encoded: %s", b)
	}

	for _, tc := range []struct {
		name, reply string
		want        []string
	}{
		{"item args", `{"thought":"a","calls":[{"action":"sonarr_queue","args":{}},{"action":"tmdb_search","args":{"query":"Dune","year":"2021"}}]}`,
			[]string{`calls[1].args.year: expected integer, got string "2021"`}},
		{"item missing field", `{"thought":"a","calls":[{"action":"tmdb_search","args":{}}]}`,
			[]string{"calls[0].args.query: missing required field"}},
		{"asks first", `{"thought":"a","calls":[{"action":"radarr_add","args":{"tmdb_id":1}},{"action":"sonarr_queue","args":{}}]}`,
			[]string{`calls[0].action: radarr_add asks the user first, so it cannot be one of calls; call it alone: {"thought": ..., "action": "radarr_add", "args": {...}}`}},
		{"final in calls", `{"thought":"a","calls":[{"action":"final_response","args":{"answer":"x"}}]}`,
			[]string{"calls[0].action: final_response cannot be one of calls; answer on its own once the results are in"}},
		{"unknown action", `{"thought":"a","calls":[{"action":"imdb_search","args":{}}]}`,
			[]string{`calls[0].action: unknown action "imdb_search"; valid actions: sonarr_queue, tmdb_search`}},
		{"too many", `{"thought":"a","calls":[{"action":"sonarr_queue","args":{}},{"action":"sonarr_queue","args":{}},{"action":"sonarr_queue","args":{}},{"action":"sonarr_queue","args":{}}]}`,
			[]string{"calls: 4 calls, at most 3 at once; ask for the others in a later step"}},
		{"empty", `{"thought":"a","calls":[]}`, []string{"calls: empty; list 1 to 3 calls, or answer with final_response"}},
		{"not an array", `{"thought":"a","calls":{"action":"sonarr_queue"}}`, []string{`calls: expected array of {"action", "args"} objects, got object`}},
		{"item not an object", `{"thought":"a","calls":["sonarr_queue"]}`, []string{`calls[0]: expected object {"action", "args"}, got string "sonarr_queue"`}},
		{"item extra field", `{"thought":"a","calls":[{"action":"sonarr_queue","args":{},"why":"x"}]}`,
			[]string{"calls[0].why: unknown field; a call has exactly action and args"}},
		{"item args missing", `{"thought":"a","calls":[{"action":"sonarr_queue"}]}`, []string{"calls[0].args: missing required field"}},
		{"both forms", `{"thought":"a","action":"sonarr_queue","args":{},"calls":[{"action":"sonarr_queue","args":{}}]}`,
			[]string{"action: a reply with calls has no action; send either calls or one action with its args",
				"args: a reply with calls has no args; send either calls or one action with its args"}},
		{"no thought", `{"calls":[{"action":"sonarr_queue","args":{}}]}`, []string{"thought: missing required field"}},
	} {
		_, err := u.Decode(tc.reply)
		re, ok := err.(*ReplyError)
		if !ok || !slices.Equal(re.Problems, tc.want) {
			t.Errorf("%s: got %v\nwant %q", tc.name, err, tc.want)
		}
	}
}

// TestBatchOff: without a batch, or with room for one call, there is no
// branch, and calls is an unknown field as before.
func TestBatchOff(t *testing.T) {
	reply := `{"thought":"a","calls":[{"action":"sonarr_queue","args":{}}]}`
	for _, b := range []Batch{{}, {Max: 1}, {Max: 3, Solo: []string{"tmdb_search", "radarr_add", "sonarr_queue"}}} {
		u, err := NewBatchUnion(batchTools(), b)
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := NewUnion(batchTools())
		if u.BatchMax() != 0 || !bytes.Equal(u.Format(), plain.Format()) || strings.Contains(string(u.Schema()), `"calls"`) {
			t.Errorf("%+v: a batch branch is there", b)
		}
		_, err = u.Decode(reply)
		if re, ok := err.(*ReplyError); !ok || !slices.Contains(re.Problems, "calls: unknown field; the reply has exactly thought, action and args") {
			t.Errorf("%+v: %v", b, err)
		}
	}
}

func TestBatchCache(t *testing.T) {
	var c Cache
	tools := batchTools()
	plain, _ := c.Union(tools)
	b := Batch{Max: 3, Solo: []string{"radarr_add"}}
	batched, _ := c.BatchUnion(tools, b)
	again, _ := c.BatchUnion(tools, Batch{Max: 3, Solo: []string{"radarr_add"}})
	two, _ := c.BatchUnion(tools, Batch{Max: 2, Solo: []string{"radarr_add"}})
	if plain == batched || batched != again || two == batched || plain.BatchMax() != 0 || two.BatchMax() != 2 {
		t.Errorf("cache: plain %p batched %p again %p two %p", plain, batched, again, two)
	}
}

// TestBatchFormatConverts feeds the format of a realistic tool set, with
// and without its batch branch, to Ollama's own grammar converter (s2g, see
// ../shared/tools/s2g): a format it refuses fails every chat request.
func TestBatchFormatConverts(t *testing.T) {
	conv := s2g.Build(t)
	tools := append(benchTools(t), tool("zz_refs", `{"type":"object","$defs":{"id":{"type":"integer","minimum":1}},"properties":{"ids":{"type":"array","items":{"$ref":"#/$defs/id"}}},"required":["ids"],"additionalProperties":false}`))
	for _, b := range []Batch{{}, {Max: 3, Solo: []string{tools[0].Name}}} {
		u, err := NewBatchUnion(tools, b)
		if err != nil {
			t.Fatal(err)
		}
		// Accepts also holds the grammar to Ollama's buffer (four times the
		// format's size).
		conv.Accepts(t, fmt.Sprintf("batch %+v", b), u.Format())
		t.Logf("batch %+v: format %d bytes", b, len(u.Format()))
	}
}

// TestBatchStream: the reader previews a batch reply's thought whatever the
// split, never takes an "answer" nested in an item's args for the answer,
// and ends the object without error, so a valid batch is not retracted.
func TestBatchStream(t *testing.T) {
	reply := `{"thought":"Both at \"once\"","calls":[{"action":"final_response","args":{"answer":"no"}},{"action":"tmdb_search","args":{"query":"Dune"}}]}`
	rng := rand.New(rand.NewPCG(5, 6))
	for range 50 {
		res := feedPieces(t, randomPieces(reply, rng))
		if res.thought != `Both at "once"` || res.answer != "" || res.known || !res.done || res.err != nil {
			t.Fatalf("preview: %+v", res)
		}
	}
}
