package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/schema"
)

func batch(calls ...string) ollamatest.Reply {
	return ollamatest.Reply{Content: `{"thought":"both at once","calls":[` + strings.Join(calls, ",") + `]}`}
}

func item(action, args string) string { return `{"action":"` + action + `","args":` + args + `}` }

var noArgs = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)

// barrier returns a tool function that waits until n calls have started,
// then answers with text after delay. Run one at a time, the first call
// would wait for a second that never starts: it fails after a second.
func barrier(n int) func(text string, delay time.Duration) func(context.Context, json.RawMessage) (string, error) {
	var mu sync.Mutex
	started := 0
	all := make(chan struct{})
	return func(text string, delay time.Duration) func(context.Context, json.RawMessage) (string, error) {
		return func(ctx context.Context, _ json.RawMessage) (string, error) {
			mu.Lock()
			if started++; started == n {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(time.Second):
				return "", errors.New("ran alone: the other call never started")
			}
			time.Sleep(delay)
			return text, nil
		}
	}
}

// TestBatchRunsConcurrently: one reply asks for two calls; they run at the
// same time (each waits until both started), the results come back in the
// order asked though the second finished first, each as its own
// observation, and one model call is saved.
func TestBatchRunsConcurrently(t *testing.T) {
	tb := newToolbox(t)
	both := barrier(2)
	tb.add(loop.Tool{Tool: schema.Tool{Name: "jellyfin_latest", Schema: noArgs}}, both(`{"items":["Past Lives"]}`, 50*time.Millisecond))
	tb.add(loop.Tool{Tool: schema.Tool{Name: "transmission_list", Schema: noArgs}}, both(`{"torrents":["Perfect Days"]}`, 0))
	fake := ollamatest.New(t,
		batch(item("jellyfin_latest", `{}`), item("transmission_list", `{}`)),
		final("Past Lives arrived; Perfect Days is downloading."),
	)
	var events []loop.Event
	var conv convo.Conversation
	var thought strings.Builder
	res, err := newRunner(t, fake, tb).Run(context.Background(), &conv, "what's new and what's downloading?", func(e loop.Event) {
		if e.Type == loop.EventThoughtDelta && e.Step == 1 {
			thought.WriteString(e.Text) // the batch's thought is previewed like any other
			return
		}
		events = append(events, e)
	})
	if err != nil {
		t.Fatal(err)
	}
	if thought.String() != "both at once" {
		t.Errorf("previewed thought %q", thought.String())
	}
	if len(fake.Requests()) != 2 || len(res.Steps) != 3 || res.Fallback {
		t.Fatalf("%d model calls, result %+v", len(fake.Requests()), res)
	}
	for i, want := range []struct{ action, obs string }{{"jellyfin_latest", "Past Lives"}, {"transmission_list", "Perfect Days"}} {
		st := res.Steps[i]
		if st.Number != 1 || st.Call != i+1 || st.Batch != 2 || st.Action != want.action || !strings.Contains(st.Observation, want.obs) || st.Error != "" || st.Thought != "both at once" {
			t.Errorf("step %d = %+v", i, st)
		}
	}
	// The model read its one reply, then both results in the order asked.
	msgs := fake.Requests()[1].Messages
	n := len(msgs)
	if !strings.Contains(msgs[n-3].Content, `"calls":[{"action":"jellyfin_latest"`) ||
		msgs[n-2].Content != "Result of jellyfin_latest (call 1 of 2):\n{\"items\":[\"Past Lives\"]}" ||
		msgs[n-1].Content != "Result of transmission_list (call 2 of 2):\n{\"torrents\":[\"Perfect Days\"]}" {
		t.Errorf("the model read:\n%q\n%q\n%q", msgs[n-3].Content, msgs[n-2].Content, msgs[n-1].Content)
	}
	roles := make([]convo.Role, len(conv.Messages))
	for i, m := range conv.Messages {
		roles[i] = m.Role
	}
	if want := []convo.Role{convo.User, convo.Assistant, convo.Observation, convo.Observation, convo.Assistant}; !slices.Equal(roles, want) {
		t.Errorf("conversation roles = %v", roles)
	}
	// Events: both starts in order, then the ends as the calls finished.
	var tools []string
	for _, e := range events {
		switch e.Type {
		case loop.EventAnswerRetracted:
			t.Errorf("a valid batch reply was retracted: %+v", e)
		case loop.EventModelReply:
			if e.Step == 1 && (len(e.Calls) != 2 || e.Action != "") {
				t.Errorf("model_reply = %+v", e)
			}
		case loop.EventToolStart, loop.EventToolEnd:
			tools = append(tools, string(e.Type)+" "+e.Action)
			if e.Batch != 2 || e.Call < 1 || e.Call > 2 {
				t.Errorf("event = %+v", e)
			}
		}
	}
	if want := []string{"tool_start jellyfin_latest", "tool_start transmission_list", "tool_end transmission_list", "tool_end jellyfin_latest"}; !slices.Equal(tools, want) {
		t.Errorf("tool events = %q, want %q", tools, want)
	}
	if !strings.Contains(fake.Requests()[0].Messages[0].Content, `To run up to 3 independent tool calls at once, reply {"thought": ..., "calls": [`) {
		t.Error("the system prompt does not tell of calls")
	}
}

func TestBatchOneFailsOneSucceeds(t *testing.T) {
	tb := newToolbox(t)
	tb.add(loop.Tool{Tool: schema.Tool{Name: "sonarr_queue", Schema: noArgs}},
		func(context.Context, json.RawMessage) (string, error) { return "", errors.New("Sonarr is unreachable") })
	fake := ollamatest.New(t,
		batch(item("sonarr_queue", `{}`), item("tmdb_search", `{"query":"Dune"}`), item("tmdb_search", `{"query":"Arrival"}`)),
		final("Dune is there; Sonarr did not answer."),
	)
	res, err := newRunner(t, fake, tb).Run(context.Background(), &convo.Conversation{}, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 4 || res.Steps[0].Error != "Sonarr is unreachable" || res.Steps[1].Error != "" || string(res.Steps[2].Args) != `{"query":"Arrival"}` || res.Fallback {
		t.Fatalf("result = %+v", res)
	}
	msgs := fake.Requests()[1].Messages
	n := len(msgs)
	if msgs[n-3].Content != "sonarr_queue (call 1 of 3) failed: Sonarr is unreachable" || !strings.HasPrefix(msgs[n-2].Content, "Result of tmdb_search (call 2 of 3):") {
		t.Errorf("the model read %q, %q", msgs[n-3].Content, msgs[n-2].Content)
	}
}

// TestBatchItemReasked: an invalid item is re-asked with the problem named
// by its place in calls, and nothing of the batch runs.
func TestBatchItemReasked(t *testing.T) {
	tb := newToolbox(t)
	tb.add(loop.Tool{Tool: schema.Tool{Name: "sonarr_queue", Schema: noArgs}},
		func(context.Context, json.RawMessage) (string, error) { return "[]", nil })
	fake := ollamatest.New(t,
		batch(item("sonarr_queue", `{}`), item("tmdb_search", `{"query":"Dune","year":"2021"}`)),
		batch(item("sonarr_queue", `{}`), item("tmdb_search", `{"query":"Dune","year":2021}`)),
		final("ok"),
	)
	var problems [][]string
	res, err := newRunner(t, fake, tb).Run(context.Background(), &convo.Conversation{}, "q", func(e loop.Event) {
		if e.Type == loop.EventValidationError {
			problems = append(problems, e.Problems)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `calls[1].args.year: expected integer, got string "2021"`
	if len(problems) != 1 || !slices.Equal(problems[0], []string{want}) {
		t.Fatalf("problems = %q", problems)
	}
	msgs := fake.Requests()[1].Messages
	if fix := msgs[len(msgs)-1].Content; !strings.Contains(fix, "- "+want+"\n") || !strings.Contains(fix, `{"thought": ..., "calls": [{"action": ..., "args": {...}}, ...]}`) {
		t.Errorf("correction:\n%s", fix)
	}
	if want := []string{`sonarr_queue {}`, `tmdb_search {"query":"Dune","year":2021}`}; len(tb.calls) != 2 || !slices.Contains(tb.calls, want[0]) || !slices.Contains(tb.calls, want[1]) {
		t.Errorf("calls = %q", tb.calls)
	}
	if res.Steps[0].Retries != 1 {
		t.Errorf("steps = %+v", res.Steps)
	}
}

// TestBatchRefusesApprovalTool: a tool that asks the user first is not among
// the batch's items in format, and a batch holding it is re-asked with why;
// alone it pauses the turn as before.
func TestBatchRefusesApprovalTool(t *testing.T) {
	tb := newToolbox(t)
	tb.add(loop.Tool{Tool: schema.Tool{Name: "radarr_add", Schema: json.RawMessage(`{"type":"object","properties":{"tmdb_id":{"type":"integer"}},"required":["tmdb_id"]}`)}, NeedsApproval: true},
		func(context.Context, json.RawMessage) (string, error) { t.Error("radarr_add ran"); return "", nil })
	fake := ollamatest.New(t,
		batch(item("tmdb_search", `{"query":"Anora"}`), item("radarr_add", `{"tmdb_id":1064213}`)),
		reply("radarr_add", `{"tmdb_id":1064213}`),
	)
	var problems []string
	res, err := newRunner(t, fake, tb).Run(context.Background(), &convo.Conversation{}, "add Anora", func(e loop.Event) {
		if e.Type == loop.EventValidationError {
			problems = e.Problems
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `calls[1].action: radarr_add asks the user first, so it cannot be one of calls; call it alone: {"thought": ..., "action": "radarr_add", "args": {...}}`
	if !slices.Equal(problems, []string{want}) {
		t.Errorf("problems = %q", problems)
	}
	if res.Pending == nil || res.Pending.Tool != "radarr_add" || len(tb.calls) != 0 {
		t.Errorf("result = %+v, calls %q", res, tb.calls)
	}
	var format struct {
		OneOf []struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"oneOf"`
	}
	if err := json.Unmarshal(fake.Requests()[0].Format, &format); err != nil {
		t.Fatal(err)
	}
	calls := string(format.OneOf[len(format.OneOf)-1].Properties["calls"])
	if !strings.Contains(calls, `"const":"tmdb_search"`) || strings.Contains(calls, "radarr_add") {
		t.Errorf("batch items: %s", calls)
	}
}

// TestParallelOff: with ParallelCalls 1 the union has no batch branch, the
// prompt says nothing of it, and a reply with calls is refused as before.
func TestParallelOff(t *testing.T) {
	fake := ollamatest.New(t, batch(item("tmdb_search", `{"query":"Dune"}`)), final("ok"))
	var problems []string
	_, err := newRunner(t, fake, newToolbox(t), func(c *loop.Config) { c.ParallelCalls = 1 }).Run(context.Background(), &convo.Conversation{}, "q", func(e loop.Event) {
		if e.Type == loop.EventValidationError {
			problems = e.Problems
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	req := fake.Requests()[0]
	if strings.Contains(string(req.Format), `"calls"`) || strings.Contains(req.Messages[0].Content, `"calls"`) {
		t.Errorf("calls offered with ParallelCalls 1:\n%s\n%s", req.Format, req.Messages[0].Content)
	}
	if !slices.Contains(problems, "calls: unknown field; the reply has exactly thought, action and args") {
		t.Errorf("problems = %q", problems)
	}
	on := ollamatest.New(t, final("ok"))
	if _, err := newRunner(t, on, newToolbox(t)).Run(context.Background(), &convo.Conversation{}, "q", nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(on.Requests()[0].Format), `"calls"`) {
		t.Error("the default offers no batch")
	}
}

// flaky is a tool error that says trying again may help.
type flaky string

func (e flaky) Error() string   { return string(e) }
func (e flaky) Transient() bool { return true }

// failing returns a tool that fails with errs in turn, then answers ok.
func failing(calls *int, errs ...error) func(context.Context, json.RawMessage) (string, error) {
	return func(context.Context, json.RawMessage) (string, error) {
		*calls++
		if *calls <= len(errs) {
			return "", errs[*calls-1]
		}
		return `{"ok":true}`, nil
	}
}

func fastRetries(c *loop.Config) { c.RetryWait = time.Millisecond }

func TestTransientFailureRetried(t *testing.T) {
	tb := newToolbox(t)
	calls := 0
	tb.funcs["tmdb_search"] = failing(&calls, flaky("TMDB answered 503"))
	fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), final("ok"))
	var retries []loop.Event
	res, err := newRunner(t, fake, tb, fastRetries).Run(context.Background(), &convo.Conversation{}, "q", func(e loop.Event) {
		if e.Type == loop.EventToolRetry {
			retries = append(retries, e)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Steps[0]
	if calls != 2 || st.Error != "" || st.Observation != `{"ok":true}` || len(st.Attempts) != 2 || st.Attempts[0].Error != "TMDB answered 503" || st.Attempts[1].Error != "" {
		t.Fatalf("%d calls, step %+v", calls, st)
	}
	if len(retries) != 1 || retries[0].Attempt != 1 || retries[0].Wait != time.Millisecond || retries[0].Error != "TMDB answered 503" || retries[0].Action != "tmdb_search" {
		t.Errorf("retry events = %+v", retries)
	}
	msgs := fake.Requests()[1].Messages
	if got := msgs[len(msgs)-1].Content; got != "Result of tmdb_search:\n{\"ok\":true}" {
		t.Errorf("the model read %q", got)
	}
}

func TestTransientFailureGivesUp(t *testing.T) {
	tb := newToolbox(t)
	calls := 0
	tb.funcs["tmdb_search"] = failing(&calls, flaky("503 a"), flaky("503 b"), flaky("503 c"), flaky("never"))
	fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), final("ok"))
	var waits []time.Duration
	res, err := newRunner(t, fake, tb, fastRetries).Run(context.Background(), &convo.Conversation{}, "q", func(e loop.Event) {
		if e.Type == loop.EventToolRetry {
			waits = append(waits, e.Wait)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Steps[0]; calls != 3 || st.Error != "503 c" || len(st.Attempts) != 3 {
		t.Fatalf("%d calls, step %+v", calls, st)
	}
	if !slices.Equal(waits, []time.Duration{time.Millisecond, 2 * time.Millisecond}) {
		t.Errorf("waits = %v", waits)
	}
}

func TestNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		changes bool
	}{
		{"not transient", errors.New("no such film"), false},
		{"changes something", flaky("Transmission answered 503"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newToolbox(t)
			calls := 0
			tb.add(loop.Tool{Tool: schema.Tool{Name: "transmission_pause", Schema: noArgs}, Changes: tc.changes}, failing(&calls, tc.err))
			fake := ollamatest.New(t, reply("transmission_pause", `{}`), final("ok"))
			res, err := newRunner(t, fake, tb, fastRetries).Run(context.Background(), &convo.Conversation{}, "q", nil)
			if err != nil {
				t.Fatal(err)
			}
			if st := res.Steps[0]; calls != 1 || st.Error != tc.err.Error() || st.Attempts != nil {
				t.Errorf("%d calls, step %+v", calls, st)
			}
		})
	}
}

// TestCancelledDuringRetryWait: the client goes away while a retry waits;
// the turn ends at once with the cancellation, the tool called once.
func TestCancelledDuringRetryWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tb := newToolbox(t)
	calls := 0
	tb.funcs["tmdb_search"] = failing(&calls, flaky("503"))
	fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), final("never"))
	r := newRunner(t, fake, tb, func(c *loop.Config) { c.RetryWait = time.Hour })
	start := time.Now()
	_, err := r.Run(ctx, &convo.Conversation{}, "q", func(e loop.Event) {
		if e.Type == loop.EventToolRetry {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || calls != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("err %v, %d calls, after %v", err, calls, time.Since(start))
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("%d model calls", n)
	}
}

// TestRetryWaitPastDeadline: a wait that would outlast the turn's deadline is
// not begun; the model sees the failure at once.
func TestRetryWaitPastDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := newToolbox(t)
	calls := 0
	tb.funcs["tmdb_search"] = failing(&calls, flaky("503"))
	fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), final("ok"))
	r := newRunner(t, fake, tb, func(c *loop.Config) { c.RetryWait = time.Minute })
	res, err := r.Run(ctx, &convo.Conversation{}, "q", nil)
	if err != nil || calls != 1 || res.Steps[0].Error != "503" {
		t.Fatalf("err %v, %d calls, %+v", err, calls, res)
	}
}

// TestFallback: every call of the turn failed and the steps are used up:
// the last request asks for an answer from the model's own knowledge that
// says which tools failed and why, and the answer is marked.
func TestFallback(t *testing.T) {
	tb := newToolbox(t)
	tb.funcs["tmdb_search"] = func(context.Context, json.RawMessage) (string, error) {
		return "", errors.New("TMDB refused the credentials (401); check MMCP_PLUGIN_TMDB_API_KEY")
	}
	fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), reply("tmdb_search", `{"query":"Dune 2021"}`), final("From what I know: Dune (2021). TMDB refused its key."))
	var finals []loop.Event
	res, err := newRunner(t, fake, tb, func(c *loop.Config) { c.MaxSteps = 2 }).Run(context.Background(), &convo.Conversation{}, "q", func(e loop.Event) {
		if e.Type == loop.EventFinal {
			finals = append(finals, e)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Fallback || !res.Forced || len(finals) != 1 || !finals[0].Fallback {
		t.Fatalf("result %+v, final events %+v", res, finals)
	}
	last := fake.Requests()[2].Messages
	want := "Every tool call in this turn failed:\n- tmdb_search: TMDB refused the credentials (401); check MMCP_PLUGIN_TMDB_API_KEY\n" +
		"Reply now with the action final_response: answer from your own knowledge as well as you can, and tell the user that the tools failed and why."
	if tail := last[len(last)-1].Content; tail != want {
		t.Errorf("tail =\n%s\nwant\n%s", tail, want)
	}

	// One call that worked: an ordinary forced answer, not a fallback.
	tb.funcs["tmdb_search"] = failing(new(int), errors.New("no"))
	fake = ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), reply("tmdb_search", `{"query":"Dune"}`), final("ok"))
	res, err = newRunner(t, fake, tb, func(c *loop.Config) { c.MaxSteps = 2 }).Run(context.Background(), &convo.Conversation{}, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	last = fake.Requests()[2].Messages
	if res.Fallback || !strings.Contains(last[len(last)-1].Content, "You have used every step") {
		t.Errorf("result %+v, tail %q", res, last[len(last)-1].Content)
	}
}

// TestFallbackWhenNoToolIsLeft: the only tool failed until it left the turn;
// the next request is the fallback's, before the step limit.
func TestFallbackWhenNoToolIsLeft(t *testing.T) {
	tb := newToolbox(t)
	tb.funcs["tmdb_search"] = func(context.Context, json.RawMessage) (string, error) { return "", errors.New("TMDB is unreachable") }
	fake := ollamatest.New(t, reply("tmdb_search", `{"query":"Dune"}`), final("TMDB is unreachable; from memory: Dune (2021)."))
	res, err := newRunner(t, fake, tb, func(c *loop.Config) { c.MaxToolFailures = 1 }).Run(context.Background(), &convo.Conversation{}, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	last := fake.Requests()[1]
	if !res.Fallback || res.Forced || !strings.Contains(last.Messages[len(last.Messages)-1].Content, "Every tool call in this turn failed:\n- tmdb_search: TMDB is unreachable\n") {
		t.Errorf("result %+v; tail %q", res, last.Messages[len(last.Messages)-1].Content)
	}
	if strings.Contains(string(last.Format), "tmdb_search") {
		t.Error("the fallback request offers the tool")
	}
}
