package context

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzConversation turns fuzz bytes into a conversation. Each message starts
// with a rune of its own (so the output can be mapped back to the input even
// after a cut) followed by filler of a length and width taken from the byte.
func fuzzConversation(data []byte) []Message {
	msgs := make([]Message, 0, len(data))
	for i, b := range data {
		id := string(rune(0x4E00 + i)) // CJK ideographs: distinct, 3 bytes each
		fill := "a"
		if b&0x80 != 0 {
			fill = "é"
		}
		content := id + strings.Repeat(fill, int(b>>2)&0x1f)
		switch b & 3 {
		case 0:
			msgs = append(msgs, Message{Role: User, Content: content})
		case 1:
			msgs = append(msgs, Message{Role: Assistant, Content: content})
		case 2:
			msgs = append(msgs, Message{Role: Assistant, Content: content, Tool: "t"})
		case 3:
			msgs = append(msgs, Message{Role: Observation, Content: content, Tool: "t"})
		}
	}
	return msgs
}

func isCall(m Message) bool { return m.Role == Assistant && m.Tool != "" }

// FuzzWindow checks Window's promises on arbitrary conversations: the system
// prompt first; the current turn (the newest user message and everything
// after it) whole, or an OverflowError with the true sizes when it does not
// fit with the system prompt; before it, a suffix of the older messages, in
// order, that fits the budget left and is as long as fits; calls and
// observations together; observations cut as Cut cuts them; the input
// untouched.
func FuzzWindow(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 2, 3, 1}, "system", 100, 10)
	f.Add([]byte{0x80, 0xfe, 0x7f, 3, 3, 2, 0}, "", 0, 0)
	f.Add([]byte{2, 3, 2, 3, 2, 3}, "日本語", 50, 5)
	f.Add([]byte{0, 2, 3, 1, 0, 2, 3, 2, 3}, "s", 60, 8)
	f.Add([]byte{}, "s", -1, -1)
	f.Fuzz(func(t *testing.T, data []byte, system string, budget, maxObs int) {
		if len(data) > 2000 {
			return
		}
		budget %= 5000
		maxObs %= 64
		msgs := fuzzConversation(data)
		before := make([]Message, len(msgs))
		copy(before, msgs)

		out, err := Window(system, msgs, budget, maxObs)

		for i := range msgs {
			if msgs[i] != before[i] {
				t.Fatalf("input message %d changed", i)
			}
		}
		newestUser := -1
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == User {
				newestUser = i
				break
			}
		}
		// The current turn and what it costs.
		turnFrom := len(msgs)
		if newestUser >= 0 {
			turnFrom = newestUser
		}
		sysSize := utf8.RuneCountInString(system)
		turnSize := 0
		for _, m := range msgs[turnFrom:] {
			if m.Role == Observation {
				m.Content = Cut(m.Content, maxObs)
			}
			turnSize += utf8.RuneCountInString(m.Content)
		}
		if sysSize+turnSize > budget {
			var oe *OverflowError
			if !errors.As(err, &oe) || *oe != (OverflowError{System: sysSize, Turn: turnSize, Budget: budget}) {
				t.Fatalf("system %d + turn %d > budget %d: err = %v, want an OverflowError with those sizes", sysSize, turnSize, budget, err)
			}
			if out != nil {
				t.Fatalf("a window came with the overflow error: %d messages", len(out))
			}
			return
		}
		if err != nil {
			t.Fatalf("system %d + turn %d fit budget %d: err = %v", sysSize, turnSize, budget, err)
		}
		if len(out) == 0 || out[0] != (Message{Role: System, Content: system}) {
			t.Fatalf("first message %+v is not the system prompt", out[:min(1, len(out))])
		}
		// Map the window back to the conversation.
		var idx []int
		for _, m := range out[1:] {
			r, _ := utf8.DecodeRuneInString(m.Content)
			i := int(r) - 0x4E00
			if i < 0 || i >= len(msgs) {
				t.Fatalf("window message %q is not from the conversation", m.Content)
			}
			want := msgs[i]
			if want.Role == Observation {
				want.Content = Cut(want.Content, maxObs)
			}
			if m != want {
				t.Fatalf("window message %d is %+v, want %+v", i, m, want)
			}
			if len(idx) > 0 && i <= idx[len(idx)-1] {
				t.Fatalf("window out of order: %v then %d", idx, i)
			}
			idx = append(idx, i)
		}
		// A suffix of the conversation that holds the whole current turn.
		from := len(msgs)
		if len(idx) > 0 {
			from = idx[0]
		}
		if len(idx) != len(msgs)-from || from > turnFrom {
			t.Fatalf("kept %v is not a suffix holding the current turn from %d", idx, turnFrom)
		}
		// Calls and their observations together.
		if from > 0 && from < len(msgs) && msgs[from].Role == Observation && isCall(msgs[from-1]) {
			t.Fatalf("observation %d kept without its call", from)
		}
		// Within budget, counting cut sizes.
		used := 0
		for _, m := range out {
			used += utf8.RuneCountInString(m.Content)
		}
		if used > budget {
			t.Fatalf("window uses %d characters, budget %d", used, budget)
		}
		// As long as fits: the unit just before the suffix does not.
		if start := from - 1; start >= 0 {
			if start > 0 && msgs[start].Role == Observation && isCall(msgs[start-1]) {
				start--
			}
			unit := 0
			for j := start; j < from; j++ {
				m := msgs[j]
				if m.Role == Observation {
					m.Content = Cut(m.Content, maxObs)
				}
				unit += utf8.RuneCountInString(m.Content)
			}
			if unit <= budget-used {
				t.Fatalf("messages %d..%d (%d characters) were dropped though %d were left", start, from-1, unit, budget-used)
			}
		}
	})
}

// FuzzCut checks Cut against its definition.
func FuzzCut(f *testing.F) {
	f.Add("hello world", 5)
	f.Add("日本語テキスト", 3)
	f.Add("\xff\xfe", 1)
	f.Add("", 0)
	f.Fuzz(func(t *testing.T, s string, max int) {
		got := Cut(s, max)
		n := utf8.RuneCountInString(s)
		if max <= 0 || n <= max {
			if got != s {
				t.Fatalf("Cut(%q, %d) = %q, want it unchanged", s, max, got)
			}
			return
		}
		head := string([]rune(s)[:max])
		if utf8.ValidString(s) {
			if want := head + marker(n-max); got != want {
				t.Fatalf("Cut(%q, %d) = %q, want %q", s, max, got, want)
			}
		}
		at := strings.LastIndex(got, "\n[... ")
		if at < 0 {
			t.Fatalf("Cut(%q, %d) = %q: no marker", s, max, got)
		}
		kept := got[:at]
		if !strings.HasPrefix(s, kept) || utf8.RuneCountInString(kept) != max {
			t.Fatalf("Cut(%q, %d) = %q: not the first %d characters and a marker", s, max, got, max)
		}
		if got != kept+marker(n-max) {
			t.Fatalf("Cut(%q, %d) = %q: marker should say %d", s, max, got, n-max)
		}
	})
}
