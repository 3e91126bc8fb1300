package context

import (
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
	c1, o1 := call(chars("c", 10)), observe(chars("o", 10))
	c2, o2 := call(chars("d", 10)), observe(chars("p", 10))
	long := chars("x", 100)
	cutLong := chars("x", 10) + "\n[... 90 more characters cut]"
	bigUser := user(chars("U", 50))

	tests := []struct {
		name           string
		system         string
		msgs           []Message
		budget, maxObs int
		want           []Message
	}{
		{"empty conversation", s5, nil, 100, 0, []Message{sys(s5)}},
		{"everything fits", s5, []Message{u1, c1, o1, a1, u2}, 1000, 4000, []Message{sys(s5), u1, c1, o1, a1, u2}},
		{"exact fit", s5, []Message{u1, a1, u2}, 35, 0, []Message{sys(s5), u1, a1, u2}},
		{"one over drops the oldest", s5, []Message{u1, a1, u2}, 34, 0, []Message{sys(s5), a1, u2}},
		{"oldest dropped first", s5, []Message{u1, a1, u2, a2, u3}, 45, 0, []Message{sys(s5), a1, u2, a2, u3}},
		{"nothing but the newest user fits", s5, []Message{u1, a1, u2}, 15, 0, []Message{sys(s5), u2}},
		{"system and newest user survive over budget", chars("S", 50), []Message{u1, a1, bigUser}, 10, 0, []Message{sys(chars("S", 50)), bigUser}},
		{"zero budget", s5, []Message{u1, a1, u2}, 0, 0, []Message{sys(s5), u2}},
		{"no user message", s5, []Message{c1, o1, a1}, 35, 0, []Message{sys(s5), c1, o1, a1}},
		{"no user message, over budget", s5, []Message{c1, o1, a1}, 25, 0, []Message{sys(s5), a1}},
		{"pair kept together", s5, []Message{u1, c1, o1}, 35, 0, []Message{sys(s5), u1, c1, o1}},
		// 10 characters are left after the user message: the observation
		// alone would fit, but never without its call.
		{"pair dropped together in the current turn", s5, []Message{u1, c1, o1}, 25, 0, []Message{sys(s5), u1}},
		{"pair dropped together in history", s5, []Message{u1, c1, o1, u2}, 25, 0, []Message{sys(s5), u2}},
		{"one of two pairs", s5, []Message{u1, c1, o1, c2, o2}, 35, 0, []Message{sys(s5), u1, c2, o2}},
		{"current turn kept before older history", s5, []Message{u1, a1, u2, c1, o1, c2, o2}, 55, 0, []Message{sys(s5), u2, c1, o1, c2, o2}},
		{"current turn partly kept, newest user first", s5, []Message{u1, a1, u2, c1, o1, c2, o2}, 45, 0, []Message{sys(s5), u2, c2, o2}},
		{"answer without a tool is not a pair with an observation", s5, []Message{u1, a1, o1}, 25, 0, []Message{sys(s5), u1, o1}},
		{"tool call waiting for its observation", s5, []Message{u1, c1}, 25, 0, []Message{sys(s5), u1, c1}},
		{"observation cut with the exact count", s5, []Message{u1, c1, observe(long)}, 1000, 10, []Message{sys(s5), u1, c1, observe(cutLong)}},
		{"observation counts at its cut size", s5, []Message{u1, c1, observe(long)}, 25 + size(cutLong), 10, []Message{sys(s5), u1, c1, observe(cutLong)}},
		{"cut observation one character over", s5, []Message{u1, c1, observe(long)}, 24 + size(cutLong), 10, []Message{sys(s5), u1}},
		{"observation at the limit not cut", s5, []Message{u1, c1, observe(chars("o", 10))}, 1000, 10, []Message{sys(s5), u1, c1, observe(chars("o", 10))}},
		{"maxObservation 0 means no cut", s5, []Message{u1, c1, observe(long)}, 1000, 0, []Message{sys(s5), u1, c1, observe(long)}},
		{"negative maxObservation means no cut", s5, []Message{u1, c1, observe(long)}, 1000, -1, []Message{sys(s5), u1, c1, observe(long)}},
		{"only observations are cut", s5, []Message{user(long), call(long), answer(long)}, 1000, 10, []Message{sys(s5), user(long), call(long), answer(long)}},
		// 10 characters of 2 or 3 bytes each: counted as 10, not 20 or 30.
		{"multi-byte characters count once", "日本語", []Message{user(chars("é", 10)), answer(chars("日", 10)), user(chars("x", 10))}, 33, 0, []Message{sys("日本語"), user(chars("é", 10)), answer(chars("日", 10)), user(chars("x", 10))}},
		{"multi-byte budget one short", "日本語", []Message{user(chars("é", 10)), answer(chars("日", 10)), user(chars("x", 10))}, 32, 0, []Message{sys("日本語"), answer(chars("日", 10)), user(chars("x", 10))}},
		{"multi-byte observation cut on a character", s5, []Message{u1, c1, observe(chars("é", 12) + "😀" + chars("日", 7))}, 1000, 13, []Message{sys(s5), u1, c1, observe(chars("é", 12) + "😀\n[... 7 more characters cut]")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.msgs)
			got := Window(tt.system, tt.msgs, tt.budget, tt.maxObs)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Window:\n got %s\nwant %s", show(got), show(tt.want))
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

// TestWindowDoesNotAlias checks that the window is a new slice: appending to
// it or editing it leaves the conversation alone.
func TestWindowDoesNotAlias(t *testing.T) {
	conv := Conversation{}
	conv.Append(user("hello"), call("look"), observe(chars("o", 50)))
	stored := slices.Clone(conv.Messages)
	w := Window("sys", conv.Messages, 1000, 10)
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
