package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/openaitest"
	"github.com/mmcpd/mmcpd/pkg/metrics"
)

// A pool's calls, errors, time, in-flight calls and states, per server, as a
// scrape sees them.
func TestBackends(t *testing.T) {
	good := openaitest.New(t)
	good.Handle(func(openaitest.Request) openaitest.Reply {
		return openaitest.Reply{Content: `{"answer":"ok"}`, Delay: 20 * time.Millisecond}
	})
	bad := openaitest.New(t)
	bad.Handle(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Status: 500, Error: "boom"} })
	member := func(name, url string) llm.Member {
		c, err := llm.NewOpenAI(llm.OpenAIOptions{BaseURL: url, Model: openaitest.Model, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return llm.Member{Name: name, Model: openaitest.Model, Backend: c}
	}
	pool, err := llm.NewPool([]llm.Member{member("bad", bad.URL), member("good", good.URL)}, llm.PoolOptions{ProbeFirst: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m := metrics.New(metrics.Sources{Backends: pool.Backends})
	pool.OnCall(m.ModelCall)

	// The first session lands on "bad", fails over to "good"; the next
	// ones go to "good", "bad" being down.
	for _, s := range []string{"a", "b", "c"} {
		if _, err := pool.Chat(llm.WithSession(context.Background(), s), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	mfs := families(t, m.Handler())
	want(t, mfs, 1, "mmcpd_backend_calls_total", "backend", "bad", "outcome", "error")
	want(t, mfs, 1, "mmcpd_backend_errors_total", "backend", "bad", "kind", "server_error")
	want(t, mfs, 3, "mmcpd_backend_calls_total", "backend", "good", "outcome", "ok")
	if n, sum := histogram(t, mfs, "mmcpd_backend_call_duration_seconds", "backend", "good"); n != 3 || sum < 0.06 {
		t.Errorf("good's call time: %d calls, %.3fs", n, sum)
	}
	want(t, mfs, 1, "mmcpd_backend_state", "backend", "bad", "state", "down")
	want(t, mfs, 1, "mmcpd_backend_state", "backend", "good", "state", "up")
	want(t, mfs, 3, "mmcpd_backend_sessions", "backend", "good")
	want(t, mfs, 0, "mmcpd_backend_in_flight", "backend", "good")
}
