package ollamatest_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// line is one line of a chat reply and when it reached the client.
type line struct {
	api.ChatResponse
	at time.Time
}

// costChat sends msgs to model as the real client does and returns the lines
// of the reply.
func costChat(ctx context.Context, t *testing.T, c *api.Client, model string, stream bool, msgs ...api.Message) ([]line, error) {
	t.Helper()
	req := &api.ChatRequest{Model: model, Messages: msgs, Stream: &stream}
	var lines []line
	err := c.Chat(ctx, req, func(r api.ChatResponse) error {
		lines = append(lines, line{r, time.Now()})
		return nil
	})
	return lines, err
}

// near compares simulated seconds computed in different orders.
func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func msg(role, content string) api.Message { return api.Message{Role: role, Content: content} }

// size is a message's characters as the fake renders it: role, newline,
// content, newline.
func size(m api.Message) int { return utf8.RuneCountInString(m.Role+m.Content) + 2 }

func sizes(ms ...api.Message) int {
	n := 0
	for _, m := range ms {
		n += size(m)
	}
	return n
}

// TestCostPrefix checks the cache accounting call by call: each call reuses
// the longest common prefix of its prompt with the previous prompt to the
// same model, and only the rest is evaluated and reported.
func TestCostPrefix(t *testing.T) {
	var (
		sys   = msg("system", "You are a media assistant. Reply with one JSON object.")
		sys2  = msg("system", "You are a media assistant. Reply with two JSON objects.")
		q1    = msg("user", "Is Dune in my library?")
		a1    = msg("assistant", `{"thought":"look","action":"library_search","args":{"query":"Dune"}}`)
		o1    = msg("user", "Result of library_search:\n[{\"title\":\"Dune\",\"year\":2021}]")
		q2    = msg("user", "And Arrival?")
		cafe  = msg("user", "café au lait")
		cafe2 = msg("user", "cafè")
	)
	// Where sys2 first differs from sys, in characters of the rendered prompt.
	diverge := len("system\n") + strings.Index(sys.Content, "one")

	steps := []struct {
		name          string
		model         string
		msgs          []api.Message
		status        int // a reply that fails: not charged, cache untouched
		reused, added int
	}{
		{name: "first call: everything is new", model: "a", msgs: []api.Message{sys, q1},
			reused: 0, added: sizes(sys, q1)},
		{name: "appended messages: the whole previous prompt is reused", model: "a", msgs: []api.Message{sys, q1, a1, o1},
			reused: sizes(sys, q1), added: sizes(a1, o1)},
		{name: "a failed call costs nothing and leaves the cache", model: "a", msgs: []api.Message{q2}, status: http.StatusServiceUnavailable},
		{name: "another model has a cache of its own", model: "b", msgs: []api.Message{sys, q1},
			reused: 0, added: sizes(sys, q1)},
		{name: "a changed system prompt: reuse stops where it changed", model: "a", msgs: []api.Message{sys2, q1, a1, o1},
			reused: diverge, added: len("two JSON objects")}, // the part of sys2 that differs from sys
		{name: "front trimmed: only the system prompt is reused", model: "a", msgs: []api.Message{sys2, a1, o1, q2},
			reused: sizes(sys2), added: sizes(q2)},
		{name: "the same prompt again: nothing is evaluated", model: "a", msgs: []api.Message{sys2, a1, o1, q2},
			reused: sizes(sys2, a1, o1, q2), added: 0},
		{name: "setup for characters", model: "c", msgs: []api.Message{cafe},
			reused: 0, added: sizes(cafe)},
		{name: "a shared first byte of a differing character is not reused", model: "c", msgs: []api.Message{cafe2},
			reused: len("user\ncaf"), added: 1}, // "è" replaced "é au lait"
	}

	const reply = `{"thought":"done","action":"final_response","args":{"answer":"Yes."}}` // 69 characters
	s := ollamatest.New(t)
	s.Handle(func(api.ChatRequest) ollamatest.Reply { return ollamatest.Reply{Content: reply} })
	s.SetCost(ollamatest.Cost{PromptRate: 100, GenRate: 10, Speedup: 1000})
	c := client(t, s)

	recorded := 0
	for _, st := range steps {
		if st.status != 0 {
			s.Push(ollamatest.Reply{Status: st.status})
			if _, err := costChat(context.Background(), t, c, st.model, false, st.msgs...); err == nil {
				t.Fatalf("%s: no error", st.name)
			}
			if n := len(s.Costs()); n != recorded {
				t.Errorf("%s: %d calls recorded, want %d", st.name, n, recorded)
			}
			continue
		}
		lines, err := costChat(context.Background(), t, c, st.model, false, st.msgs...)
		if err != nil || len(lines) != 1 {
			t.Fatalf("%s: %d lines, %v", st.name, len(lines), err)
		}
		costs := s.Costs()
		if len(costs) != recorded+1 {
			t.Fatalf("%s: %d calls recorded, want %d", st.name, len(costs), recorded+1)
		}
		recorded++
		got := costs[len(costs)-1]
		total := sizes(st.msgs...)
		newTokens := (total - st.reused + 3) / 4
		if got.Model != st.model || got.Stream || got.PromptChars != total || got.ReusedChars != st.reused ||
			got.NewChars != total-st.reused || got.AddedChars != st.added || got.PromptTokens != newTokens {
			t.Errorf("%s: got model %s stream %v prompt %d, reused %d, new %d (%d tokens), added %d\nwant prompt %d, reused %d, new %d (%d tokens), added %d",
				st.name, got.Model, got.Stream, got.PromptChars, got.ReusedChars, got.NewChars, got.PromptTokens, got.AddedChars,
				total, st.reused, total-st.reused, newTokens, st.added)
		}
		// What Ollama reports is what it evaluated.
		m := lines[0].Metrics
		wantSec := float64(newTokens)/100 + 18.0/10 // 69 characters are 18 tokens
		if m.PromptEvalCount != newTokens || m.EvalCount != 18 || got.OutputTokens != 18 ||
			!near(m.TotalDuration.Seconds(), wantSec) || !near(got.Seconds(), wantSec) {
			t.Errorf("%s: reported %+v, recorded %.3fs; want %d prompt and 18 reply tokens, %.3fs",
				st.name, m, got.Seconds(), newTokens, wantSec)
		}
		if wantIdeal := float64((st.added+3)/4)/100 + 1.8; !near(got.IdealSeconds, wantIdeal) {
			t.Errorf("%s: ideal %.3fs, want %.3fs", st.name, got.IdealSeconds, wantIdeal)
		}
	}
}

// TestCostCadence checks the pace of a reply: nothing before the prompt is
// read, then one token per 1/GenRate seconds, one line each when streaming,
// the whole reply in one line at the end otherwise. Timings are checked only
// as lower bounds (a deadline cannot pass early) and as a generous gap.
func TestCostCadence(t *testing.T) {
	const (
		// 40 characters ("user\n", 34, "\n"): 10 tokens, 100 ms at 100 tokens/s.
		prompt = 40
		// 36 characters: 9 tokens, 450 ms at 20 tokens/s.
		content = "Arrival (2016) is in your library. ✓"
		promptS = 0.1
		replyS  = 0.45
	)
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "whole"}[stream], func(t *testing.T) {
			s := ollamatest.New(t, ollamatest.Reply{Content: content})
			s.SetCost(ollamatest.Cost{PromptRate: 100, GenRate: 20})
			c := client(t, s)
			t0 := time.Now()
			lines, err := costChat(context.Background(), t, c, "m", stream, msg("user", strings.Repeat("q", prompt-6)))
			if err != nil {
				t.Fatal(err)
			}

			var text strings.Builder
			for _, l := range lines {
				text.WriteString(l.Message.Content)
				if n := utf8.RuneCountInString(l.Message.Content); stream && n > 4 {
					t.Errorf("a streamed line holds %d characters, more than a token", n)
				}
			}
			wantLines := 1
			if stream {
				wantLines = 9 + 1 // a line per token, then the figures
			}
			last := lines[len(lines)-1]
			if text.String() != content || len(lines) != wantLines || !last.Done || last.EvalCount != 9 || last.PromptEvalCount != 10 {
				t.Fatalf("%d lines, text %q, final %+v; want %d lines, 9 reply and 10 prompt tokens", len(lines), text.String(), last, wantLines)
			}

			// No line before the first token is due; the reply not before
			// its last.
			if d := lines[0].at.Sub(t0).Seconds(); d < promptS+0.05 {
				t.Errorf("first line after %.3fs, before the prompt and a token (%.3fs)", d, promptS+0.05)
			}
			if d := last.at.Sub(t0).Seconds(); d < promptS+replyS {
				t.Errorf("reply done after %.3fs, sooner than %.3fs", d, promptS+replyS)
			}
			if stream {
				// Eight token gaps of 50 ms lie between the first and the
				// last token: the first must come well before the end.
				if gap := lines[8].at.Sub(lines[0].at); gap < 200*time.Millisecond {
					t.Errorf("tokens arrived within %v: not streamed at 20 tokens/s", gap)
				}
			}

			costs := s.Costs()
			if len(costs) != 1 {
				t.Fatalf("%d calls recorded", len(costs))
			}
			cc := costs[0]
			if cc.Stream != stream || !near(cc.Seconds(), promptS+replyS) || cc.OutputTokens != 9 {
				t.Errorf("recorded %+v (%.3fs)", cc, cc.Seconds())
			}
			// Each token is produced on its own schedule whether streamed or
			// not; the offset of the last byte is in the last token.
			prev := cc.Start
			for off := 0; off < len(content); off++ {
				if !utf8.RuneStart(content[off]) {
					continue
				}
				at := cc.ProducedAt(off)
				tok := utf8.RuneCountInString(content[:off])/4 + 1
				if due := cc.Start.Add(time.Duration((promptS + float64(tok)/20) * float64(time.Second))); at.Before(due) || at.Before(prev) {
					t.Fatalf("byte %d (token %d) produced at +%v, due at +%v", off, tok, at.Sub(cc.Start), due.Sub(cc.Start))
				}
				prev = at
			}
			if !cc.ProducedAt(len(content)).IsZero() {
				t.Error("a time for an offset past the reply")
			}
		})
	}
}

// TestCostSpeedup checks that Speedup shortens the wait but not the figures.
func TestCostSpeedup(t *testing.T) {
	cpu := ollamatest.CPU
	cpu.Speedup = 1000
	s := ollamatest.New(t, ollamatest.Reply{Content: strings.Repeat("w", 80)}) // 20 tokens: 2.5 s at 8/s
	s.SetCost(cpu)
	c := client(t, s)
	t0 := time.Now()
	lines, err := costChat(context.Background(), t, c, "m", true, msg("user", strings.Repeat("p", 3994))) // 4000 characters: 1000 tokens, 16.67 s at 60/s
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	want := 1000.0/60 + 20.0/8
	last := lines[len(lines)-1]
	if got := last.TotalDuration.Seconds(); got < want-0.001 || got > want+0.001 {
		t.Errorf("total_duration %.3fs, want the simulated %.3fs", got, want)
	}
	if got := s.Costs()[0].Seconds(); !near(got, want) {
		t.Errorf("recorded %.3fs, want %.3fs", got, want)
	}
	if took < time.Duration(want/1000*float64(time.Second)) || took > 10*time.Second {
		t.Errorf("took %v, want about %.0fms", took, want)
	}
}

// TestCostClientGone checks that a stream stops when the client goes away,
// and that the call stays recorded with the tokens produced so far.
func TestCostClientGone(t *testing.T) {
	s := ollamatest.New(t, ollamatest.Reply{Content: strings.Repeat("t", 400)}) // 100 tokens: 10 s at 10/s
	s.SetCost(ollamatest.Cost{GenRate: 10})
	c := client(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := &api.ChatRequest{Model: "m", Messages: []api.Message{msg("user", "go")}}
	errGone := errors.New("gone")
	err := c.Chat(ctx, req, func(api.ChatResponse) error { cancel(); return errGone })
	if !errors.Is(err, errGone) && !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the client gone", err)
	}
	var r []ollamatest.Response
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if r = s.Responses(); len(r) == 1 && r[0].Ended {
			break
		}
	}
	if len(r) != 1 || !r[0].Ended || r[0].Complete {
		t.Fatalf("responses %+v: want one, ended early", r)
	}
	cc := s.Costs()[0]
	if cc.ProducedAt(0).IsZero() || !cc.ProducedAt(399).IsZero() || cc.OutputTokens != 100 {
		t.Errorf("recorded %+v: want the first token produced, not the last, of 100", cc)
	}
}
