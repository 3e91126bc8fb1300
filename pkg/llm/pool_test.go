package llm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/llm/openaitest"
)

const okReply = `{"answer":"ok"}`

// servers starts n OpenAI-compatible fakes answering okReply (after delay)
// and a pool over them.
func servers(t *testing.T, n int, delay time.Duration) ([]*openaitest.Server, *llm.Pool) {
	t.Helper()
	var fakes []*openaitest.Server
	var members []llm.Member
	for i := range n {
		f := openaitest.New(t)
		f.Handle(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Content: okReply, Delay: delay} })
		fakes = append(fakes, f)
		members = append(members, llm.Member{Name: fmt.Sprintf("openai=%s#%s", f.URL, openaitest.Model), Model: openaitest.Model,
			Backend: newOpenAI(t, f.URL, func(o *llm.OpenAIOptions) { o.FailFast = true; o.Retries = 0; o.Timeout = 2 * time.Second })})
		_ = i
	}
	pool, err := llm.NewPool(members, llm.PoolOptions{ProbeFirst: 50 * time.Millisecond, ProbeMax: 200 * time.Millisecond, ProbeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return fakes, pool
}

func TestPoolKeepsASessionOnOneServer(t *testing.T) {
	fakes, pool := servers(t, 3, 0)
	where := map[string]map[string]bool{} // session -> backends that answered
	for call := range 5 {
		for s := range 12 {
			id := fmt.Sprintf("session-%d", s)
			reply, err := pool.Chat(llm.WithSession(context.Background(), id), hello, answerSchema)
			if err != nil {
				t.Fatalf("call %d of %s: %v", call, id, err)
			}
			if where[id] == nil {
				where[id] = map[string]bool{}
			}
			where[id][reply.Backend] = true
			if reply.Model != openaitest.Model || reply.Failover != "" {
				t.Errorf("reply %+v", reply)
			}
		}
	}
	for id, backends := range where {
		if len(backends) != 1 {
			t.Errorf("%s was answered by %d servers: %v", id, len(backends), backends)
		}
	}
	// Equally idle servers share the sessions out.
	for i, f := range fakes {
		if n := len(f.Requests()); n != 4*5 {
			t.Errorf("server %d had %d calls, want 20", i, n)
		}
	}
	for _, b := range pool.Backends() {
		if b.Sessions != 4 || b.State != llm.StateUp || b.InFlight != 0 {
			t.Errorf("backend %+v", b)
		}
	}
}

func TestPoolPlacesANewSessionOnTheLeastBusyServer(t *testing.T) {
	fakes, pool := servers(t, 2, 0)
	// A call in flight on the first server: the busy one.
	fakes[0].Handle(func(openaitest.Request) openaitest.Reply {
		return openaitest.Reply{Content: okReply, Delay: 500 * time.Millisecond}
	})
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := pool.Chat(llm.WithSession(context.Background(), "busy"), hello, answerSchema); err != nil {
			t.Error(err)
		}
	})
	for pool.Backends()[0].InFlight == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := range 3 {
		reply, err := pool.Chat(llm.WithSession(context.Background(), fmt.Sprintf("new-%d", i)), hello, answerSchema)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(reply.Backend, fakes[1].URL) {
			t.Errorf("new session %d went to %s, not the idle server", i, reply.Backend)
		}
	}
	wg.Wait()
}

func TestPoolFailsOverAndProbesTheServerBack(t *testing.T) {
	fakes, pool := servers(t, 2, 0)
	ctx := llm.WithSession(context.Background(), "movie-night")
	first, err := pool.Chat(ctx, hello, answerSchema)
	if err != nil {
		t.Fatal(err)
	}
	on := 0
	if strings.Contains(first.Backend, fakes[1].URL) {
		on = 1
	}
	other := 1 - on
	addr := fakes[on].Addr()
	fakes[on].Close() // the session's server dies

	start := time.Now()
	moved, err := pool.Chat(ctx, hello, answerSchema)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("the call was not retried on the other server: %v", err)
	}
	if !strings.Contains(moved.Backend, fakes[other].URL) || !strings.Contains(moved.Failover, "moved from "+first.Backend) || !strings.Contains(moved.Failover, "cannot reach") {
		t.Errorf("moved reply: backend %q failover %q", moved.Backend, moved.Failover)
	}
	t.Logf("failover took %s", took)
	if st := pool.Backends()[on]; st.State != llm.StateDown || !strings.Contains(st.Reason, "cannot reach") {
		t.Errorf("dead server's state: %+v", st)
	}
	// The session stays where it moved: its cache is there now.
	again, err := pool.Chat(ctx, hello, answerSchema)
	if err != nil || again.Backend != moved.Backend || again.Failover != "" {
		t.Errorf("next call: %+v %v", again, err)
	}

	// The server comes back where it was: a probe finds it.
	back := openaitest.NewAt(t, addr)
	back.Handle(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Content: okReply} })
	deadline := time.Now().Add(5 * time.Second)
	for pool.Backends()[on].State != llm.StateUp {
		if time.Now().After(deadline) {
			t.Fatalf("the probes never found the server back: %+v", pool.Backends()[on])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(back.Requests()) != 0 {
		t.Error("a probe made a chat call")
	}
}

func TestPoolAllDown(t *testing.T) {
	fakes, pool := servers(t, 2, 0)
	for _, f := range fakes {
		f.Close()
	}
	_, err := pool.Chat(llm.WithSession(context.Background(), "s"), hello, answerSchema)
	if !errors.Is(err, llm.ErrUnavailable) || !strings.Contains(err.Error(), "no model server could answer") {
		t.Fatalf("err = %v", err)
	}
	for _, f := range fakes {
		if !strings.Contains(err.Error(), f.URL) {
			t.Errorf("the error does not name %s: %v", f.URL, err)
		}
	}
	err = pool.Check(context.Background())
	if !errors.Is(err, llm.ErrUnavailable) || !strings.Contains(err.Error(), "no model server is ready") {
		t.Errorf("check: %v", err)
	}
}

// A request refused by the server (here, the schema) is not the server
// failing: the pool neither moves the call nor marks the server down.
func TestPoolDoesNotFailOverARefusal(t *testing.T) {
	fakes, pool := servers(t, 2, 0)
	fakes[0].Models("something-else")
	fakes[1].Models("something-else")
	_, err := pool.Chat(llm.WithSession(context.Background(), "s"), hello, answerSchema)
	if !errors.Is(err, llm.ErrModelMissing) {
		t.Fatalf("err = %v", err)
	}
	if n := len(fakes[0].Requests()) + len(fakes[1].Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	for _, b := range pool.Backends() {
		if b.State == llm.StateDown {
			t.Errorf("%s marked down", b.Name)
		}
	}
}

func TestPoolMixesKindsAndCountsCalls(t *testing.T) {
	oa := openaitest.New(t)
	oa.Handle(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Content: okReply} })
	ol := ollamatest.New(t)
	ol.Handle(func(api.ChatRequest) ollamatest.Reply { return ollamatest.Reply{Content: okReply} })
	olc, err := llm.New(llm.Options{Host: ol.URL, Model: "qwen2.5:7b-instruct", Timeout: 2 * time.Second, FailFast: true})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := llm.NewPool([]llm.Member{
		{Name: "ollama=" + ol.URL + "#qwen2.5:7b-instruct", Model: "qwen2.5:7b-instruct", Backend: olc},
		{Name: "openai=" + oa.URL + "#" + openaitest.Model, Model: openaitest.Model, Backend: newOpenAI(t, oa.URL)},
	}, llm.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var mu sync.Mutex
	calls := map[string]int{}
	pool.OnCall(func(c llm.CallStat) {
		mu.Lock()
		defer mu.Unlock()
		if c.Err == nil && c.Duration > 0 {
			calls[c.Backend]++
		}
	})
	models := map[string]bool{}
	for i := range 4 {
		reply, err := pool.Chat(llm.WithSession(context.Background(), fmt.Sprint(i)), hello, answerSchema)
		if err != nil {
			t.Fatal(err)
		}
		models[reply.Model] = true
	}
	if !models["qwen2.5:7b-instruct"] || !models[openaitest.Model] {
		t.Errorf("models that answered: %v", models)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || calls["ollama="+ol.URL+"#qwen2.5:7b-instruct"] != 2 {
		t.Errorf("calls seen: %v", calls)
	}
	if err := pool.Check(context.Background()); err != nil {
		t.Errorf("check: %v", err)
	}
}

func TestPoolBudgetIsTheSessionServers(t *testing.T) {
	small := openaitest.New(t)
	small.Handle(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Content: okReply} })
	big := openaitest.New(t)
	big.Handle(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Content: okReply} })
	pool, err := llm.NewPool([]llm.Member{
		{Name: "small", Backend: newOpenAI(t, small.URL, func(o *llm.OpenAIOptions) { o.ContextTokens = 4096 })},
		{Name: "big", Backend: newOpenAI(t, big.URL, func(o *llm.OpenAIOptions) { o.ContextTokens = 32768 })},
	}, llm.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctxA, ctxB := llm.WithSession(context.Background(), "a"), llm.WithSession(context.Background(), "b")
	unplaced, _ := pool.PromptBudget(ctxA)
	ra, _ := pool.Chat(ctxA, hello, answerSchema)
	rb, _ := pool.Chat(ctxB, hello, answerSchema)
	if ra.Backend != "small" || rb.Backend != "big" {
		t.Fatalf("placed on %s and %s", ra.Backend, rb.Backend)
	}
	a, _ := pool.PromptBudget(ctxA)
	b, whyB := pool.PromptBudget(ctxB)
	if a != unplaced || b <= a || !strings.Contains(whyB, "32768") {
		t.Errorf("budgets: unplaced %d, a %d, b %d (%s)", unplaced, a, b, whyB)
	}
}
