package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/metrics"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// metricsTools is one plain tool and one that needs approval, both of the
// plugin "media".
type metricsTools struct{}

func (metricsTools) Tools() []loop.Tool {
	obj := json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)
	return []loop.Tool{
		{Tool: schema.Tool{Name: "media_search", Description: "Search", Schema: obj}},
		{Tool: schema.Tool{Name: "media_add", Description: "Add", Schema: obj}, NeedsApproval: true},
	}
}

func (metricsTools) Call(context.Context, string, json.RawMessage) (string, error) {
	return "Dune (2021)", nil
}

func metricsPlugins() []plugins.Info {
	return []plugins.Info{{Name: "media", Status: plugins.StatusReady, Restarts: 2, Tools: []plugins.ToolInfo{
		{Name: "media_add", Breaker: "closed"}, {Name: "media_search", Breaker: "open"},
	}}}
}

// startMetrics is start with the metrics wired as the daemon wires them.
func startMetrics(t *testing.T, token string, script ...ollamatest.Reply) *env {
	t.Helper()
	return startWith(t, options{token: token, tools: metricsTools{}, configure: func(st *store.Store, r *loop.Runner, api *server.Server) {
		m := metrics.New(metrics.Sources{Plugins: metricsPlugins, Sessions: st.SessionCount})
		r.Events = m.Observe
		api.Metrics = m.Handler()
		api.TurnDone = m.TurnDone
	}}, script...)
}

func toolCall(tool string) ollamatest.Reply {
	return ollamatest.Reply{Content: fmt.Sprintf(`{"thought":"t","action":%q,"args":{"query":"Dune"}}`, tool)}
}

// scrapeLines is the /metrics body as a set of "name{labels} value" lines.
func scrapeLines(t *testing.T, e *env, header ...string) map[string]bool {
	t.Helper()
	resp, body := e.do(t, "GET", "/metrics", "", header...)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		lines[l] = true
	}
	return lines
}

func wantLines(t *testing.T, lines map[string]bool, want ...string) {
	t.Helper()
	for _, w := range want {
		if !lines[w] {
			t.Errorf("/metrics has no line %q", w)
		}
	}
}

func TestMetrics(t *testing.T) {
	const token = "metrics-token"
	auth := []string{"Authorization", "Bearer " + token}
	e := startMetrics(t, token,
		// An answer after one tool call, the first reply re-asked.
		ollamatest.Reply{Content: "not json"}, toolCall("media_search"), final("Dune (2021)"),
		// A call that waits for approval.
		toolCall("media_add"),
		// A failure: three invalid replies.
		ollamatest.Reply{Content: "?"}, ollamatest.Reply{Content: "?"}, ollamatest.Reply{Content: "?"},
	)

	// /metrics is an API route like the others: it needs the token.
	if resp, body := e.do(t, "GET", "/metrics", ""); resp.StatusCode != 401 || !strings.Contains(string(body), `"unauthorized"`) {
		t.Errorf("/metrics without the token: %d %s", resp.StatusCode, body)
	}
	if resp, _ := e.do(t, "GET", "/metrics", "", "Authorization", "Bearer wrong"); resp.StatusCode != 401 {
		t.Errorf("/metrics with a wrong token: %d", resp.StatusCode)
	}
	wantLines(t, scrapeLines(t, e, auth...),
		`mmcpd_turns_total{outcome="answer"} 0`,
		`mmcpd_sessions 0`,
		`mmcpd_turns_running 0`,
	)

	if resp, body := e.do(t, "POST", "/v1/chat", `{"message":"find Dune"}`, auth...); resp.StatusCode != 200 || !strings.Contains(string(body), `"answer":"Dune (2021)"`) {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	lines := scrapeLines(t, e, auth...)
	wantLines(t, lines,
		`# TYPE mmcpd_turns_total counter`,
		`mmcpd_turns_total{outcome="answer"} 1`,
		`mmcpd_turns_total{outcome="failed"} 0`,
		`mmcpd_steps_total 2`,
		`mmcpd_validation_retries_total 1`,
		fmt.Sprintf(`mmcpd_model_tokens_total{kind="prompt"} %d`, 3*ollamatest.DefaultPromptTokens),
		fmt.Sprintf(`mmcpd_model_tokens_total{kind="completion"} %d`, 3*ollamatest.DefaultCompletionTokens),
		`mmcpd_model_request_duration_seconds_count 3`,
		`mmcpd_tool_calls_total{outcome="ok",tool="media_search"} 1`,
		`mmcpd_tool_call_duration_seconds_count{tool="media_search"} 1`,
		`mmcpd_turns_running 0`,
		`mmcpd_sessions 1`,
		`mmcpd_breaker_state{state="open",tool="media_search"} 1`,
		`mmcpd_breaker_state{state="closed",tool="media_search"} 0`,
		`mmcpd_breaker_state{state="closed",tool="media_add"} 1`,
		`mmcpd_plugin_restarts_total{plugin="media"} 2`,
		`mmcpd_plugins{status="ready"} 1`,
	)
	if !lines["# TYPE go_goroutines gauge"] {
		t.Error("no Go runtime metrics")
	}

	if resp, body := e.do(t, "POST", "/v1/chat", `{"message":"add it"}`, auth...); resp.StatusCode != 200 || !strings.Contains(string(body), `"type":"action_request"`) {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.do(t, "POST", "/v1/chat", `{"message":"fail"}`, auth...); resp.StatusCode != 502 {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	wantLines(t, scrapeLines(t, e, auth...),
		`mmcpd_turns_total{outcome="answer"} 1`,
		`mmcpd_turns_total{outcome="action_request"} 1`,
		`mmcpd_turns_total{outcome="failed"} 1`,
		`mmcpd_turns_total{outcome="cancelled"} 0`,
		`mmcpd_steps_total 4`,
		`mmcpd_validation_retries_total 4`,
		`mmcpd_turns_running 0`,
		`mmcpd_sessions 3`,
	)
}

func TestMetricsCancelledTurn(t *testing.T) {
	slow := final("late")
	slow.Delay = 10 * time.Second
	e := startMetrics(t, "", slow)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/chat", strings.NewReader(`{"message":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// Wait until the turn reached the model and counts as running, then leave.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if len(e.fake.Requests()) > 0 && scrapeLines(t, e)[`mmcpd_turns_running 1`] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the turn never showed as running")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	for deadline := time.Now().Add(5 * time.Second); ; {
		lines := scrapeLines(t, e)
		if lines[`mmcpd_turns_total{outcome="cancelled"} 1`] && lines[`mmcpd_turns_running 0`] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cancelled turn was not counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
