package schema

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf16"
)

// FuzzStreamReader feeds any text, cut at random places, and holds the
// preview to encoding/json (see checkStream). Cutting never changes what the
// preview shows in the end, nor how the reader ends.
func FuzzStreamReader(f *testing.F) {
	for _, tc := range streamCases {
		f.Add(tc.reply, uint64(len(tc.reply)))
	}
	for _, tc := range decodeCases {
		if len(tc.reply) <= 4<<10 {
			f.Add(tc.reply, uint64(1))
		}
	}
	f.Fuzz(func(t *testing.T, reply string, seed uint64) {
		got := checkStream(t, reply, randomPieces(reply, rand.New(rand.NewPCG(seed, seed>>1))))
		whole := feedPieces(t, []string{reply})
		if got.thought != whole.thought || got.answer != whole.answer || got.action != whole.action ||
			got.known != whole.known || got.done != whole.done || fmt.Sprint(got.err) != fmt.Sprint(whole.err) {
			t.Fatalf("cut, %q reads as thought %q action %q answer %q, done %v, error %v;\nwhole as %q %q %q, %v, %v",
				reply, got.thought, got.action, got.answer, got.done, got.err, whole.thought, whole.action, whole.answer, whole.done, whole.err)
		}
	})
}

// FuzzStreamEnvelope builds replies a model could write (any strings, any
// member order, escaped in several ways, pretty or not, after a sentence and
// a fence) so that most inputs are valid objects whose preview must equal
// encoding/json's reading exactly; random text rarely is one.
func FuzzStreamEnvelope(f *testing.F) {
	f.Add("Done.", "", "Dune (2021).", "query", uint8(0), uint8(0), uint64(1))
	f.Add("é\n\"q\"\\ 😀 <&>", "get_status", "ü\x00\x1f\u2028", "answer", uint8(3), uint8(7), uint64(2))
	f.Add("\xff\xe2\x82", "action", "\xed\xa0\x80", "", uint8(5), uint8(4), uint64(3))
	f.Fuzz(func(t *testing.T, thought, action, answer, extra string, order, style uint8, seed uint64) {
		if style&1 == 0 {
			action = FinalAction
		}
		quote := func(s string) string {
			if style&2 != 0 {
				return quoteASCII(s, style&4 != 0)
			}
			b, _ := json.Marshal(s) // invalid UTF-8 becomes \ufffd
			return string(b)
		}
		sp := ""
		if style&8 != 0 {
			sp = "\n  "
		}
		member := func(k, v string) string { return sp + quote(k) + sp + ":" + sp + v }
		args := "{" + member("answer", quote(answer))
		if extra != "" {
			args += "," + member(extra, quote(thought))
		}
		args += sp + "}"
		members := []string{member("thought", quote(thought)), member("action", quote(action)), member("args", args)}
		p := permutations[int(order)%len(permutations)]
		body := []string{members[p[0]], members[p[1]], members[p[2]]}
		if style&16 != 0 { // a decoy holding our keys
			body = append([]string{member("meta", "{"+member("action", `"final_response"`)+","+member("args", `{"answer":"no"}`)+"}")}, body...)
		}
		reply := "{" + strings.Join(body, ",") + sp + "}"
		if style&32 != 0 {
			reply = "Sure:\n```json\n" + reply + "\n```"
		}
		if !json.Valid([]byte(reply[strings.IndexByte(reply, '{') : strings.LastIndexByte(reply, '}')+1])) {
			t.Fatalf("built an invalid reply %q", reply)
		}
		got := checkStream(t, reply, randomPieces(reply, rand.New(rand.NewPCG(seed, 0))))
		if want, _ := envelopeOf(reply); !want.repeated && (!got.done || got.err != nil) {
			t.Fatalf("reply %q: done %v, error %v", reply, got.done, got.err)
		}
	})
}

var permutations = [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}

// quoteASCII writes s as a JSON string of ASCII only: every other character
// as \uXXXX, beyond the BMP as a surrogate pair, as some encoders do.
func quoteASCII(s string, upper bool) string {
	format := "\\u%04x"
	if upper {
		format = "\\u%04X"
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s { // a byte that is not UTF-8 is U+FFFD here
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r >= 0x80 && r < 0x10000:
			fmt.Fprintf(&b, format, r)
		case r >= 0x10000:
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&b, format+format, hi, lo)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
