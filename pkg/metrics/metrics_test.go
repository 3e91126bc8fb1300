package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/metrics"
	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// families scrapes h and parses the text exposition.
func families(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	return mfs
}

// sample finds the sample of family name whose labels are exactly labels
// (name, value pairs); ok is false when there is none.
func sample(mfs map[string]*dto.MetricFamily, name string, labels ...string) (*dto.Metric, bool) {
	mf := mfs[name]
	if mf == nil {
		return nil, false
	}
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		match := true
		for i, l := range m.GetLabel() {
			if l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
				match = false
				break
			}
		}
		if match {
			return m, true
		}
	}
	return nil, false
}

// value is a counter's or a gauge's value; it fails the test when the sample
// is missing.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m, ok := sample(mfs, name, labels...)
	if !ok {
		t.Fatalf("no sample %s%v", name, labels)
	}
	switch mfs[name].GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	t.Fatalf("%s is a %s", name, mfs[name].GetType())
	return 0
}

func histogram(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) (count uint64, sum float64) {
	t.Helper()
	m, ok := sample(mfs, name, labels...)
	if !ok || mfs[name].GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("no histogram %s%v", name, labels)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func want(t *testing.T, mfs map[string]*dto.MetricFamily, v float64, name string, labels ...string) {
	t.Helper()
	if got := value(t, mfs, name, labels...); got != v {
		t.Errorf("%s%v = %v, want %v", name, labels, got, v)
	}
}

func fakePlugins(infos ...plugins.Info) func() []plugins.Info {
	return func() []plugins.Info { return infos }
}

var tmdb = plugins.Info{Name: "tmdb", Status: plugins.StatusReady, Tools: []plugins.ToolInfo{{Name: "tmdb_search", Breaker: "closed"}}}

func TestTurnEvents(t *testing.T) {
	m := metrics.New(metrics.Sources{Plugins: fakePlugins(tmdb)})
	h := m.Handler()
	const id = "trace-1"
	for _, e := range []loop.Event{
		{Type: loop.EventStepStart, Step: 1},
		{Type: loop.EventModelReply, Step: 1, Duration: 2 * time.Second, Usage: &llm.Usage{Calls: 1, PromptTokens: 100, CompletionTokens: 20}},
		{Type: loop.EventValidationError, Step: 1, Problems: []string{"args.query: missing required field"}},
		{Type: loop.EventModelReply, Step: 1, Attempt: 1, Duration: time.Second, Usage: &llm.Usage{Calls: 1, PromptTokens: 50, CompletionTokens: 10}},
		{Type: loop.EventToolStart, Step: 1, Action: "tmdb_search"},
		{Type: loop.EventToolEnd, Step: 1, Action: "tmdb_search", Observation: "Dune", Duration: 300 * time.Millisecond},
		{Type: loop.EventStepStart, Step: 2},
		{Type: loop.EventModelReply, Step: 2, Duration: 500 * time.Millisecond, Usage: &llm.Usage{Calls: 1, PromptTokens: 7, CompletionTokens: 3}},
		{Type: loop.EventToolStart, Step: 2, Action: "tmdb_search"},
		{Type: loop.EventToolEnd, Step: 2, Action: "tmdb_search", Error: "tool tmdb_search did not finish within 30s", Duration: 30 * time.Second},
		// A name no plugin has does not become a label of its own.
		{Type: loop.EventToolEnd, Step: 2, Action: "made_up", Error: "unknown tool", Duration: time.Millisecond},
		{Type: loop.EventStepStart, Step: 3},
	} {
		e.TraceID = id
		m.Observe(e)
	}
	mfs := families(t, h)
	want(t, mfs, 1, "mmcpd_turns_running")
	want(t, mfs, 0, "mmcpd_turns_total", "outcome", "answer")

	m.Observe(loop.Event{Type: loop.EventFinal, TraceID: id, Step: 3, Answer: "Dune (2021)"})
	m.TurnDone("answer")
	m.TurnDone("cancelled")
	m.TurnDone("exploded") // not an outcome: ignored
	mfs = families(t, h)

	want(t, mfs, 0, "mmcpd_turns_running")
	want(t, mfs, 1, "mmcpd_turns_total", "outcome", "answer")
	want(t, mfs, 1, "mmcpd_turns_total", "outcome", "cancelled")
	want(t, mfs, 0, "mmcpd_turns_total", "outcome", "failed")
	want(t, mfs, 0, "mmcpd_turns_total", "outcome", "action_request")
	if n := len(mfs["mmcpd_turns_total"].GetMetric()); n != 4 {
		t.Errorf("mmcpd_turns_total has %d series, want the 4 outcomes", n)
	}
	want(t, mfs, 3, "mmcpd_steps_total")
	want(t, mfs, 1, "mmcpd_validation_retries_total")
	want(t, mfs, 157, "mmcpd_model_tokens_total", "kind", "prompt")
	want(t, mfs, 33, "mmcpd_model_tokens_total", "kind", "completion")
	if n, sum := histogram(t, mfs, "mmcpd_model_request_duration_seconds"); n != 3 || sum != 3.5 {
		t.Errorf("model request duration: %d observations, sum %v; want 3, 3.5", n, sum)
	}
	want(t, mfs, 1, "mmcpd_tool_calls_total", "outcome", "ok", "tool", "tmdb_search")
	want(t, mfs, 1, "mmcpd_tool_calls_total", "outcome", "error", "tool", "tmdb_search")
	want(t, mfs, 1, "mmcpd_tool_calls_total", "outcome", "error", "tool", "other")
	if _, ok := sample(mfs, "mmcpd_tool_calls_total", "outcome", "error", "tool", "made_up"); ok {
		t.Error("an unregistered tool name became a label")
	}
	if n, sum := histogram(t, mfs, "mmcpd_tool_call_duration_seconds", "tool", "tmdb_search"); n != 2 || sum != 30.3 {
		t.Errorf("tool duration: %d observations, sum %v; want 2, 30.3", n, sum)
	}

	// Every family of ours has help text; the runtime collectors are there.
	for name, mf := range mfs {
		if strings.HasPrefix(name, "mmcpd_") && mf.GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_start_time_seconds"} {
		if mfs[name] == nil {
			t.Errorf("no %s", name)
		}
	}
}

func TestTurnsRunningEnds(t *testing.T) {
	m := metrics.New(metrics.Sources{})
	// Three turns at once: one answers, one stops for approval, one fails.
	for _, id := range []string{"a", "b", "c"} {
		m.Observe(loop.Event{Type: loop.EventStepStart, TraceID: id, Step: 1})
	}
	// A resumed turn starts with its approved call.
	m.Observe(loop.Event{Type: loop.EventToolStart, TraceID: "d", Step: 1, Action: "x"})
	mfs := families(t, m.Handler())
	want(t, mfs, 4, "mmcpd_turns_running")
	m.Observe(loop.Event{Type: loop.EventFinal, TraceID: "a"})
	m.Observe(loop.Event{Type: loop.EventActionRequest, TraceID: "b", Action: "x"})
	m.Observe(loop.Event{Type: loop.EventError, TraceID: "c", Error: "step 1: model call: boom"})
	mfs = families(t, m.Handler())
	want(t, mfs, 1, "mmcpd_turns_running")
	// Without a plugin source the tool name is used as it comes.
	m.Observe(loop.Event{Type: loop.EventToolEnd, TraceID: "d", Step: 1, Action: "x"})
	mfs = families(t, m.Handler())
	want(t, mfs, 1, "mmcpd_tool_calls_total", "outcome", "ok", "tool", "x")
	for _, name := range []string{"mmcpd_plugins", "mmcpd_breaker_state", "mmcpd_plugin_restarts_total", "mmcpd_sessions"} {
		if mfs[name] != nil {
			t.Errorf("%s without its source", name)
		}
	}
}

func TestPluginsAtScrape(t *testing.T) {
	var mu sync.Mutex
	list := []plugins.Info{
		tmdb,
		{Name: "web", Status: plugins.StatusRestarting, Restarts: 3, Tools: []plugins.ToolInfo{
			{Name: "web_fetch", Breaker: "open"},
			{Name: "web_search", Breaker: "half-open"},
			// Refused: tmdb has this name. It has no breaker of its own.
			{Name: "tmdb_search", Disabled: "refused: another plugin has a tool with this name"},
		}},
		{Name: "broken", Status: plugins.StatusFailed, Tools: []plugins.ToolInfo{}},
	}
	m := metrics.New(metrics.Sources{Plugins: func() []plugins.Info {
		mu.Lock()
		defer mu.Unlock()
		return list
	}})
	mfs := families(t, m.Handler())

	for _, c := range []struct{ tool, state string }{{"tmdb_search", "closed"}, {"web_fetch", "open"}, {"web_search", "half-open"}} {
		for _, s := range []string{"closed", "half-open", "open"} {
			v := 0.0
			if s == c.state {
				v = 1
			}
			want(t, mfs, v, "mmcpd_breaker_state", "state", s, "tool", c.tool)
		}
	}
	if n := len(mfs["mmcpd_breaker_state"].GetMetric()); n != 9 {
		t.Errorf("mmcpd_breaker_state has %d series, want 9", n)
	}
	if got := mfs["mmcpd_plugin_restarts_total"].GetType(); got != dto.MetricType_COUNTER {
		t.Errorf("mmcpd_plugin_restarts_total is a %s", got)
	}
	want(t, mfs, 3, "mmcpd_plugin_restarts_total", "plugin", "web")
	want(t, mfs, 0, "mmcpd_plugin_restarts_total", "plugin", "tmdb")
	want(t, mfs, 0, "mmcpd_plugin_restarts_total", "plugin", "broken")
	want(t, mfs, 1, "mmcpd_plugins", "status", "ready")
	want(t, mfs, 1, "mmcpd_plugins", "status", "restarting")
	want(t, mfs, 1, "mmcpd_plugins", "status", "failed")
	want(t, mfs, 0, "mmcpd_plugins", "status", "standby")
	want(t, mfs, 0, "mmcpd_plugins", "status", "starting")
	want(t, mfs, 0, "mmcpd_plugins", "status", "unreachable")

	// Read again at every scrape: the breaker closed, the plugin came back.
	mu.Lock()
	list = []plugins.Info{tmdb, {Name: "web", Status: plugins.StatusReady, Restarts: 4, Tools: []plugins.ToolInfo{{Name: "web_fetch", Breaker: "closed"}}}}
	mu.Unlock()
	mfs = families(t, m.Handler())
	want(t, mfs, 1, "mmcpd_breaker_state", "state", "closed", "tool", "web_fetch")
	want(t, mfs, 0, "mmcpd_breaker_state", "state", "open", "tool", "web_fetch")
	want(t, mfs, 4, "mmcpd_plugin_restarts_total", "plugin", "web")
	want(t, mfs, 2, "mmcpd_plugins", "status", "ready")
	want(t, mfs, 0, "mmcpd_plugins", "status", "failed")

	// A tool that arrived after the last look is learnt, not called "other".
	m.Observe(loop.Event{Type: loop.EventToolEnd, Action: "web_fetch"})
	mfs = families(t, m.Handler())
	want(t, mfs, 1, "mmcpd_tool_calls_total", "outcome", "ok", "tool", "web_fetch")
}

func TestSessions(t *testing.T) {
	var fail bool
	m := metrics.New(metrics.Sources{Sessions: func(ctx context.Context) (int, error) {
		if _, ok := ctx.Deadline(); !ok {
			return 0, errors.New("no deadline")
		}
		if fail {
			return 0, errors.New("database is locked")
		}
		return 7, nil
	}})
	mfs := families(t, m.Handler())
	want(t, mfs, 7, "mmcpd_sessions")

	// A store that fails costs its own metric only.
	fail = true
	mfs = families(t, m.Handler())
	if mfs["mmcpd_sessions"] != nil {
		t.Error("mmcpd_sessions served although the store failed")
	}
	want(t, mfs, 0, "mmcpd_turns_running")
}

// Each Metrics has its own registry: several can live in one process.
func TestIndependent(t *testing.T) {
	a, b := metrics.New(metrics.Sources{}), metrics.New(metrics.Sources{})
	a.TurnDone("failed")
	want(t, families(t, a.Handler()), 1, "mmcpd_turns_total", "outcome", "failed")
	want(t, families(t, b.Handler()), 0, "mmcpd_turns_total", "outcome", "failed")
}

func TestConcurrent(t *testing.T) {
	m := metrics.New(metrics.Sources{Plugins: fakePlugins(tmdb), Sessions: func(context.Context) (int, error) { return 1, nil }})
	h := m.Handler()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			id := fmt.Sprint("turn-", i)
			for range 50 {
				m.Observe(loop.Event{Type: loop.EventStepStart, TraceID: id})
				m.Observe(loop.Event{Type: loop.EventModelReply, TraceID: id, Usage: &llm.Usage{PromptTokens: 1}})
				m.Observe(loop.Event{Type: loop.EventToolEnd, TraceID: id, Action: "tmdb_search"})
				m.Observe(loop.Event{Type: loop.EventFinal, TraceID: id})
				m.TurnDone("answer")
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		}
	})
	wg.Wait()
	mfs := families(t, h)
	want(t, mfs, 400, "mmcpd_turns_total", "outcome", "answer")
	want(t, mfs, 400, "mmcpd_steps_total")
	want(t, mfs, 400, "mmcpd_tool_calls_total", "outcome", "ok", "tool", "tmdb_search")
	want(t, mfs, 0, "mmcpd_turns_running")
}
