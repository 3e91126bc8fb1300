package loop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ollama/ollama/api"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/schema"
)

// clock is a context source whose value changes at every turn, as the time
// and the live downloads do.
type clock struct {
	mu   sync.Mutex
	turn int
}

func (c *clock) RuntimeContext(context.Context) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.turn++
	return fmt.Sprintf("system.now: Current time: turn %d", c.turn)
}

// switchable is a toolbox whose tools can be disabled between turns, as a
// breaker or a health probe does.
type switchable struct {
	*toolbox
	mu  sync.Mutex
	off map[string]string // tool name: why it is disabled
}

func (s *switchable) Tools() []loop.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.toolbox.Tools())
	for i := range out {
		if why, ok := s.off[out[i].Name]; ok {
			out[i].Disabled = why
		}
	}
	return out
}

func (s *switchable) set(name, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if why == "" {
		delete(s.off, name)
		return
	}
	s.off[name] = why
}

func runes(s string) int { return utf8.RuneCountInString(s) }

func promptChars(msgs []api.Message) int {
	n := 0
	for _, m := range msgs {
		n += runes(m.Content)
	}
	return n
}

// TestPromptCacheStaysWarm runs a session of five turns, each a tool call and
// an answer, with a runtime context that changes at every turn and a tool
// that goes down for one turn, and checks the layout Ollama's prompt cache
// needs: the system prompt is byte-identical at every call; the runtime
// context is only in the last message; and every prompt starts with the
// whole previous one but that last message, so the model reads again at most
// that tail: today's session read its growing history again at every turn.
func TestPromptCacheStaysWarm(t *testing.T) {
	tb := newToolbox(t)
	tb.add(loop.Tool{Tool: schema.Tool{Name: "radarr_lookup", Description: "Look up a film in Radarr", Schema: json.RawMessage(`{"type":"object"}`)}},
		func(context.Context, json.RawMessage) (string, error) { return `{"monitored":true}`, nil })
	tb.add(loop.Tool{Tool: schema.Tool{Name: "sonarr_add", Description: "Add a show", Schema: json.RawMessage(`{"type":"object"}`)},
		Disabled: "plugin sonarr is on standby: MMCP_PLUGIN_SONARR_API_KEY is required"}, nil)
	tools := &switchable{toolbox: tb, off: map[string]string{}}
	fake := ollamatest.New(t)
	fake.SetCost(ollamatest.Cost{CharsPerToken: 4}) // figures only: no rates, no waiting
	r := newRunner(t, fake, tools)
	r.Context = &clock{}

	var conv convo.Conversation
	const turns = 5
	for turn := 1; turn <= turns; turn++ {
		// The third turn's tool is down (a breaker open): the tail says
		// so; its entry in the catalogue stays.
		why := ""
		if turn == 3 {
			why = "paused after repeated failures (5 consecutive failures); it will be tried again in 25s"
		}
		tools.set("radarr_lookup", why)
		fake.Push(reply("tmdb_search", fmt.Sprintf(`{"query":"film %d"}`, turn)), final(fmt.Sprintf("answer %d", turn)))
		if _, err := r.Run(context.Background(), &conv, fmt.Sprintf("question %d", turn), nil); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
	}

	reqs := fake.Requests()
	if len(reqs) != 2*turns {
		t.Fatalf("%d model calls, want %d", len(reqs), 2*turns)
	}
	system := reqs[0].Messages[0]
	if system.Role != "system" || !strings.Contains(system.Content, "- radarr_lookup: Look up a film in Radarr") ||
		!strings.Contains(system.Content, "- sonarr_add: plugin sonarr is on standby: MMCP_PLUGIN_SONARR_API_KEY is required") {
		t.Fatalf("system prompt:\n%s", system.Content)
	}
	// A tool never usable yet costs the prompt a line, not its arguments.
	if strings.Contains(system.Content, "Add a show") {
		t.Errorf("the system prompt documents sonarr_add, never usable:\n%s", system.Content)
	}
	for i, req := range reqs {
		turn := i/2 + 1
		if !sameMessage(req.Messages[0], system) {
			t.Errorf("call %d (turn %d): the system prompt changed:\n%s", i+1, turn, req.Messages[0].Content)
		}
		now := fmt.Sprintf("system.now: Current time: turn %d", turn)
		for j, m := range req.Messages {
			last := j == len(req.Messages)-1
			if strings.Contains(m.Content, "system.now:") != last || last && (m.Role != "user" || !strings.Contains(m.Content, now)) {
				t.Errorf("call %d: message %d of %d (%s) holds the runtime context: %v, want it in the last message only, with %q:\n%s",
					i+1, j, len(req.Messages), m.Role, strings.Contains(m.Content, "system.now:"), now, m.Content)
			}
		}
		down := strings.Contains(req.Messages[len(req.Messages)-1].Content, "- radarr_lookup: paused after repeated failures")
		if down != (turn == 3) || strings.Contains(string(req.Format), `"radarr_lookup"`) == (turn == 3) {
			t.Errorf("call %d (turn %d): radarr_lookup down in the tail %v, in the union %v", i+1, turn, down, strings.Contains(string(req.Format), `"radarr_lookup"`))
		}
		if i == 0 {
			continue
		}
		prev := reqs[i-1].Messages
		if held := prev[:len(prev)-1]; len(req.Messages) <= len(held) || !slices.EqualFunc(req.Messages[:len(held)], held, sameMessage) {
			t.Errorf("call %d (turn %d) does not start with the previous prompt but its tail", i+1, turn)
		}
	}
	// What the model read again, beyond what was new: the previous tail.
	for i, c := range fake.Costs()[1:] {
		tail := reqs[i].Messages[len(reqs[i].Messages)-1].Content
		if again := c.NewChars - c.AddedChars; again > runes(tail)+len("user\n\n") {
			t.Errorf("call %d read %d characters again (%d new, %d added), more than the previous tail (%d)", i+2, again, c.NewChars, c.AddedChars, runes(tail))
		}
	}
}

func sameMessage(a, b api.Message) bool { return a.Role == b.Role && a.Content == b.Content }

// TestPromptFitsTheBudget: the whole prompt, the tail and the corrections of
// a re-ask included, stays within MaxContextChars; the corrections push older
// turns out for that call rather than past the budget.
func TestPromptFitsTheBudget(t *testing.T) {
	fake := ollamatest.New(t)
	r := newRunner(t, fake, newToolbox(t), func(c *loop.Config) { c.MaxContextChars = 6000 })
	r.Context = &clock{}
	var conv convo.Conversation
	for turn := 1; turn <= 8; turn++ {
		// Each turn: an invalid reply of 1,900 characters, re-asked, then
		// the answer, of 700.
		fake.Push(ollamatest.Reply{Content: strings.Repeat("I think ", 237) + "..."}, final(strings.Repeat("a", 700)))
		if _, err := r.Run(context.Background(), &conv, fmt.Sprintf("question %d", turn), nil); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
	}
	for i, req := range fake.Requests() {
		if n := promptChars(req.Messages); n > 6000 {
			t.Errorf("call %d: %d characters sent, budget 6000", i+1, n)
		}
	}
}

// TestTokenBudget: when num_ctx holds fewer characters than
// MaxContextChars (at the ratio the client has learned), the window is cut
// to those, and an overflow names the setting that is short.
func TestTokenBudget(t *testing.T) {
	fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), final("never"))
	model, err := llm.New(llm.Options{Host: fake.URL, Model: "test-model", NumCtx: 1600, Retries: 1, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	budget, _ := model.PromptBudget(context.Background()) // (1600 - 400) * 3 = 3600
	tb := newToolbox(t)
	tb.funcs["tmdb_search"] = func(context.Context, json.RawMessage) (string, error) { return strings.Repeat("r", 3000), nil }
	r := &loop.Runner{Model: model, Tools: tb, Config: loop.DefaultConfig, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	_, err = r.Run(context.Background(), &convo.Conversation{}, "find dune", nil)
	var oe *loop.ContextOverflowError
	if !errors.As(err, &oe) || oe.Budget != budget || oe.Step != 2 {
		t.Fatalf("err = %v, want a ContextOverflowError at step 2 with the budget %d", err, budget)
	}
	for _, s := range []string{fmt.Sprintf("the %d characters that fit MMCP_OLLAMA_NUM_CTX=1600", budget), "3.0 characters per token", "raise MMCP_OLLAMA_NUM_CTX"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("err = %q lacks %q", err, s)
		}
	}
	if n := promptChars(fake.Requests()[0].Messages); n > budget {
		t.Errorf("the first call sent %d characters, budget %d", n, budget)
	}
}

// TestContextTooLong: Ollama counts tokens, the window characters; when
// Ollama refuses a prompt as longer than num_ctx, the window is cut to 70% of
// what was sent and the call made once more. Refused again, the turn ends
// with a ContextOverflowError that keeps Ollama's words.
func TestContextTooLong(t *testing.T) {
	tooLong := ollamatest.Reply{Status: 400, Error: "the input length exceeds the context length"}
	tests := []struct {
		name    string
		replies []ollamatest.Reply
		ok      bool
	}{
		{"a smaller window fits", []ollamatest.Reply{tooLong, final("fits")}, true},
		{"refused twice", []ollamatest.Reply{tooLong, tooLong, final("never")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := ollamatest.New(t)
			r := newRunner(t, fake, newToolbox(t))
			var logs bytes.Buffer
			r.Log = slog.New(slog.NewJSONHandler(&logs, nil))
			var conv convo.Conversation
			for turn := range 6 { // some history to cut
				fake.Push(final(strings.Repeat("a", 1500)))
				if _, err := r.Run(context.Background(), &conv, fmt.Sprintf("question %d", turn), nil); err != nil {
					t.Fatal(err)
				}
			}
			before := len(fake.Requests())
			fake.Push(tt.replies...)
			var events []loop.Event
			res, err := r.Run(context.Background(), &conv, "and now?", func(e loop.Event) { events = append(events, e) })
			reqs := fake.Requests()[before:]
			if len(reqs) != 2 {
				t.Fatalf("%d model calls, want 2 (retried once)", len(reqs))
			}
			first, second := promptChars(reqs[0].Messages), promptChars(reqs[1].Messages)
			if second > first*7/10 {
				t.Errorf("the retry sent %d characters, more than 70%% of the %d refused", second, first)
			}
			if last := reqs[1].Messages[len(reqs[1].Messages)-1]; last.Content != "and now?" {
				t.Errorf("the retry's last message is %q, want the question", last.Content)
			}
			if !strings.Contains(logs.String(), `"msg":"context_too_long"`) {
				t.Errorf("no context_too_long warning in:\n%s", logs.String())
			}
			if tt.ok {
				if err != nil || res.Answer != "fits" {
					t.Fatalf("Run = %+v, %v", res, err)
				}
				return
			}
			var oe *loop.ContextOverflowError
			if !errors.As(err, &oe) || !errors.Is(err, llm.ErrContextTooLong) {
				t.Fatalf("err = %v, want a ContextOverflowError carrying ErrContextTooLong", err)
			}
			for _, s := range []string{"Ollama refused the prompt", "the input length exceeds the context length", "raise MMCP_OLLAMA_NUM_CTX", fmt.Sprintf("this turn %d chars", oe.Turn)} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %q lacks %q", err, s)
				}
			}
			if oe.System+oe.Turn > second || oe.Turn < runes("and now?") {
				t.Errorf("sizes system %d + turn %d, with %d sent", oe.System, oe.Turn, second)
			}
			if n := len(events); n < 2 || events[n-2].Type != loop.EventContextOverflow {
				t.Errorf("events end %v, want context_overflow then error", eventTypes(events))
			}
		})
	}
}

// cutModel stands for Ollama replying until the context is full: its first
// reply stops there (done_reason "length"), cut in the middle of the JSON.
type cutModel struct {
	calls [][]convo.Message
}

func (m *cutModel) Chat(_ context.Context, msgs []convo.Message, _ json.RawMessage) (llm.Reply, error) {
	m.calls = append(m.calls, msgs)
	if len(m.calls) == 1 {
		return llm.Reply{Content: `{"thought":"` + strings.Repeat("so ", 400), Truncated: true, Usage: llm.Usage{Calls: 1, CompletionTokens: 400}}, nil
	}
	return llm.Reply{Content: `{"thought":"short","action":"final_response","args":{"answer":"ok"}}`, Usage: llm.Usage{Calls: 1}}, nil
}

// TestReplyCutAtTheContext: a reply that stopped at the end of the context is
// re-asked with a correction that says why it was cut, not only that its JSON
// is incomplete.
func TestReplyCutAtTheContext(t *testing.T) {
	m := &cutModel{}
	r := &loop.Runner{Model: m, Config: loop.DefaultConfig, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var problems []string
	res, err := r.Run(context.Background(), &convo.Conversation{}, "hi", func(e loop.Event) {
		if e.Type == loop.EventValidationError {
			problems = e.Problems
		}
	})
	if err != nil || res.Answer != "ok" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	const want = "reply: cut off at the end of the model's context after 400 tokens; send a shorter reply"
	if len(problems) == 0 || problems[0] != want {
		t.Errorf("problems = %q, want %q first", problems, want)
	}
	if fix := m.calls[1][len(m.calls[1])-1].Content; !strings.Contains(fix, want) {
		t.Errorf("the correction does not say the reply was cut:\n%s", fix)
	}
}
