package context

import (
	"strings"
	"testing"
)

// benchConversation is n messages of about 200 characters: turns of a user
// message, tool calls with their observations, and a final answer; a third
// of the text is multi-byte, and one observation in 25 is long enough to be
// cut (about 6,000 characters).
func benchConversation(n int) []Message {
	texts := []string{
		strings.Repeat("Find the new season of that show and add it to the list. ", 4)[:200],
		strings.Repeat("Café, crème brûlée, naïve façade: déjà vu à la carte. ", 4),
		strings.Repeat("日本語のテキストと絵文字😀を混ぜたメッセージです。", 8),
	}
	msgs := make([]Message, 0, n)
	for i := 0; len(msgs) < n; i++ {
		text := texts[i%len(texts)]
		switch i % 6 {
		case 0:
			msgs = append(msgs, Message{Role: User, Content: text})
		case 1, 3:
			msgs = append(msgs, Message{Role: Assistant, Tool: "search", Content: text})
		case 2, 4:
			content := text
			if i%50 == 2 {
				content = strings.Repeat(text, 30) // ~6,000 characters: cut
			}
			msgs = append(msgs, Message{Role: Observation, Tool: "search", Content: content})
		case 5:
			msgs = append(msgs, Message{Role: Assistant, Content: text})
		}
	}
	return msgs
}

func BenchmarkWindow10k(b *testing.B) {
	msgs := benchConversation(10_000)
	system := strings.Repeat("You are a media assistant. ", 40)
	total := 0
	for _, m := range msgs {
		total += size(m.Content)
	}
	for _, bc := range []struct {
		name   string
		budget int
	}{
		{"budget_20000", 20_000},
		{"keep_all", 2 * (total + size(system))}, // the worst case: every message examined and copied
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var kept int
			for b.Loop() {
				w, err := Window(system, msgs, 0, Limits{Budget: bc.budget, MaxObservation: 4000})
				if err != nil {
					b.Fatal(err)
				}
				kept = len(w)
			}
			b.ReportMetric(float64(kept), "msgs")
		})
	}
}

func TestBenchConversation(t *testing.T) {
	msgs := benchConversation(10_000)
	if len(msgs) != 10_000 {
		t.Fatalf("%d messages", len(msgs))
	}
	total := 0
	for _, m := range msgs {
		total += size(m.Content)
	}
	w, err := Window("s", msgs, 0, Limits{Budget: 2 * total, MaxObservation: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != len(msgs)+1 {
		t.Errorf("keep-all budget kept %d of %d", len(w)-1, len(msgs))
	}
	cut := 0
	for _, m := range w {
		if strings.Contains(m.Content, " more characters cut]") {
			cut++
		}
	}
	if cut == 0 {
		t.Error("no observation long enough to be cut")
	}
}
