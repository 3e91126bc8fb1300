package schema

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// streamResult is what a preview showed: the deltas joined, and how the
// reader ended.
type streamResult struct {
	thought, answer, action string
	known                   bool
	knownAfter              [2]int // the bytes fed before and after the piece that made the action known
	done                    bool
	err                     error
	r                       *StreamReader
}

// feedPieces runs a reader over the pieces, taking the preview after each as
// a client would, and checks what must hold at every step.
func feedPieces(t *testing.T, pieces []string) streamResult {
	t.Helper()
	var res streamResult
	var thought, answer strings.Builder // += would be quadratic on a long reply
	r := NewStreamReader()
	res.r = r
	fed := 0
	for _, p := range pieces {
		r.Feed(p)
		fed += len(p)
		th, an := r.TakeThought(), r.TakeAnswer()
		if !utf8.ValidString(th) || !utf8.ValidString(an) {
			t.Fatalf("deltas %q, %q are not valid UTF-8", th, an)
		}
		if res.err != nil && th+an != "" {
			t.Fatalf("deltas %q, %q after the error %v", th, an, res.err)
		}
		name, known := r.Action()
		switch {
		case res.known && (!known || name != res.action):
			t.Fatalf("action was %q, now %q (known %v)", res.action, name, known)
		case an != "" && (!known || name != FinalAction):
			t.Fatalf("answer delta %q while the action is %q (known %v)", an, name, known)
		case res.done && !r.Done(), res.err != nil && r.Err() != res.err:
			t.Fatalf("done %v then %v, error %v then %v", res.done, r.Done(), res.err, r.Err())
		}
		if known && !res.known {
			res.knownAfter = [2]int{fed - len(p), fed}
		}
		thought.WriteString(th)
		answer.WriteString(an)
		res.action, res.known = name, known
		res.done, res.err = r.Done(), r.Err()
	}
	res.thought, res.answer = thought.String(), answer.String()
	return res
}

// streamWant is encoding/json's reading of a reply's object: what the preview
// must have shown once the object is read.
type streamWant struct {
	thought, action, answer string
	known                   bool
	actionEnd               int  // offset just after the action's closing quote
	repeated                bool // a previewed field appears twice: the reader must stop
	start, end              int  // the object's offsets
}

// envelopeOf decodes the first {...} span of reply that is valid JSON (the one
// Decode uses when it accepts the reply) with encoding/json, independently of
// the reader. ok is false when there is none.
func envelopeOf(reply string) (w streamWant, ok bool) {
	spans, _ := objectSpans(reply)
	for _, sp := range spans {
		if json.Valid([]byte(reply[sp[0]:sp[1]])) {
			w.start, w.end, ok = sp[0], sp[1], true
			break
		}
	}
	if !ok {
		return w, false
	}
	var args json.RawMessage
	seen := map[string]bool{}
	members(reply[w.start:w.end], func(key string, raw json.RawMessage, end int) {
		s, isStr := jsonString(raw)
		switch key {
		case "thought":
			w.thought = s
		case "action":
			w.action, w.known, w.actionEnd = s, isStr, w.start+end
		case "args":
			args = raw
		default:
			return
		}
		w.repeated = w.repeated || seen[key]
		seen[key] = true
	})
	answers := 0
	if len(args) > 0 && args[0] == '{' {
		members(string(args), func(key string, raw json.RawMessage, _ int) {
			if key == "answer" {
				answers++
				w.answer, _ = jsonString(raw)
			}
		})
	}
	w.repeated = w.repeated || answers > 1
	if !w.known || w.action != FinalAction {
		w.answer = ""
	}
	return w, true
}

// members calls f with each member of a valid JSON object, in order, with the
// offset just after its value.
func members(obj string, f func(key string, raw json.RawMessage, end int)) {
	dec := json.NewDecoder(strings.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		return
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return
		}
		f(tok.(string), raw, int(dec.InputOffset()))
	}
}

// checkStream holds a preview to encoding/json. Whenever the reader says it
// read an object without error, that object is the first valid {...} span,
// the one Decode reads, and the preview is exactly its decoded thought,
// action and answer. A reply that is one JSON object is always read whole.
func checkStream(t *testing.T, reply string, pieces []string) streamResult {
	t.Helper()
	got := feedPieces(t, pieces)
	want, ok := envelopeOf(reply)
	if got.done && got.err == nil {
		switch {
		case !ok:
			t.Fatalf("reader read an object in %q, which holds no valid one", reply)
		case got.r.start != want.start || got.r.end != want.end:
			t.Fatalf("reader read bytes [%d,%d) of %q, want the first valid object [%d,%d)", got.r.start, got.r.end, reply, want.start, want.end)
		case want.repeated:
			t.Fatalf("reader previewed %q, which repeats a field", reply)
		case got.thought != want.thought || got.answer != want.answer || got.known != want.known || got.action != want.action:
			t.Fatalf("preview of %q:\n got thought %q action %q (%v) answer %q\nwant thought %q action %q (%v) answer %q",
				reply, got.thought, got.action, got.known, got.answer, want.thought, want.action, want.known, want.answer)
		case want.known && (got.knownAfter[0] >= want.actionEnd || got.knownAfter[1] < want.actionEnd):
			t.Fatalf("action known after bytes %v of %q, its closing quote ends at %d", got.knownAfter, reply, want.actionEnd)
		}
		if raw, err := extract(reply); err == nil && string(raw) != reply[want.start:want.end] {
			t.Fatalf("Decode reads %s, the reader %s", raw, reply[want.start:want.end])
		}
	}
	trimmed := strings.TrimSpace(reply)
	if len(reply) <= MaxReplyBytes && strings.HasPrefix(trimmed, "{") && json.Valid([]byte(trimmed)) && !want.repeated {
		if !got.done || got.err != nil {
			t.Fatalf("reply %q is one JSON object, reader done %v, error %v", reply, got.done, got.err)
		}
	}
	return got
}

// splits returns ways to cut s: whole, in two at every byte, one byte at a
// time, and randomly into many pieces.
func splits(s string, rng *rand.Rand) [][]string {
	out := [][]string{{s}}
	for i := range len(s) + 1 {
		out = append(out, []string{s[:i], s[i:]})
	}
	bytes := make([]string, len(s))
	for i := range len(s) {
		bytes[i] = s[i : i+1]
	}
	out = append(out, bytes)
	for range 20 {
		out = append(out, randomPieces(s, rng))
	}
	return out
}

// randomPieces cuts s into pieces of 0 to 8 bytes, as tokens come.
func randomPieces(s string, rng *rand.Rand) []string {
	var pieces []string
	for len(s) > 0 {
		n := min(rng.IntN(9), len(s))
		pieces = append(pieces, s[:n])
		s = s[n:]
	}
	return pieces
}

const finalReply = `{"thought":"Done.","action":"final_response","args":{"answer":"Dune (2021)."}}`

type streamCase struct {
	name                    string
	reply                   string
	thought, action, answer string // what the preview shows; action "" is never known
	end                     string // "done", "open" (the object is not finished) or "err"
}

var streamCases = []streamCase{
	// What a grammar-bound model writes.
	{name: "final response", reply: finalReply, thought: "Done.", action: FinalAction, answer: "Dune (2021).", end: "done"},
	{name: "tool call", reply: valid, thought: "Look it up.", action: "search_movies", end: "done"},
	{name: "tool args with an answer field", reply: `{"thought":"t","action":"search_movies","args":{"answer":"no"}}`, thought: "t", action: "search_movies", end: "done"},
	{name: "empty strings", reply: `{"thought":"","action":"final_response","args":{"answer":""}}`, action: FinalAction, end: "done"},
	{name: "pretty printed", reply: "{\n  \"thought\" : \"t\" ,\r\n\t\"action\":\n\"final_response\",\n  \"args\": {\n    \"answer\": \"a\"\n  }\n}\n", thought: "t", action: FinalAction, answer: "a", end: "done"},

	// Another order: the answer waits for the action.
	{name: "answer before a final action", reply: `{"args":{"answer":"early"},"thought":"t","action":"final_response"}`, thought: "t", action: FinalAction, answer: "early", end: "done"},
	{name: "answer before a tool action", reply: `{"args":{"answer":"early"},"action":"get_status","thought":"t"}`, thought: "t", action: "get_status", end: "done"},
	{name: "answer and no action", reply: `{"thought":"t","args":{"answer":"x"}}`, thought: "t", end: "done"},
	{name: "action after args in another field", reply: `{"x":1,"args":{"q":[1,{"a":2}],"answer":"late"},"action":"final_response"}`, action: FinalAction, answer: "late", end: "done"},

	// Escapes and characters, decoded as encoding/json decodes them.
	{name: "simple escapes", reply: `{"thought":"line\nnext \"q\" back\\slash \/ \b\f\r\t","action":"final_response","args":{"answer":"tab\there"}}`, thought: "line\nnext \"q\" back\\slash / \b\f\r\t", action: FinalAction, answer: "tab\there", end: "done"},
	{name: "unicode escapes", reply: `{"thought":"caf\u00e9 \u00E9\u0041","action":"final_response","args":{"answer":"\ud83d\ude00 \u65e5\u672c \u0000"}}`, thought: "café éA", action: FinalAction, answer: "😀 日本 \x00", end: "done"},
	{name: "raw UTF-8", reply: `{"thought":"é 日本 😀","action":"final_response","args":{"answer":"ü€𝄞"}}`, thought: "é 日本 😀", action: FinalAction, answer: "ü€𝄞", end: "done"},
	{name: "lone surrogates", reply: `{"thought":"\ud800|\udc00|\ud800\u0041|\ud800\n|\ud800\ud800\udc00|\udbff\udfff|\ud800","action":"get_status","args":{}}`, thought: "\uFFFD|\uFFFD|\uFFFDA|\uFFFD\n|\uFFFD\U00010000|\U0010FFFF|\uFFFD", action: "get_status", end: "done"},
	{name: "invalid UTF-8", reply: "{\"thought\":\"caf\xe9|\xe2\x82|\xf0\x9f\x98x|\xff\xfe|\xed\xa0\x80|\xc3\",\"action\":\"get_status\",\"args\":{}}", thought: "caf\uFFFD|\uFFFD\uFFFD|\uFFFD\uFFFD\uFFFDx|\uFFFD\uFFFD|\uFFFD\uFFFD\uFFFD|\uFFFD", action: "get_status", end: "done"},
	{name: "escaped keys", reply: `{"th\u006fught":"escaped key","\u0061ction":"final_response","args":{"answ\u0065r":"yes"}}`, thought: "escaped key", action: FinalAction, answer: "yes", end: "done"},
	{name: "escaped action", reply: `{"thought":"t","action":"final\u005fresponse","args":{"answer":"a"}}`, thought: "t", action: FinalAction, answer: "a", end: "done"},

	// Only the top-level keys, and args' own keys, count.
	{name: "nested keys", reply: `{"meta":{"thought":"no","action":"final_response","args":{"answer":"no"}},"thought":"t","args":{"q":{"answer":"deep","action":"x"},"list":[{"answer":"in array"}],"answer":"real","more":{"answer":"no"}},"action":"final_response"}`, thought: "t", action: FinalAction, answer: "real", end: "done"},
	{name: "keys in another case", reply: `{"Thought":"x","ACTION":"final_response","thought":"t","args":{"Answer":"x"}}`, thought: "t", end: "done"},
	{name: "long keys", reply: `{"thoughts":"x","actions":"final_response","action_":"x","thought":"t","action":"final_response","args":{"answers":"x","answer":"a"}}`, thought: "t", action: FinalAction, answer: "a", end: "done"},
	{name: "strings with braces, quotes and our keys", reply: `{"thought":"{\"action\":\"final_response\"} }} {","action":"final_response","args":{"answer":"a \"} {\"answer\": \"b\"","x":"\"thought\":\"no\"}"}}`, thought: `{"action":"final_response"} }} {`, action: FinalAction, answer: `a "} {"answer": "b"`, end: "done"},
	{name: "values that are not strings", reply: `{"thought":7,"action":null,"args":{"answer":1}}`, end: "done"},
	{name: "args a string", reply: `{"thought":"t","action":"final_response","args":"{\"answer\":\"x\"}"}`, thought: "t", action: FinalAction, end: "done"},
	{name: "args an array", reply: `{"thought":"t","action":"final_response","args":[{"answer":"x"}]}`, thought: "t", action: FinalAction, end: "done"},
	{name: "an object as thought", reply: `{"thought":{"thought":"x"},"action":"final_response","args":{"answer":"a"}}`, action: FinalAction, answer: "a", end: "done"},
	{name: "numbers and literals", reply: `{"thought":"t","action":"search_movies","args":{"query":"x","year":-2.021e+3,"n":[0,1,-0,0.5,1E9,2e-3,10],"ok":true,"no":false,"z":null,"e":[],"o":{}}}`, thought: "t", action: "search_movies", end: "done"},

	// Around the object: what Decode tolerates.
	{name: "json fence", reply: "Sure:\n```json\n" + finalReply + "\n```\nAnything else?", thought: "Done.", action: FinalAction, answer: "Dune (2021).", end: "done"},
	{name: "prose braces that are not JSON", reply: `I use {braces} and {"not": json} in prose. ` + finalReply + " {sic}", thought: "Done.", action: FinalAction, answer: "Dune (2021).", end: "done"},
	{name: "broken spans with strings and escapes", reply: "{\"args\":{\"answer\":\"\\x\"}} {\"a\":\"}\\\"{\x01\"} {\"action\":\"fi\x01nal\"} " + finalReply, thought: "Done.", action: FinalAction, answer: "Dune (2021).", end: "done"},
	{name: "bracket in prose, not before the object", reply: "[note] " + finalReply, thought: "Done.", action: FinalAction, answer: "Dune (2021).", end: "done"},
	{name: "two objects: the first is previewed", reply: finalReply + "\n" + valid, thought: "Done.", action: FinalAction, answer: "Dune (2021).", end: "done"},

	// Not finished: the preview shows what there is.
	{name: "cut in the answer", reply: `{"thought":"Looking","action":"final_response","args":{"answer":"Dune (20`, thought: "Looking", action: FinalAction, answer: "Dune (20", end: "open"},
	{name: "cut in the action", reply: `{"thought":"Looking","action":"final_resp`, thought: "Looking", end: "open"},
	{name: "cut in an escape", reply: `{"thought":"caf\u00`, thought: "caf", end: "open"},
	{name: "cut after a high surrogate", reply: `{"thought":"a\ud83d`, thought: "a", end: "open"},
	{name: "cut in a character", reply: "{\"thought\":\"a\xf0\x9f\x98", thought: "a", end: "open"},
	{name: "prose only", reply: "I cannot help with that.", end: "open"},
	{name: "empty", reply: "", end: "open"},
	{name: "broken object, nothing shown", reply: `{"thought" 5}`, end: "open"},
	{name: "broken object with a held answer", reply: `{"args":{"answer":"held"},"x":tru}`, end: "open"},

	// The object the preview showed is not JSON after all, or cannot be
	// shown faithfully: the reader stops.
	{name: "broken after the thought", reply: `{"thought":"t", oops}`, thought: "t", end: "err"},
	{name: "broken after the action", reply: `{"action":"x" 1} ` + finalReply, action: "x", end: "err"},
	{name: "broken after the answer", reply: `{"action":"final_response","args":{"answer":"a",}}`, action: FinalAction, answer: "a", end: "err"},
	{name: "control character in the thought", reply: "{\"thought\":\"a\tb\"}", thought: "a", end: "err"},
	{name: "bad escape in the thought", reply: `{"thought":"a\qb"}`, thought: "a", end: "err"},
	{name: "bad unicode escape", reply: `{"thought":"a\u00g9"}`, thought: "a", end: "err"},
	{name: "bad escape after a high surrogate", reply: `{"thought":"a\ud83d\x"}`, thought: "a\uFFFD", end: "err"},
	{name: "leading zero", reply: `{"thought":"t","x":01}`, thought: "t", end: "err"},
	{name: "dot without digits", reply: `{"thought":"t","x":1.}`, thought: "t", end: "err"},
	{name: "exponent without digits", reply: `{"thought":"t","x":1e+}`, thought: "t", end: "err"},
	{name: "lone minus", reply: `{"thought":"t","x":-}`, thought: "t", end: "err"},
	{name: "bad literal", reply: `{"thought":"t","x":nul}`, thought: "t", end: "err"},
	{name: "single quotes", reply: `{"thought":"t",'action':'x'}`, thought: "t", end: "err"},
	{name: "missing colon", reply: `{"thought":"t","action" "x"}`, thought: "t", end: "err"},
	{name: "mismatched bracket", reply: `{"thought":"t","x":[1}`, thought: "t", end: "err"},
	{name: "repeated thought", reply: `{"thought":"a","thought":"b","action":"get_status","args":{}}`, thought: "a", end: "err"},
	{name: "repeated action", reply: `{"thought":"t","action":"final_response","action":"get_status","args":{}}`, thought: "t", action: FinalAction, end: "err"},
	{name: "repeated args", reply: `{"thought":"t","action":"final_response","args":{"answer":"a"},"args":{"answer":"b"}}`, thought: "t", action: FinalAction, answer: "a", end: "err"},
	{name: "repeated answer", reply: `{"thought":"t","action":"final_response","args":{"answer":"a","answer":"b"}}`, thought: "t", action: FinalAction, answer: "a", end: "err"},
	{name: "object in an array", reply: "[" + finalReply + "]", end: "err"},
	{name: "object in a fenced array", reply: "```json\n[\n  " + finalReply + "\n]\n```", end: "err"},
	{name: "object after a bracket and a no-break space", reply: "[\u00a0" + finalReply, end: "err"},
}

func TestStreamReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			want, ok := envelopeOf(tc.reply)
			if tc.end == "done" && (!ok || want.thought != tc.thought || want.action != tc.action || want.known != (tc.action != "") || want.answer != tc.answer) {
				t.Fatalf("the table disagrees with encoding/json: %+v", want)
			}
			for _, pieces := range splits(tc.reply, rng) {
				got := checkStream(t, tc.reply, pieces)
				end := map[bool]string{true: "done", false: "open"}[got.done]
				if got.err != nil {
					end = "err"
				}
				if got.thought != tc.thought || got.action != tc.action || got.known != (tc.action != "") || got.answer != tc.answer || end != tc.end {
					t.Fatalf("pieces %q:\n got thought %q action %q answer %q, %s (%v)\nwant thought %q action %q answer %q, %s",
						pieces, got.thought, got.action, got.answer, end, got.err, tc.thought, tc.action, tc.answer, tc.end)
				}
				if len(pieces) == len(tc.reply) && got.known && tc.end == "done" && got.knownAfter[1] != want.actionEnd {
					t.Fatalf("fed byte by byte, the action was known after %d bytes, its closing quote is byte %d", got.knownAfter[1], want.actionEnd-1)
				}
			}
		})
	}
}

// TestStreamReaderSteps pins down when text comes out: as soon as a character
// is complete, never half an escape, a surrogate pair or a UTF-8 sequence; the
// answer only once the action is known to be final_response.
func TestStreamReaderSteps(t *testing.T) {
	type step struct {
		piece, thought, answer string
		action                 string // "" while unknown
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "escapes and characters split", steps: []step{
			{piece: `{"thought":"a`, thought: "a"},
			{piece: `\`},
			{piece: `u00`},
			{piece: `e9`, thought: "é"},
			{piece: `\ud83d`},
			{piece: `\`},
			{piece: `ude00`, thought: "😀"},
			{piece: "\xf0\x9f"},
			{piece: "\x98\x80", thought: "😀"},
			{piece: `\`},
			{piece: `n`, thought: "\n"},
			{piece: `\ud800`},
			{piece: `x`, thought: "\uFFFDx"},
			{piece: `","action":"final_resp`},
			{piece: `onse`},
			{piece: `"`, action: FinalAction},
			{piece: `,"args":{"answer":"Hi`, answer: "Hi", action: FinalAction},
			{piece: ` there"}}`, answer: " there", action: FinalAction},
			{piece: ` trailing {"thought":"ignored"}`, action: FinalAction},
		}},
		{name: "answer held until the action is final", steps: []step{
			{piece: `{"thought":"t","args":{"answer":"Du`, thought: "t"},
			{piece: `ne"},"action":"final_response`},
			{piece: `"`, answer: "Dune", action: FinalAction},
			{piece: `}`, action: FinalAction},
		}},
		{name: "answer dropped for a tool", steps: []step{
			{piece: `{"args":{"answer":"x"},"action":"get_status"`, action: "get_status"},
			{piece: `,"thought":"t"}`, thought: "t", action: "get_status"},
		}},
		{name: "prose and a fence first", steps: []step{
			{piece: "Sure! {braces} here:\n```json\n{\"th"},
			{piece: `ought":"ok"`, thought: "ok"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewStreamReader()
			for i, s := range tc.steps {
				r.Feed(s.piece)
				name, known := r.Action()
				if th, an := r.TakeThought(), r.TakeAnswer(); th != s.thought || an != s.answer || name != s.action || known != (s.action != "") || r.Err() != nil {
					t.Fatalf("step %d, %q: thought %q, answer %q, action %q (%v), error %v; want %q, %q, %q",
						i, s.piece, th, an, name, known, r.Err(), s.thought, s.answer, s.action)
				}
			}
		})
	}
}

// TestStreamReaderLimits: the reader gives up where Decode would (past
// MaxReplyBytes, deeper than encoding/json nests), and holds no more than the
// text not yet taken.
func TestStreamReaderLimits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	deep := func(n int) string {
		return strings.Repeat("[", n) + strings.Repeat("]", n)
	}
	tests := []struct {
		name, reply     string
		thought, answer string
		end             string
	}{
		{name: "at the size limit", reply: finalReply + strings.Repeat(" ", MaxReplyBytes-len(finalReply)), thought: "Done.", answer: "Dune (2021).", end: "done"},
		{name: "read before the size limit", reply: finalReply + strings.Repeat("x", MaxReplyBytes), thought: "Done.", answer: "Dune (2021).", end: "done"},
		{name: "past the size limit", reply: `{"thought":"` + strings.Repeat("a", MaxReplyBytes), thought: strings.Repeat("a", MaxReplyBytes-len(`{"thought":"`)), end: "err"},
		{name: "as deep as encoding/json goes", reply: `{"thought":"t","x":` + deep(maxDepth-1) + `}`, thought: "t", end: "done"},
		{name: "deeper than encoding/json goes", reply: `{"thought":"t","x":` + deep(maxDepth) + `}`, thought: "t", end: "err"},
		{name: "too deep before anything was shown", reply: `{"x":` + deep(maxDepth) + `} ` + finalReply, thought: "Done.", answer: "Dune (2021).", end: "done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, pieces := range [][]string{{tc.reply}, randomPieces(tc.reply, rng)} {
				got := checkStream(t, tc.reply, pieces)
				end := map[bool]string{true: "done", false: "open"}[got.done]
				if got.err != nil {
					end = "err"
				}
				if got.thought != tc.thought || got.answer != tc.answer || end != tc.end {
					t.Fatalf("got thought of %d bytes, answer %q, %s (%v); want %d bytes, %q, %s",
						len(got.thought), got.answer, end, got.err, len(tc.thought), tc.answer, tc.end)
				}
			}
		})
	}

	// Text taken is let go: feeding a long thought in pieces keeps the
	// buffer at the size of a piece.
	r := NewStreamReader()
	r.Feed(`{"thought":"`)
	for range 10000 {
		r.Feed("0123456789")
		r.TakeThought()
	}
	if c := cap(r.thought); c > 64 {
		t.Errorf("thought buffer holds %d bytes after every piece was taken", c)
	}
}

// BenchmarkStreamReader measures the reader on a 2 KB final reply, fed as a
// model streams it (pieces of about 4 bytes, the preview taken after each)
// and whole.
func BenchmarkStreamReader(b *testing.B) {
	answer := strings.Repeat("Dune (2021) is on Plex in 4K; \"Part Two\" is requested. Café \u00e9 ok.\n", 26)
	reply, err := json.Marshal(map[string]any{
		"thought": "The user asked for Dune; I searched Plex and Seerr and have what I need to answer.",
		"action":  FinalAction,
		"args":    map[string]string{"answer": answer + "Done 😀"},
	})
	if err != nil {
		b.Fatal(err)
	}
	var tokens []string
	for s := string(reply); len(s) > 0; {
		n := min(4, len(s))
		tokens = append(tokens, s[:n])
		s = s[n:]
	}
	b.Logf("reply of %d bytes, %d pieces", len(reply), len(tokens))
	b.Run("pieces", func(b *testing.B) {
		b.SetBytes(int64(len(reply)))
		b.ReportAllocs()
		for b.Loop() {
			r := NewStreamReader()
			for _, tok := range tokens {
				r.Feed(tok)
				r.TakeThought()
				r.TakeAnswer()
			}
			if !r.Done() {
				b.Fatal("not done")
			}
		}
	})
	b.Run("whole", func(b *testing.B) {
		b.SetBytes(int64(len(reply)))
		b.ReportAllocs()
		for b.Loop() {
			r := NewStreamReader()
			r.Feed(string(reply))
			if !r.Done() {
				b.Fatal("not done")
			}
		}
	})
}
