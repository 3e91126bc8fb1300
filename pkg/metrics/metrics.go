// Package metrics owns the daemon's Prometheus metrics and GET /metrics.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// Sources are what the metrics read at scrape time. A nil source leaves its
// metrics out.
type Sources struct {
	// Plugins lists the plugins (plugins.Host.Plugins). It also bounds the
	// tool label: a tool none of them has is counted as "other".
	Plugins func() []plugins.Info
	// Sessions counts the sessions in the store (store.Store.SessionCount).
	Sessions func(context.Context) (int, error)
	// Backends lists the model servers (llm.Pool.Backends).
	Backends func() []llm.BackendState
}

// SessionsTimeout bounds how long a scrape waits for the session count.
const SessionsTimeout = time.Second

// Turn outcomes, the values TurnDone takes.
var outcomes = []string{"answer", "action_request", "failed", "cancelled"}

// Breaker states, as plugins.ToolInfo.Breaker has them.
var breakerStates = []string{"closed", "half-open", "open"}

// Plugin statuses always reported, at 0 when no plugin has them.
var pluginStatuses = []string{
	plugins.StatusStarting, plugins.StatusReady, plugins.StatusStandby, plugins.StatusFailed, plugins.StatusRestarting,
	plugins.StatusUnreachable,
}

// otherTool is the tool label of a call to a tool no plugin has.
const otherTool = "other"

var (
	breakerDesc = prometheus.NewDesc("mmcpd_breaker_state",
		"Circuit breaker state of each registered tool: 1 for the current state (closed, half-open, open), 0 for the others.",
		[]string{"tool", "state"}, nil)
	restartsDesc = prometheus.NewDesc("mmcpd_plugin_restarts_total",
		"Times each plugin was restarted after it exited or was killed.",
		[]string{"plugin"}, nil)
	pluginsDesc = prometheus.NewDesc("mmcpd_plugins",
		"Plugins found, by status (starting, ready, standby, failed, restarting, unreachable).",
		[]string{"status"}, nil)
	processesDesc = prometheus.NewDesc("mmcpd_plugin_processes",
		"Plugin and MCP server processes running now (idle ones are stopped).",
		nil, nil)
	residentDesc = prometheus.NewDesc("mmcpd_plugin_resident_bytes",
		"Resident memory of the running plugin and MCP server processes, together.",
		nil, nil)
	sessionsDesc = prometheus.NewDesc("mmcpd_sessions",
		"Sessions in the store.",
		nil, nil)
)

// Metrics counts what turns do and reads the plugins and the store when
// scraped. Its methods are safe for concurrent use.
type Metrics struct {
	src Sources
	reg *prometheus.Registry

	turns     *prometheus.CounterVec
	steps     prometheus.Counter
	retries   prometheus.Counter
	modelTime prometheus.Histogram
	tokens    *prometheus.CounterVec
	toolCalls *prometheus.CounterVec
	toolTime  *prometheus.HistogramVec
	backend   backendMetrics

	mu      sync.Mutex
	running map[string]struct{} // trace ids of turns seen and not ended
	known   map[string]bool     // tool names the plugins have, as last listed
}

// New makes the metrics on a registry of their own, with the Go runtime and
// process collectors.
func New(src Sources) *Metrics {
	m := &Metrics{
		src: src,
		reg: prometheus.NewRegistry(),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mmcpd_turns_total",
			Help: "Chat turns finished, by outcome (answer, action_request, failed, cancelled).",
		}, []string{"outcome"}),
		steps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mmcpd_steps_total",
			Help: "Loop steps started; each asks the model for one decision.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mmcpd_validation_retries_total",
			Help: "Model replies refused by validation; each is asked again while the step has re-asks left.",
		}),
		modelTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mmcpd_model_request_duration_seconds",
			Help:    "Time of each model call that returned a reply, retries on overload included.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300},
		}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mmcpd_model_tokens_total",
			Help: "Tokens the model read (prompt) and wrote (completion), as Ollama counts them.",
		}, []string{"kind"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mmcpd_tool_calls_total",
			Help: "Tool calls finished, by tool and outcome (ok, error).",
		}, []string{"tool", "outcome"}),
		toolTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mmcpd_tool_call_duration_seconds",
			Help:    "Time of each tool call, by tool.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"tool"}),
		backend: newBackendMetrics(),
		running: map[string]struct{}{},
		known:   map[string]bool{},
	}
	for _, o := range outcomes {
		m.turns.WithLabelValues(o)
	}
	m.tokens.WithLabelValues("prompt")
	m.tokens.WithLabelValues("completion")
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.turns, m.steps, m.retries, m.modelTime, m.tokens, m.toolCalls, m.toolTime,
		m.backend.calls, m.backend.errors, m.backend.time,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mmcpd_turns_running",
			Help: "Turns in progress: from a turn's first event to its final, action_request or error event.",
		}, m.runningTurns),
	)
	if src.Plugins != nil {
		m.reg.MustRegister(pluginCollector(src.Plugins))
	}
	if src.Backends != nil {
		m.reg.MustRegister(backendCollector(src.Backends))
	}
	if src.Sessions != nil {
		m.reg.MustRegister(sessionCollector(src.Sessions))
	}
	return m
}

// Observe counts one turn event; it is a loop.Observer (loop.Runner.Events).
func (m *Metrics) Observe(e loop.Event) {
	m.track(e)
	switch e.Type {
	case loop.EventStepStart:
		m.steps.Inc()
	case loop.EventValidationError:
		m.retries.Inc()
	case loop.EventModelReply:
		m.modelTime.Observe(e.Duration.Seconds())
		if e.Usage != nil {
			m.tokens.WithLabelValues("prompt").Add(float64(max(e.Usage.PromptTokens, 0)))
			m.tokens.WithLabelValues("completion").Add(float64(max(e.Usage.CompletionTokens, 0)))
		}
	case loop.EventToolEnd:
		tool, outcome := m.toolLabel(e.Action), "ok"
		if e.Error != "" {
			outcome = "error"
		}
		m.toolCalls.WithLabelValues(tool, outcome).Inc()
		m.toolTime.WithLabelValues(tool).Observe(e.Duration.Seconds())
	}
}

// TurnDone counts a finished turn. outcome is answer, action_request, failed
// or cancelled; any other word is ignored, to keep the label bounded.
func (m *Metrics) TurnDone(outcome string) {
	for _, o := range outcomes {
		if o == outcome {
			m.turns.WithLabelValues(o).Inc()
			return
		}
	}
}

// Handler serves the metrics in the Prometheus formats. A source that fails
// leaves its metric out and the rest is served; the failure is logged.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// track keeps the set of running turns by trace id: a turn runs from its
// first event until the event that ends it.
func (m *Metrics) track(e loop.Event) {
	if e.TraceID == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch e.Type {
	case loop.EventFinal, loop.EventActionRequest, loop.EventError:
		delete(m.running, e.TraceID)
	default:
		m.running[e.TraceID] = struct{}{}
	}
}

func (m *Metrics) runningTurns() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return float64(len(m.running))
}

// toolLabel is name when a plugin has that tool, else "other": the label
// takes only names the plugins registered. The list is read again when a
// name is not in the one last read.
func (m *Metrics) toolLabel(name string) string {
	if m.src.Plugins == nil {
		return name // no plugin host: the loop only calls tools of its union
	}
	m.mu.Lock()
	ok := m.known[name]
	m.mu.Unlock()
	if ok {
		return name
	}
	known := map[string]bool{}
	for _, p := range m.src.Plugins() {
		for _, t := range p.Tools {
			known[t.Name] = true
		}
	}
	m.mu.Lock()
	m.known = known
	m.mu.Unlock()
	if known[name] {
		return name
	}
	return otherTool
}

// pluginCollector reads the plugins at scrape time: breaker states, restarts
// and statuses.
type pluginCollector func() []plugins.Info

func (c pluginCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerDesc
	ch <- restartsDesc
	ch <- pluginsDesc
	ch <- processesDesc
	ch <- residentDesc
}

func (c pluginCollector) Collect(ch chan<- prometheus.Metric) {
	byStatus := map[string]int{}
	for _, s := range pluginStatuses {
		byStatus[s] = 0
	}
	seen := map[string]bool{}
	processes, resident := 0, int64(0)
	for _, p := range c() {
		byStatus[p.Status]++
		if p.PID > 0 {
			processes++
			resident += p.RSSBytes
		}
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(p.Restarts), p.Name)
		for _, t := range p.Tools {
			// A tool refused for its name has no breaker; its name may be
			// another plugin's.
			if t.Breaker == "" || seen[t.Name] {
				continue
			}
			seen[t.Name] = true
			for _, s := range breakerStates {
				v := 0.0
				if s == t.Breaker {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(breakerDesc, prometheus.GaugeValue, v, t.Name, s)
			}
		}
	}
	for s, n := range byStatus {
		ch <- prometheus.MustNewConstMetric(pluginsDesc, prometheus.GaugeValue, float64(n), s)
	}
	ch <- prometheus.MustNewConstMetric(processesDesc, prometheus.GaugeValue, float64(processes))
	ch <- prometheus.MustNewConstMetric(residentDesc, prometheus.GaugeValue, float64(resident))
}

// sessionCollector reads the session count at scrape time, waiting at most
// SessionsTimeout.
type sessionCollector func(context.Context) (int, error)

func (c sessionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sessionsDesc }

func (c sessionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), SessionsTimeout)
	defer cancel()
	n, err := c(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(sessionsDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n))
}
