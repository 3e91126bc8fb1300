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

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

type searchArgs struct {
	Query     string `json:"query" jsonschema:"minLength=1,description=Title to look for"`
	MediaType string `json:"media_type,omitempty" jsonschema:"enum=movie,enum=tv"`
	Year      int    `json:"year,omitempty"`
}

// toolbox is an in-process tool set: each tool runs a Go function.
type toolbox struct {
	mu    sync.Mutex
	tools []loop.Tool
	funcs map[string]func(ctx context.Context, args json.RawMessage) (string, error)
	calls []string // "name args", in order
}

func newToolbox(t testing.TB) *toolbox {
	t.Helper()
	s, err := schema.Reflect(searchArgs{})
	if err != nil {
		t.Fatal(err)
	}
	tb := &toolbox{funcs: map[string]func(context.Context, json.RawMessage) (string, error){}}
	tb.add(loop.Tool{Tool: schema.Tool{Name: "tmdb_search", Description: "Search TMDB", Schema: s}},
		func(_ context.Context, args json.RawMessage) (string, error) {
			return `{"results":[{"id":438631,"title":"Dune","year":2021}]}`, nil
		})
	return tb
}

func (tb *toolbox) add(t loop.Tool, f func(context.Context, json.RawMessage) (string, error)) {
	tb.tools = append(tb.tools, t)
	tb.funcs[t.Name] = f
}

func (tb *toolbox) Tools() []loop.Tool { return tb.tools }

func (tb *toolbox) Call(ctx context.Context, name string, args json.RawMessage) (string, error) {
	tb.mu.Lock()
	tb.calls = append(tb.calls, name+" "+string(args))
	f := tb.funcs[name]
	tb.mu.Unlock()
	return f(ctx, args)
}

func newRunner(t *testing.T, fake *ollamatest.Server, tools loop.Tools, edit ...func(*loop.Config)) *loop.Runner {
	t.Helper()
	model, err := llm.New(llm.Options{Host: fake.URL, Model: "test-model", Retries: 1, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cfg := loop.DefaultConfig
	for _, e := range edit {
		e(&cfg)
	}
	return &loop.Runner{Model: model, Tools: tools, Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func reply(action, args string) ollamatest.Reply {
	return ollamatest.Reply{Content: fmt.Sprintf(`{"thought":"t","action":%q,"args":%s}`, action, args)}
}

func final(answer string) ollamatest.Reply {
	b, _ := json.Marshal(answer)
	return reply(schema.FinalAction, `{"answer":`+string(b)+`}`)
}

func TestAnswerAtOnce(t *testing.T) {
	fake := ollamatest.New(t, final("Hello!"))
	r := newRunner(t, fake, newToolbox(t))
	var conv convo.Conversation
	res, err := r.Run(context.Background(), &conv, "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "Hello!" || len(res.Steps) != 1 || res.Forced || res.TraceID == "" {
		t.Fatalf("result = %+v", res)
	}
	if res.Usage.Calls != 1 || res.Usage.PromptTokens != ollamatest.DefaultPromptTokens {
		t.Errorf("usage = %+v", res.Usage)
	}
	req := fake.Requests()[0]
	if req.Model != "test-model" || req.Stream == nil || !*req.Stream || len(req.Tools) != 0 {
		t.Errorf("request: model %q stream %v tools %d", req.Model, req.Stream, len(req.Tools))
	}
	if req.Messages[0].Role != "system" || !strings.Contains(req.Messages[0].Content, "- tmdb_search: Search TMDB") {
		t.Errorf("system prompt does not list the tool:\n%s", req.Messages[0].Content)
	}
	if last := req.Messages[len(req.Messages)-1]; last.Role != "user" || last.Content != "hi" {
		t.Errorf("last message = %+v", last)
	}
	if !strings.Contains(string(req.Format), `"const":"tmdb_search"`) || !strings.Contains(string(req.Format), `"const":"final_response"`) {
		t.Errorf("format is not the union: %s", req.Format)
	}
	if len(conv.Messages) != 2 || conv.Messages[0].Role != convo.User || conv.Messages[1].Role != convo.Assistant {
		t.Errorf("conversation = %+v", conv.Messages)
	}
}

func TestToolThenAnswer(t *testing.T) {
	fake := ollamatest.New(t,
		reply("tmdb_search", `{"query":"Dune","year":2021}`),
		final("Dune (2021)"),
	)
	tb := newToolbox(t)
	r := newRunner(t, fake, tb)
	var conv convo.Conversation
	res, err := r.Run(context.Background(), &conv, "find dune", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`tmdb_search {"query":"Dune","year":2021}`}; !slices.Equal(tb.calls, want) {
		t.Errorf("calls = %q, want %q", tb.calls, want)
	}
	if len(res.Steps) != 2 || res.Steps[0].Action != "tmdb_search" || !strings.Contains(res.Steps[0].Observation, "438631") {
		t.Errorf("steps = %+v", res.Steps)
	}
	// The model saw its own call and the tool's result on the second step.
	msgs := fake.Requests()[1].Messages
	n := len(msgs)
	if msgs[n-2].Role != "assistant" || !strings.Contains(msgs[n-2].Content, `"action":"tmdb_search"`) {
		t.Errorf("call message = %+v", msgs[n-2])
	}
	if msgs[n-1].Role != "user" || !strings.HasPrefix(msgs[n-1].Content, "Result of tmdb_search:\n") {
		t.Errorf("observation message = %+v", msgs[n-1])
	}
	roles := make([]convo.Role, len(conv.Messages))
	for i, m := range conv.Messages {
		roles[i] = m.Role
	}
	if want := []convo.Role{convo.User, convo.Assistant, convo.Observation, convo.Assistant}; !slices.Equal(roles, want) {
		t.Errorf("conversation roles = %v, want %v", roles, want)
	}
}

// TestCorrections sends malformed replies and checks, for each, the exact
// feedback the model got, and that the corrected turn goes on as if the
// failed attempt never happened.
func TestCorrections(t *testing.T) {
	tests := []struct {
		name  string
		reply string
		want  []string
	}{
		{"prose only", "Sure! Dune is a 2021 film.", []string{"reply: no JSON object found; send one JSON object and nothing else"}},
		{"empty", "", []string{"reply: empty; send one JSON object"}},
		{"whitespace", " \n\t ", []string{"reply: empty; send one JSON object"}},
		{"two objects", `{"thought":"a","action":"tmdb_search","args":{"query":"Dune"}} {"thought":"b","action":"final_response","args":{"answer":"x"}}`,
			[]string{"reply: holds 2 JSON objects; send exactly one"}},
		{"truncated", `{"thought":"a","action":"tmdb_se`,
			[]string{"reply: the JSON object starting at byte 0 is incomplete (cut off?); send the whole object"}},
		{"truncated after prose", "Here:\n```json\n{\"thought\":\"a\",\"args\":{",
			[]string{"reply: the JSON object starting at byte 14 is incomplete (cut off?); send the whole object"}},
		{"unknown action", `{"thought":"a","action":"imdb_search","args":{}}`,
			[]string{`action: unknown action "imdb_search"; valid actions: tmdb_search, final_response`}},
		{"action missing", `{"thought":"a","args":{"query":"Dune"}}`,
			[]string{"action: missing required field; one of: tmdb_search, final_response"}},
		{"action not a string", `{"thought":"a","action":3,"args":{}}`,
			[]string{"action: expected string, got number 3; one of: tmdb_search, final_response"}},
		{"thought missing", `{"action":"tmdb_search","args":{"query":"Dune"}}`,
			[]string{"thought: missing required field"}},
		{"args missing", `{"thought":"a","action":"tmdb_search"}`, []string{"args: missing required field"}},
		{"args null", `{"thought":"a","action":"tmdb_search","args":null}`, []string{"args: expected object, got null"}},
		{"args array", `{"thought":"a","action":"tmdb_search","args":["Dune"]}`, []string{"args: expected object, got array"}},
		{"args as a JSON string", `{"thought":"a","action":"tmdb_search","args":"{\"query\":\"Dune\"}"}`,
			[]string{`args: expected object, got string "{\"query\":\"Dune\"}"; put the object itself there, not a string containing it`}},
		{"wrong type", `{"thought":"a","action":"tmdb_search","args":{"query":"Inception","year":"2010"}}`,
			[]string{`args.year: expected integer, got string "2010"`}},
		{"several problems sorted", `{"thought":"a","action":"tmdb_search","args":{"year":2010.5,"media_type":"film"}}`,
			[]string{`args.media_type: expected one of "movie", "tv", got "film"`, "args.query: missing required field", "args.year: expected integer, got number 2010.5"}},
		{"extra field in args", `{"thought":"a","action":"tmdb_search","args":{"query":"Dune","title":"Dune"}}`,
			[]string{"args.title: unknown field; remove it"}},
		{"extra top-level field", `{"thought":"a","action":"tmdb_search","args":{"query":"Dune"},"confidence":0.9}`,
			[]string{"confidence: unknown field; the reply has exactly thought, action and args"}},
		{"empty answer", `{"thought":"a","action":"final_response","args":{"answer":""}}`,
			[]string{`args.answer: must have at least 1 character, got ""`, `args.answer: must match the pattern \S, got ""`}},
		{"blank answer", `{"thought":"a","action":"final_response","args":{"answer":"   "}}`,
			[]string{`args.answer: must match the pattern \S, got "   "`}},
		{"null", "null", []string{"reply: expected a JSON object, got null"}},
		{"array around a good object", `[{"thought":"a","action":"final_response","args":{"answer":"x"}}]`,
			[]string{"reply: expected a JSON object, got array"}},
		{"a JSON string", `"Dune is great"`, []string{`reply: expected a JSON object, got string "Dune is great"`}},
		{"invalid JSON", `{"thought": 'a', "action": "final_response"}`,
			[]string{"reply: invalid JSON: invalid character '\\'' looking for beginning of value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := ollamatest.New(t, ollamatest.Reply{Content: tt.reply}, final("fixed"))
			r := newRunner(t, fake, newToolbox(t))
			var conv convo.Conversation
			var problems [][]string
			res, err := r.Run(context.Background(), &conv, "find dune", func(e loop.Event) {
				if e.Type == loop.EventValidationError {
					problems = append(problems, e.Problems)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Answer != "fixed" || res.Steps[0].Retries != 1 {
				t.Fatalf("result = %+v", res)
			}
			if len(problems) != 1 || !slices.Equal(problems[0], tt.want) {
				t.Fatalf("problems = %q\nwant       %q", problems, tt.want)
			}
			reqs := fake.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			msgs := reqs[1].Messages
			echo, fix := msgs[len(msgs)-2], msgs[len(msgs)-1]
			if echo.Role != "assistant" || echo.Content != convo.Cut(tt.reply, 2000) {
				t.Errorf("echoed reply = %.80q", echo.Content)
			}
			want := "Your last reply was not valid:\n- " + strings.Join(tt.want, "\n- ") + "\n" +
				`Reply again with one JSON object {"thought": ..., "action": ..., "args": {...}} that fixes these problems, and nothing else.`
			if fix.Role != "user" || fix.Content != want {
				t.Errorf("feedback =\n%s\nwant\n%s", fix.Content, want)
			}
			// The failed attempt and its correction are not kept.
			if len(conv.Messages) != 2 {
				t.Errorf("conversation has %d messages, want 2: %+v", len(conv.Messages), conv.Messages)
			}
		})
	}
}

// TestOversizedReplyEndsTheTurn: a reply over the decoder's limit is stopped
// by the model client while it is read, so it never reaches the decoder and is
// not re-asked: the turn ends with the client's model_error.
func TestOversizedReplyEndsTheTurn(t *testing.T) {
	fake := ollamatest.New(t, ollamatest.Reply{Content: strings.Repeat("x", 1<<20)}, final("never read"))
	var conv convo.Conversation
	_, err := newRunner(t, fake, newToolbox(t)).Run(context.Background(), &conv, "hi", nil)
	if !errors.Is(err, llm.ErrReplyTooLarge) || !errors.Is(err, llm.ErrBadResponse) {
		t.Fatalf("err = %v, want ErrReplyTooLarge (model_error)", err)
	}
	if !strings.Contains(err.Error(), "step 1: model call") || !strings.Contains(err.Error(), "too large") {
		t.Errorf("err = %q does not say where and why", err)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("%d model calls, want 1 (not re-asked)", n)
	}
}

func TestTolerated(t *testing.T) {
	for _, content := range []string{
		"```json\n{\"thought\":\"t\",\"action\":\"final_response\",\"args\":{\"answer\":\"ok\"}}\n```",
		"Here is my reply:\n{\"thought\":\"t\",\"action\":\"final_response\",\"args\":{\"answer\":\"ok\"}}\nHope that helps {really}.",
	} {
		fake := ollamatest.New(t, ollamatest.Reply{Content: content})
		res, err := newRunner(t, fake, nil).Run(context.Background(), &convo.Conversation{}, "hi", nil)
		if err != nil || res.Answer != "ok" || res.Steps[0].Retries != 0 {
			t.Errorf("%q: %+v, %v", content, res, err)
		}
	}
}

func TestRetriesExhausted(t *testing.T) {
	bad := ollamatest.Reply{Content: "no idea"}
	fake := ollamatest.New(t, bad, bad, bad, final("never read"))
	r := newRunner(t, fake, newToolbox(t))
	var conv convo.Conversation
	_, err := r.Run(context.Background(), &conv, "hi", nil)
	var ie *loop.InvalidReplyError
	if !errors.As(err, &ie) || ie.Attempts != 3 || ie.Step != 1 {
		t.Fatalf("err = %v", err)
	}
	if len(fake.Requests()) != 3 {
		t.Errorf("%d model calls, want 3 (1 + MaxRetries)", len(fake.Requests()))
	}
	if !strings.Contains(err.Error(), "no JSON object found") {
		t.Errorf("error does not say why: %v", err)
	}
	if len(conv.Messages) != 1 {
		t.Errorf("conversation = %+v, want just the user message", conv.Messages)
	}
}

func TestStepLimitForcesAnswer(t *testing.T) {
	fake := ollamatest.New(t)
	for range 3 {
		fake.Push(reply("tmdb_search", `{"query":"Dune"}`))
	}
	fake.Push(final("best effort"))
	r := newRunner(t, fake, newToolbox(t), func(c *loop.Config) { c.MaxSteps = 3 })
	res, err := r.Run(context.Background(), &convo.Conversation{}, "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Forced || res.Answer != "best effort" || len(res.Steps) != 4 {
		t.Fatalf("result = %+v", res)
	}
	reqs := fake.Requests()
	last := reqs[len(reqs)-1]
	if strings.Contains(string(last.Format), "tmdb_search") || !strings.Contains(string(last.Format), "final_response") {
		t.Errorf("forced call format offers more than final_response: %s", last.Format)
	}
	if m := last.Messages[len(last.Messages)-1]; !strings.Contains(m.Content, "You have used every step") {
		t.Errorf("forced call does not say why: %+v", m)
	}
	if last.Messages[0].Content != reqs[0].Messages[0].Content {
		t.Errorf("the forced call's system prompt differs from the other steps':\n%s", last.Messages[0].Content)
	}
}

func TestAnswerOnLastStepIsKept(t *testing.T) {
	fake := ollamatest.New(t,
		reply("tmdb_search", `{"query":"Dune"}`),
		reply("tmdb_search", `{"query":"Dune 2"}`),
		final("on the last step"),
	)
	r := newRunner(t, fake, newToolbox(t), func(c *loop.Config) { c.MaxSteps = 3 })
	res, err := r.Run(context.Background(), &convo.Conversation{}, "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Forced || res.Answer != "on the last step" || len(fake.Requests()) != 3 {
		t.Fatalf("result = %+v after %d calls", res, len(fake.Requests()))
	}
}

func TestFailingToolLeavesTheTurn(t *testing.T) {
	tb := newToolbox(t)
	tb.funcs["tmdb_search"] = func(context.Context, json.RawMessage) (string, error) {
		return "", errors.New("TMDB answered 500")
	}
	fake := ollamatest.New(t)
	for range 3 {
		fake.Push(reply("tmdb_search", `{"query":"Dune"}`))
	}
	fake.Push(final("TMDB is down"))
	r := newRunner(t, fake, tb)
	res, err := r.Run(context.Background(), &convo.Conversation{}, "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps[0].Error != "TMDB answered 500" {
		t.Errorf("step error = %q", res.Steps[0].Error)
	}
	reqs := fake.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	if !strings.Contains(string(reqs[2].Format), "tmdb_search") {
		t.Error("tool left the union after 2 failures")
	}
	fourth := reqs[3]
	if strings.Contains(string(fourth.Format), "tmdb_search") {
		t.Error("tool is still in the union after 3 failures")
	}
	// The tool keeps its place in the system prompt (its cached prefix);
	// the tail, sent last, says it is out.
	if fourth.Messages[0].Content != reqs[0].Messages[0].Content {
		t.Errorf("the system prompt changed:\n%s", fourth.Messages[0].Content)
	}
	n := len(fourth.Messages)
	if tail := fourth.Messages[n-1].Content; !strings.Contains(tail, "Unavailable now") || !strings.Contains(tail, "- tmdb_search: failed 3 times in this turn") {
		t.Errorf("the tail does not say why:\n%s", tail)
	}
	if m := fourth.Messages[n-2]; m.Content != "tmdb_search failed: TMDB answered 500" {
		t.Errorf("observation = %q", m.Content)
	}
	// The strike count belongs to the turn: the next turn offers the tool again.
	fake.Push(final("again"))
	if _, err := r.Run(context.Background(), &convo.Conversation{}, "hi", nil); err != nil {
		t.Fatal(err)
	}
	if reqs := fake.Requests(); !strings.Contains(string(reqs[len(reqs)-1].Format), "tmdb_search") {
		t.Error("the next turn does not offer the tool")
	}
}

func TestToolTimeoutAndPanic(t *testing.T) {
	tb := newToolbox(t)
	tb.add(loop.Tool{Tool: schema.Tool{Name: "hang", Schema: json.RawMessage(`{"type":"object"}`)}},
		func(ctx context.Context, _ json.RawMessage) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		})
	tb.add(loop.Tool{Tool: schema.Tool{Name: "boom", Schema: json.RawMessage(`{"type":"object"}`)}},
		func(context.Context, json.RawMessage) (string, error) { panic("nil map") })
	fake := ollamatest.New(t, reply("hang", `{}`), reply("boom", `{}`), final("done"))
	r := newRunner(t, fake, tb, func(c *loop.Config) { c.ToolTimeout = 20 * time.Millisecond })
	res, err := r.Run(context.Background(), &convo.Conversation{}, "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Steps[0].Error; got != "tool hang did not finish within 20ms" {
		t.Errorf("timeout error = %q", got)
	}
	if got := res.Steps[1].Error; got != "tool boom crashed: nil map" {
		t.Errorf("panic error = %q", got)
	}
}

func TestDisabledToolsAreListed(t *testing.T) {
	tb := newToolbox(t)
	tb.add(loop.Tool{Tool: schema.Tool{Name: "radarr_add", Schema: json.RawMessage(`{"type":"object"}`)},
		Disabled: "MMCP_PLUGIN_RADARR_API_KEY is required"}, nil)
	fake := ollamatest.New(t, final("ok"))
	if _, err := newRunner(t, fake, tb).Run(context.Background(), &convo.Conversation{}, "hi", nil); err != nil {
		t.Fatal(err)
	}
	req := fake.Requests()[0]
	if strings.Contains(string(req.Format), "radarr_add") {
		t.Error("a disabled tool is in the union")
	}
	if !strings.Contains(req.Messages[0].Content, "- radarr_add: MMCP_PLUGIN_RADARR_API_KEY is required") {
		t.Errorf("system prompt:\n%s", req.Messages[0].Content)
	}
}

func TestModelErrors(t *testing.T) {
	fake := ollamatest.New(t, ollamatest.Reply{Status: 503, Error: "busy"}, ollamatest.Reply{Status: 503, Error: "busy"})
	_, err := newRunner(t, fake, nil).Run(context.Background(), &convo.Conversation{}, "hi", nil)
	if !errors.Is(err, llm.ErrUnavailable) || !strings.Contains(err.Error(), "step 1: model call") {
		t.Errorf("err = %v", err)
	}
	fake = ollamatest.New(t)
	fake.Models("other")
	_, err = newRunner(t, fake, nil).Run(context.Background(), &convo.Conversation{}, "hi", nil)
	if !errors.Is(err, llm.ErrModelMissing) || !strings.Contains(err.Error(), `ollama pull test-model`) {
		t.Errorf("err = %v", err)
	}
}

func TestCancelledDuringTool(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tb := newToolbox(t)
	tb.funcs["tmdb_search"] = func(tctx context.Context, _ json.RawMessage) (string, error) {
		cancel()
		<-tctx.Done()
		return "", tctx.Err()
	}
	fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), final("never"))
	_, err := newRunner(t, fake, tb).Run(ctx, &convo.Conversation{}, "hi", nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("%d model calls after cancellation, want 1", n)
	}
}

func TestEventsInOrder(t *testing.T) {
	fake := ollamatest.New(t,
		ollamatest.Reply{Content: "oops"},
		reply("tmdb_search", `{"query":"Dune"}`),
		final("Dune"),
	)
	var got []loop.EventType
	var traces []string
	_, err := newRunner(t, fake, newToolbox(t)).Run(context.Background(), &convo.Conversation{}, "hi", func(e loop.Event) {
		got = append(got, e.Type)
		traces = append(traces, e.TraceID)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []loop.EventType{
		loop.EventStepStart, loop.EventModelReply, loop.EventValidationError, loop.EventThoughtDelta, loop.EventModelReply, loop.EventToolStart, loop.EventToolEnd,
		loop.EventStepStart, loop.EventThoughtDelta, loop.EventAnswerDelta, loop.EventModelReply, loop.EventFinal,
	}
	if !slices.Equal(got, want) {
		t.Errorf("events = %v\nwant     %v", got, want)
	}
	if traces[0] == "" || len(slices.Compact(slices.Clone(traces))) != 1 {
		t.Errorf("trace ids = %q", traces)
	}
}

// TestModelReplyEvents: each model_reply says what the model decided, so a
// client can show it before the tool runs: the thought, the action and its
// arguments of a valid reply; an invalid one has none, and its problems
// follow in validation_error.
func TestModelReplyEvents(t *testing.T) {
	fake := ollamatest.New(t,
		ollamatest.Reply{Content: "oops"},
		ollamatest.Reply{Content: `{"thought":"look it up","action":"tmdb_search","args":{"query":"Dune"}}`},
		ollamatest.Reply{Content: `{"thought":"found it","action":"final_response","args":{"answer":"Dune (2021)"}}`},
	)
	var got []loop.Event
	_, err := newRunner(t, fake, newToolbox(t)).Run(context.Background(), &convo.Conversation{}, "hi", func(e loop.Event) {
		if e.Type == loop.EventModelReply {
			got = append(got, e)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		step, attempt         int
		thought, action, args string
	}{
		{1, 0, "", "", ""},
		{1, 1, "look it up", "tmdb_search", `{"query":"Dune"}`},
		{2, 0, "found it", "final_response", `{"answer":"Dune (2021)"}`},
	}
	if len(got) != len(want) {
		t.Fatalf("%d model_reply events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		if e.Step != w.step || e.Attempt != w.attempt || e.Thought != w.thought || e.Action != w.action || string(e.Args) != w.args {
			t.Errorf("model_reply %d = step %d attempt %d %q %q %s, want step %d attempt %d %q %q %s",
				i, e.Step, e.Attempt, e.Thought, e.Action, e.Args, w.step, w.attempt, w.thought, w.action, w.args)
		}
		if e.Usage == nil || e.Duration <= 0 {
			t.Errorf("model_reply %d lacks usage or duration: %+v", i, e)
		}
	}
}

// TestHistoryCarriesOver runs two turns in one conversation: the second sees
// the first, and the window keeps the newest user message at any budget.
func TestHistoryCarriesOver(t *testing.T) {
	fake := ollamatest.New(t, final("first answer"), final("second answer"))
	r := newRunner(t, fake, nil)
	var conv convo.Conversation
	for _, m := range []string{"first question", "second question"} {
		if _, err := r.Run(context.Background(), &conv, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	var contents []string
	for _, m := range fake.Requests()[1].Messages[1:] {
		contents = append(contents, m.Role+": "+m.Content)
	}
	if len(contents) != 3 || contents[0] != "user: first question" || !strings.Contains(contents[1], "first answer") || contents[2] != "user: second question" {
		t.Errorf("second turn saw %q", contents)
	}
}

type liveState string

func (s liveState) RuntimeContext(context.Context) string { return string(s) }

// TestRuntimeContextInTheTail: the live state of the turn goes in the last
// message of every call of the turn, never in the system prompt, whose cached
// prefix it would spoil at every turn.
func TestRuntimeContextInTheTail(t *testing.T) {
	fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), final("ok"))
	r := newRunner(t, fake, newToolbox(t))
	r.Context = liveState("system.now: Current time: Saturday 2026-11-21 14:03 CET")
	if _, err := r.Run(context.Background(), &convo.Conversation{}, "what day is it", nil); err != nil {
		t.Fatal(err)
	}
	const want = "Runtime context (live state when this question was asked):\nsystem.now: Current time: Saturday 2026-11-21 14:03 CET"
	for i, req := range fake.Requests() {
		last := req.Messages[len(req.Messages)-1]
		if last.Role != "user" || last.Content != want {
			t.Errorf("request %d ends with %s %q, want the runtime context", i, last.Role, last.Content)
		}
		if strings.Contains(req.Messages[0].Content, "system.now") {
			t.Errorf("request %d: the system prompt holds the runtime context", i)
		}
	}
}

func TestApprovalPausesAndResumes(t *testing.T) {
	for _, approved := range []bool{true, false} {
		t.Run(fmt.Sprintf("approved=%v", approved), func(t *testing.T) {
			tb := newToolbox(t)
			runs := 0
			tb.add(loop.Tool{Tool: schema.Tool{Name: "transmission_remove", Schema: json.RawMessage(`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"integer"}}},"required":["ids"]}`)}, NeedsApproval: true},
				func(context.Context, json.RawMessage) (string, error) { runs++; return `{"removed":[3]}`, nil })
			fake := ollamatest.New(t, reply("transmission_remove", `{"ids":[3]}`), final("done"))
			r := newRunner(t, fake, tb)
			var conv convo.Conversation
			var events []loop.EventType
			res, err := r.Run(context.Background(), &conv, "remove torrent 3", func(e loop.Event) { events = append(events, e.Type) })
			if err != nil {
				t.Fatal(err)
			}
			if res.Pending == nil || res.Pending.Tool != "transmission_remove" || string(res.Pending.Args) != `{"ids":[3]}` || res.Answer != "" || runs != 0 {
				t.Fatalf("paused result = %+v, runs %d", res, runs)
			}
			if events[len(events)-1] != loop.EventActionRequest {
				t.Errorf("events = %v", events)
			}
			if !strings.Contains(fake.Requests()[0].Messages[0].Content, "ask the user to confirm before they run; call them when the user wants that action: transmission_remove") {
				t.Error("the system prompt does not say which tools ask first")
			}
			if last := conv.Messages[len(conv.Messages)-1]; last.Role != convo.Assistant || last.Tool != "transmission_remove" {
				t.Fatalf("conversation does not end with the call: %+v", last)
			}
			res, err = r.Resume(context.Background(), &conv, loop.Decision{ActionRequest: *res.Pending, Approved: approved}, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantRuns, wantObs := 1, "Result of transmission_remove:\n{\"removed\":[3]}"
			if !approved {
				wantRuns, wantObs = 0, "transmission_remove was not run: the user declined it. Do not call it again for this request; answer without it."
			}
			if runs != wantRuns || res.Answer != "done" {
				t.Errorf("runs = %d, answer %q", runs, res.Answer)
			}
			msgs := fake.Requests()[1].Messages
			if got := msgs[len(msgs)-1]; got.Content != wantObs {
				t.Errorf("the model read %q, want %q", got.Content, wantObs)
			}
		})
	}
}

// TestContextOverflow: when the system prompt and this turn's own messages do
// not fit MaxContextChars, the model never gets a prompt without them (it
// would decide blind to its tool results). The turn ends with a
// ContextOverflowError that names the sizes and the setting, after a
// context_overflow event and a warning log line under the trace id.
func TestContextOverflow(t *testing.T) {
	tests := []struct {
		name      string
		result    int // characters the search tool returns
		extra     int // more tools, each with a long description (the prompt keeps 300 characters of one)
		budget    int
		wantCalls int // model calls made
		wantRuns  int // tool calls made
		wantStep  int
	}{
		// The result is cut to MaxOutputChars (4,000): still too much
		// for what the system prompt leaves.
		{name: "a tool result that does not fit", result: 5000, budget: 3000, wantCalls: 1, wantRuns: 1, wantStep: 2},
		{name: "a catalogue that does not fit", extra: 100, budget: 20000, wantCalls: 0, wantRuns: 0, wantStep: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newToolbox(t)
			runs := 0
			tb.funcs["tmdb_search"] = func(context.Context, json.RawMessage) (string, error) {
				runs++
				return strings.Repeat("r", tt.result), nil
			}
			for i := range tt.extra {
				tb.add(loop.Tool{Tool: schema.Tool{Name: fmt.Sprintf("tool_%03d", i), Description: strings.Repeat("d", 5000), Schema: json.RawMessage(`{"type":"object"}`)}}, nil)
			}
			fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), final("answered blind"), final("answered blind"))
			r := newRunner(t, fake, tb, func(c *loop.Config) { c.MaxContextChars = tt.budget })
			var logs bytes.Buffer
			r.Log = slog.New(trace.Handler{Handler: slog.NewJSONHandler(&logs, nil)})
			var events []loop.Event
			var conv convo.Conversation

			res, err := r.Run(context.Background(), &conv, "find dune", func(e loop.Event) { events = append(events, e) })

			reqs := fake.Requests()
			for i, req := range reqs {
				if i > 0 && !strings.HasPrefix(req.Messages[len(req.Messages)-1].Content, "Result of tmdb_search:") {
					t.Errorf("model call %d was sent without the turn's tool result: %d messages, the last %.60q",
						i+1, len(req.Messages), req.Messages[len(req.Messages)-1].Content)
				}
			}
			if len(reqs) != tt.wantCalls || runs != tt.wantRuns {
				t.Errorf("%d model calls and %d tool runs, want %d and %d", len(reqs), runs, tt.wantCalls, tt.wantRuns)
			}
			var oe *loop.ContextOverflowError
			if !errors.As(err, &oe) {
				t.Fatalf("Run: answer %q, err %v; want a ContextOverflowError", answer(res), err)
			}
			if oe.Step != tt.wantStep || oe.Budget != tt.budget || oe.System <= 0 || oe.Turn <= 0 || oe.System+oe.Turn <= tt.budget {
				t.Errorf("error = %+v, want step %d and sizes over the budget %d", oe, tt.wantStep, tt.budget)
			}
			for _, s := range []string{
				fmt.Sprintf("system %d chars + this turn %d chars", oe.System, oe.Turn),
				fmt.Sprintf("MMCP_LLM_MAX_CONTEXT_CHARS=%d", tt.budget),
				"remove tools",
			} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %q, want it to contain %q", err, s)
				}
			}

			if n := len(events); n < 2 || events[n-2].Type != loop.EventContextOverflow || events[n-1].Type != loop.EventError {
				t.Fatalf("events end %v, want context_overflow then error", eventTypes(events))
			}
			ev := events[len(events)-2]
			if ev.Step != tt.wantStep || ev.SystemChars != oe.System || ev.TurnChars != oe.Turn || ev.BudgetChars != tt.budget || ev.TraceID == "" {
				t.Errorf("context_overflow event = %+v, want the error's sizes and a trace id", ev)
			}

			found := false
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "context_overflow" {
					continue
				}
				found = true
				want := map[string]any{"level": "WARN", "trace_id": ev.TraceID, "step": float64(tt.wantStep),
					"system_chars": float64(oe.System), "turn_chars": float64(oe.Turn), "budget_chars": float64(tt.budget)}
				for k, v := range want {
					if m[k] != v {
						t.Errorf("log line %s = %v, want %v", k, m[k], v)
					}
				}
			}
			if !found {
				t.Errorf("no context_overflow log line in:\n%s", logs.String())
			}

			// As on any error, the conversation keeps what ran.
			if want := 1 + 2*tt.wantRuns; len(conv.Messages) != want {
				t.Errorf("conversation has %d messages, want %d", len(conv.Messages), want)
			}
		})
	}
}

func eventTypes(es []loop.Event) []loop.EventType {
	out := make([]loop.EventType, len(es))
	for i, e := range es {
		out[i] = e.Type
	}
	return out
}

func answer(res *loop.Result) string {
	if res == nil {
		return ""
	}
	return res.Answer
}
