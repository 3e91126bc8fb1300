package context

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func user(s string) Message        { return Message{Role: User, Content: s} }
func answer(s string) Message      { return Message{Role: Assistant, Content: s} }
func call(s string) Message        { return Message{Role: Assistant, Content: s, Tool: "search"} }
func observe(s string) Message     { return Message{Role: Observation, Content: s, Tool: "search"} }
func sys(s string) Message         { return Message{Role: System, Content: s} }
func chars(c string, n int) string { return strings.Repeat(c, n) }

// size is what the window counts for a message's content: characters.
func size(s string) int { return utf8.RuneCountInString(s) }

func TestWindow(t *testing.T) {
	const s5 = "SSSSS" // a 5-character system prompt
	u1, a1, u2, a2, u3 := user(chars("1", 10)), answer(chars("2", 10)), user(chars("3", 10)), answer(chars("4", 10)), user(chars("5", 10))
	a3, u4 := answer(chars("6", 10)), user(chars("7", 10))
	c1, o1 := call(chars("c", 10)), observe(chars("o", 10))
	c2, o2 := call(chars("d", 10)), observe(chars("p", 10))
	long := chars("x", 100)
	cutLong := chars("x", 10) + "\n[... 90 more characters cut]"
	bigUser := user(chars("U", 50))

	tests := []struct {
		name           string
		system         string
		msgs           []Message
		after          int // characters the caller sends after the window
		budget, maxObs int
		want           []Message
		overflow       *OverflowError // want this error and no window
	}{
		{name: "empty conversation", system: s5, budget: 100, want: []Message{sys(s5)}},
		{name: "everything fits", system: s5, msgs: []Message{u1, c1, o1, a1, u2}, budget: 1000, maxObs: 4000, want: []Message{sys(s5), u1, c1, o1, a1, u2}},
		// 35 characters, and 90% of 39 is 35: at the high mark, not past it.
		{name: "at the high mark nothing is dropped", system: s5, msgs: []Message{u1, a1, u2}, budget: 39, want: []Message{sys(s5), u1, a1, u2}},
		// 35 characters, past 90% of 38 (34): the oldest turn goes, and
		// the prompt is 15, under the low mark (5 + half of 34-5: 19).
		{name: "past the high mark the oldest turn goes", system: s5, msgs: []Message{u1, a1, u2}, budget: 38, want: []Message{sys(s5), u2}},
		// 75 characters, past 90% of 80 (72): turns go, oldest first,
		// until the prompt is at most the low mark (5 + half of 72-5:
		// 38): one is not enough (55), two are (35).
		{name: "down to the low mark, whole turns", system: s5, msgs: []Message{u1, a1, u2, a2, u3, a3, u4}, budget: 80, want: []Message{sys(s5), u3, a3, u4}},
		{name: "a turn's calls and results go with it", system: s5, msgs: []Message{u1, c1, o1, a1, u2, a2, u3, a3, u4}, budget: 100, want: []Message{sys(s5), u3, a3, u4}},
		{name: "nothing but the current turn fits", system: s5, msgs: []Message{u1, a1, u2}, budget: 16, want: []Message{sys(s5), u2}},
		{name: "current turn kept before older history", system: s5, msgs: []Message{u1, a1, u2, c1, o1, c2, o2}, budget: 60, want: []Message{sys(s5), u2, c1, o1, c2, o2}},
		{name: "no user message, under the high mark", system: s5, msgs: []Message{c1, o1, a1}, budget: 1000, want: []Message{sys(s5), c1, o1, a1}},
		// With no user message there is no turn boundary to cut at: the
		// history goes whole.
		{name: "no user message, past the high mark", system: s5, msgs: []Message{c1, o1, a1}, budget: 35, want: []Message{sys(s5)}},
		{name: "tool call waiting for its observation", system: s5, msgs: []Message{u1, c1}, budget: 25, want: []Message{sys(s5), u1, c1}},

		// What the caller sends after the window (the live context, a
		// correction) counts: when it does not fit, older turns go for
		// this call, however far below the high mark the window is.
		{name: "what comes after counts", system: s5, msgs: []Message{u1, a1, u2}, after: 70, budget: 100, want: []Message{sys(s5), u2}},
		{name: "what comes after fits", system: s5, msgs: []Message{u1, a1, u2}, after: 65, budget: 100, want: []Message{sys(s5), u1, a1, u2}},

		{name: "observation cut with the exact count", system: s5, msgs: []Message{u1, c1, observe(long)}, budget: 1000, maxObs: 10, want: []Message{sys(s5), u1, c1, observe(cutLong)}},
		{name: "observation counts at its cut size", system: s5, msgs: []Message{u1, c1, observe(long)}, budget: 25 + size(cutLong), maxObs: 10, want: []Message{sys(s5), u1, c1, observe(cutLong)}},
		// 74 characters with the observation cut, 135 without: 90% of 83
		// holds the first.
		{name: "cut observation in history counts at its cut size", system: s5, msgs: []Message{u1, c1, observe(long), u2}, budget: 83, maxObs: 10, want: []Message{sys(s5), u1, c1, observe(cutLong), u2}},
		{name: "observation at the limit not cut", system: s5, msgs: []Message{u1, c1, observe(chars("o", 10))}, budget: 1000, maxObs: 10, want: []Message{sys(s5), u1, c1, observe(chars("o", 10))}},
		{name: "maxObservation 0 means no cut", system: s5, msgs: []Message{u1, c1, observe(long)}, budget: 1000, want: []Message{sys(s5), u1, c1, observe(long)}},
		{name: "negative maxObservation means no cut", system: s5, msgs: []Message{u1, c1, observe(long)}, budget: 1000, maxObs: -1, want: []Message{sys(s5), u1, c1, observe(long)}},
		{name: "only observations are cut", system: s5, msgs: []Message{user(long), call(long), answer(long)}, budget: 1000, maxObs: 10, want: []Message{sys(s5), user(long), call(long), answer(long)}},
		// 10 characters of 2 or 3 bytes each: counted as 10, not 20 or 30.
		{name: "multi-byte characters count once", system: "日本語", msgs: []Message{user(chars("é", 10)), answer(chars("日", 10)), user(chars("x", 10))}, budget: 37, want: []Message{sys("日本語"), user(chars("é", 10)), answer(chars("日", 10)), user(chars("x", 10))}},
		{name: "multi-byte past the high mark", system: "日本語", msgs: []Message{user(chars("é", 10)), answer(chars("日", 10)), user(chars("x", 10))}, budget: 36, want: []Message{sys("日本語"), user(chars("x", 10))}},
		{name: "multi-byte observation cut on a character", system: s5, msgs: []Message{u1, c1, observe(chars("é", 12) + "😀" + chars("日", 7))}, budget: 1000, maxObs: 13, want: []Message{sys(s5), u1, c1, observe(chars("é", 12) + "😀\n[... 7 more characters cut]")}},

		// The current turn (the newest user message and every call and
		// observation after it) is never cut: when it does not fit with the
		// system prompt, the window says so instead of leaving the model
		// blind to the turn's own results.
		{name: "current turn one over", system: s5, msgs: []Message{u1, c1, o1}, budget: 34,
			overflow: &OverflowError{System: 5, Turn: 30, Budget: 34}},
		{name: "current turn pair over, history beside it", system: s5, msgs: []Message{u1, a1, u2, c1, o1, c2, o2}, budget: 45,
			overflow: &OverflowError{System: 5, Turn: 50, Budget: 45}},
		{name: "only the newest pair would fit", system: s5, msgs: []Message{u1, c1, o1, c2, o2}, budget: 35,
			overflow: &OverflowError{System: 5, Turn: 50, Budget: 35}},
		{name: "current turn counts observations at their cut size", system: s5, msgs: []Message{u1, c1, observe(long)}, budget: 24 + size(cutLong), maxObs: 10,
			overflow: &OverflowError{System: 5, Turn: 20 + size(cutLong), Budget: 24 + size(cutLong)}},
		{name: "what comes after is part of the turn", system: s5, msgs: []Message{u1, a1, u2}, after: 86, budget: 100,
			overflow: &OverflowError{System: 5, Turn: 96, Budget: 100}},
		{name: "system prompt over budget", system: chars("S", 50), msgs: []Message{u1, a1, bigUser}, budget: 10,
			overflow: &OverflowError{System: 50, Turn: 50, Budget: 10}},
		{name: "system prompt over budget without a user message", system: chars("S", 50), msgs: []Message{c1, o1}, budget: 49,
			overflow: &OverflowError{System: 50, Turn: 0, Budget: 49}},
		{name: "zero budget", system: s5, msgs: []Message{u1, a1, u2}, budget: 0,
			overflow: &OverflowError{System: 5, Turn: 10, Budget: 0}},
		{name: "multi-byte current turn one over", system: "日本語", msgs: []Message{user(chars("é", 10)), call(chars("日", 10)), observe(chars("😀", 10))}, budget: 32,
			overflow: &OverflowError{System: 3, Turn: 30, Budget: 32}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.msgs)
			got, err := Window(tt.system, tt.msgs, tt.after, Limits{Budget: tt.budget, MaxObservation: tt.maxObs})
			if tt.overflow != nil {
				var oe *OverflowError
				if !errors.As(err, &oe) || *oe != *tt.overflow {
					t.Fatalf("Window: err = %#v, window %s\nwant %#v", err, show(got), tt.overflow)
				}
				if got != nil {
					t.Errorf("Window returned %s with its overflow error, want nothing to send", show(got))
				}
			} else {
				if err != nil {
					t.Fatalf("Window: %v", err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("Window:\n got %s\nwant %s", show(got), show(tt.want))
				}
			}
			if !reflect.DeepEqual(tt.msgs, before) {
				t.Errorf("Window changed its input:\n got %s\nwant %s", show(tt.msgs), show(before))
			}
			for _, m := range got {
				if !utf8.ValidString(m.Content) {
					t.Errorf("invalid UTF-8 in %q", m.Content)
				}
			}
		})
	}
}

// TestWindowMovesInLargeSteps grows a conversation call by call, as the loop
// does, and checks what Ollama's prompt cache needs: each window starts with
// the whole previous one (the same start) until the prompt passes the high
// mark; then older turns go at once down to the low mark, so the start moves
// once every few turns, not at every turn as a full window would.
func TestWindowMovesInLargeSteps(t *testing.T) {
	system := chars("S", 100)
	lim := Limits{Budget: 2000, MaxObservation: 4000}
	high, low := Marks(size(system), lim.Budget)
	var conv []Message
	var prev []Message // the previous call's window
	prevStart, moves, calls := 0, 0, 0
	check := func() {
		t.Helper()
		w, err := Window(system, conv, 0, lim)
		if err != nil {
			t.Fatalf("call %d: %v", calls, err)
		}
		calls++
		start := len(conv) - (len(w) - 1)
		prompt := promptSize(w)
		if prompt > lim.Budget {
			t.Fatalf("call %d: %d characters, budget %d", calls, prompt, lim.Budget)
		}
		if start != prevStart {
			moves++
			if kept := size(system) + sizeAll(conv[prevStart:]); kept <= high {
				t.Errorf("call %d: the start moved from %d to %d though keeping it made %d characters, not past the high mark %d", calls, prevStart, start, kept, high)
			}
			if prompt > low && start != lastUser(conv) {
				t.Errorf("call %d: after the move the prompt is %d characters, over the low mark %d", calls, prompt, low)
			}
		} else if prev != nil && !reflect.DeepEqual(w[:len(prev)], prev) {
			t.Errorf("call %d: same start, but the window does not begin with the previous one", calls)
		}
		prev, prevStart = w, start
	}
	const turns = 40
	for i := range turns {
		// 40 + 60 + 200 + 100 = 400 characters a turn.
		conv = append(conv, user(fmt.Sprintf("%03d", i)+chars("u", 37)))
		check()
		conv = append(conv, call(chars("c", 60)), observe(chars("o", 200)))
		check()
		conv = append(conv, answer(chars("a", 100)))
	}
	// The band between the marks is 20% of the budget, a turn 20%: the
	// start moves every second turn or so, never at every turn.
	if moves == 0 || moves > turns/2+1 {
		t.Errorf("the start moved %d times in %d turns, want between 1 and %d", moves, turns, turns/2+1)
	}
}

// TestWindowIsAFunctionOfTheConversation: the cut is derived from the
// conversation alone, so a daemon restarted between two turns, or a session
// read back from disk, cuts where it did before.
func TestWindowIsAFunctionOfTheConversation(t *testing.T) {
	var conv []Message
	for i := range 30 {
		conv = append(conv, user(fmt.Sprintf("q%02d", i)), call(chars("c", 50)), observe(chars("o", 300)), answer(chars("a", 80)))
	}
	conv = append(conv, user("now"))
	lim := Limits{Budget: 3000, MaxObservation: 4000}
	first, err := Window("sys", conv, 0, lim)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Window("sys", slices.Clone(conv), 0, lim)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, again) {
		t.Errorf("two windows of one conversation differ:\n%s\n%s", show(first), show(again))
	}
}

func promptSize(w []Message) int { return sizeAll(w) }

func sizeAll(ms []Message) int {
	n := 0
	for _, m := range ms {
		n += size(m.Content)
	}
	return n
}

func lastUser(ms []Message) int {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Role == User {
			return i
		}
	}
	return -1
}

func TestOverflowErrorSaysTheSizes(t *testing.T) {
	err := &OverflowError{System: 50123, Turn: 4210, Budget: 20000}
	want := "the prompt (system 50123 characters + this turn 4210 characters) exceeds the budget of 20000 characters"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

// TestWindowDoesNotAlias checks that the window is a new slice: appending to
// it or editing it leaves the conversation alone.
func TestWindowDoesNotAlias(t *testing.T) {
	conv := Conversation{}
	conv.Append(user("hello"), call("look"), observe(chars("o", 50)))
	stored := slices.Clone(conv.Messages)
	w, err := Window("sys", conv.Messages, 0, Limits{Budget: 1000, MaxObservation: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range w {
		w[i].Content = "changed"
	}
	_ = append(w, user("more"))
	if !reflect.DeepEqual(conv.Messages, stored) {
		t.Errorf("conversation changed through its window: %s", show(conv.Messages))
	}
}

func TestCut(t *testing.T) {
	tests := []struct {
		name string
		s    string
		max  int
		want string
	}{
		{"empty", "", 5, ""},
		{"shorter", "hello", 10, "hello"},
		{"exact", "hello", 5, "hello"},
		{"one over", "hello!", 5, "hello\n[... 1 more characters cut]"},
		{"longer", "hello world", 5, "hello\n[... 6 more characters cut]"},
		{"max 0 means no cut", "hello world", 0, "hello world"},
		{"negative max means no cut", "hello world", -3, "hello world"},
		{"more bytes than max, not more characters", "ééé", 4, "ééé"},
		{"two-byte characters", "éééééé", 4, "éééé\n[... 2 more characters cut]"},
		{"three-byte characters", "日本語テキスト", 3, "日本語\n[... 4 more characters cut]"},
		{"four-byte characters", "😀😁😂", 1, "😀\n[... 2 more characters cut]"},
		{"mixed widths", "aé日😀b", 4, "aé日😀\n[... 1 more characters cut]"},
		{"combining marks are characters", "e\u0301e\u0301", 1, "e\n[... 3 more characters cut]"},
		{"invalid bytes count one each", "\xff\xfe\xfd", 1, "\xff\n[... 2 more characters cut]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Cut(tt.s, tt.max)
			if got != tt.want {
				t.Errorf("Cut(%q, %d) = %q, want %q", tt.s, tt.max, got, tt.want)
			}
			if utf8.ValidString(tt.s) && !utf8.ValidString(got) {
				t.Errorf("Cut split a character: %q", got)
			}
		})
	}
}

func show(ms []Message) string {
	var b strings.Builder
	b.WriteString("[")
	for i, m := range ms {
		if i > 0 {
			b.WriteString(" ")
		}
		c := m.Content
		if utf8.RuneCountInString(c) > 24 {
			c = string([]rune(c)[:24]) + "…"
		}
		fmt.Fprintf(&b, "%s%s:%q(%d)", m.Role, map[bool]string{true: "/" + m.Tool, false: ""}[m.Tool != ""], c, size(m.Content))
	}
	b.WriteString("]")
	return b.String()
}
