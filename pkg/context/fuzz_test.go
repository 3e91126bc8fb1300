package context

import (
	"errors"
	"slices"
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

// FuzzWindow checks Window's promises on arbitrary conversations: the system
// prompt first; the current turn (the newest user message and everything
// after it) whole, or an OverflowError with the true sizes when it does not
// fit with the system prompt and what comes after; before it, the older
// messages from a turn boundary on, in order, within the budget; observations
// cut as Cut cuts them; the input untouched. And what keeps Ollama's cache
// warm: against the window of the call before (the conversation up to the
// previous user message or observation), the start is the same, or that
// start had passed the high mark and the new window is down to the low mark.
func FuzzWindow(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 2, 3, 1}, "system", 100, 10, 0)
	f.Add([]byte{0x80, 0xfe, 0x7f, 3, 3, 2, 0}, "", 0, 0, 0)
	f.Add([]byte{2, 3, 2, 3, 2, 3}, "日本語", 50, 5, 3)
	f.Add([]byte{0, 2, 3, 1, 0, 2, 3, 2, 3}, "s", 60, 8, 7)
	f.Add([]byte{0, 0x7d, 0x7e, 0x7f, 0, 0x7d, 0x7e, 0x7f, 0, 0x7d, 0x7e, 0x7f, 0}, "sys", 200, 40, 0)
	f.Add([]byte("7771"), "0", 118, 10, 0) // no user message: calls before any turn
	f.Add([]byte{}, "s", -1, -1, -1)
	f.Fuzz(func(t *testing.T, data []byte, system string, budget, maxObs, after int) {
		if len(data) > 2000 {
			return
		}
		budget %= 5000
		maxObs %= 64
		after = max(after%100, 0)
		msgs := fuzzConversation(data)
		before := make([]Message, len(msgs))
		copy(before, msgs)
		lim := Limits{Budget: budget, MaxObservation: maxObs}

		out, err := Window(system, msgs, after, lim)

		for i := range msgs {
			if msgs[i] != before[i] {
				t.Fatalf("input message %d changed", i)
			}
		}
		cut := func(m Message) Message {
			if m.Role == Observation {
				m.Content = Cut(m.Content, maxObs)
			}
			return m
		}
		sizeOf := func(ms []Message) int {
			n := 0
			for _, m := range ms {
				n += utf8.RuneCountInString(cut(m).Content)
			}
			return n
		}
		turnFrom := newestUser(msgs)
		sysSize := utf8.RuneCountInString(system)
		turnSize := sizeOf(msgs[turnFrom:]) + after
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
			if want := cut(msgs[i]); m != want {
				t.Fatalf("window message %d is %+v, want %+v", i, m, want)
			}
			if len(idx) > 0 && i <= idx[len(idx)-1] {
				t.Fatalf("window out of order: %v then %d", idx, i)
			}
			idx = append(idx, i)
		}
		// A suffix of the conversation that holds the whole current turn
		// and starts where a turn does.
		from := len(msgs) - (len(out) - 1)
		if len(idx) > 0 && (idx[0] != from || len(idx) != len(msgs)-from) || from > turnFrom {
			t.Fatalf("kept %v is not a suffix holding the current turn from %d", idx, turnFrom)
		}
		// Before the first user message there is no turn: a call made there
		// may have dropped everything it saw.
		if from > 0 && from < len(msgs) && msgs[from].Role != User && newestUser(msgs[:from]) < from {
			t.Fatalf("the window starts at message %d, a %s, not at a turn", from, msgs[from].Role)
		}
		if used := sysSize + sizeOf(msgs[from:]) + after; used > budget {
			t.Fatalf("window uses %d characters with what comes after, budget %d", used, budget)
		}

		// Against the previous call.
		prev := previousCall(msgs)
		if prev < 0 {
			return
		}
		now, err1 := Window(system, msgs, 0, lim)
		was, err2 := Window(system, msgs[:prev], 0, lim)
		if err1 != nil || err2 != nil {
			return
		}
		start, wasStart := len(msgs)-(len(now)-1), prev-(len(was)-1)
		high, low := Marks(sysSize, budget)
		switch {
		case start < wasStart:
			t.Fatalf("the start went back from %d to %d", wasStart, start)
		case start == wasStart:
			if !slices.Equal(now[:len(was)], was) {
				t.Fatalf("same start %d, but the window does not begin with the previous one", start)
			}
		case sysSize+sizeOf(msgs[wasStart:]) <= high:
			t.Fatalf("the start moved from %d to %d though the prompt kept it was %d, not past the high mark %d",
				wasStart, start, sysSize+sizeOf(msgs[wasStart:]), high)
		case start != turnFrom && sysSize+sizeOf(msgs[start:]) > low:
			t.Fatalf("the start moved from %d to %d, and the prompt is %d, over the low mark %d",
				wasStart, start, sysSize+sizeOf(msgs[start:]), low)
		}
	})
}

// newestUser is where the current turn starts: the newest user message, or
// the end when there is none.
func newestUser(msgs []Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == User {
			return i
		}
	}
	return len(msgs)
}

// previousCall is the length of the conversation at the model call before
// the one for all of msgs: up to the newest user message or observation
// before the last message; -1 if there is none.
func previousCall(msgs []Message) int {
	for i := len(msgs) - 1; i > 0; i-- {
		if r := msgs[i-1].Role; r == User || r == Observation {
			return i
		}
	}
	return -1
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
