package metrics

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mmcpd/mmcpd/pkg/llm"
)

var (
	backendInFlightDesc = prometheus.NewDesc("mmcpd_backend_in_flight",
		"Model calls in progress on each model server.",
		[]string{"backend"}, nil)
	backendStateDesc = prometheus.NewDesc("mmcpd_backend_state",
		"State of each model server: 1 for the current state (unknown, up, down), 0 for the others.",
		[]string{"backend", "state"}, nil)
	backendSessionsDesc = prometheus.NewDesc("mmcpd_backend_sessions",
		"Sessions placed on each model server.",
		[]string{"backend"}, nil)
)

var backendStates = []string{llm.StateUnknown, llm.StateUp, llm.StateDown}

// backendMetrics count each model server's calls, as llm.Pool reports them.
type backendMetrics struct {
	calls  *prometheus.CounterVec
	errors *prometheus.CounterVec
	time   *prometheus.HistogramVec
}

func newBackendMetrics() backendMetrics {
	return backendMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mmcpd_backend_calls_total",
			Help: "Model calls finished on each model server, by outcome (ok, error).",
		}, []string{"backend", "outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mmcpd_backend_errors_total",
			Help: "Failed model calls on each model server, by kind (unavailable, timeout, server_error, model_missing, unauthorized, context_too_long, schema_refused, bad_response, cancelled, other).",
		}, []string{"backend", "kind"}),
		time: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mmcpd_backend_call_duration_seconds",
			Help:    "Time of each model call on each model server, the server's own retries included.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300},
		}, []string{"backend"}),
	}
}

// ModelCall counts one call of a pool of model servers (llm.Pool.OnCall).
func (m *Metrics) ModelCall(c llm.CallStat) {
	m.backend.time.WithLabelValues(c.Backend).Observe(c.Duration.Seconds())
	if c.Err == nil {
		m.backend.calls.WithLabelValues(c.Backend, "ok").Inc()
		return
	}
	m.backend.calls.WithLabelValues(c.Backend, "error").Inc()
	m.backend.errors.WithLabelValues(c.Backend, errorKind(c.Err)).Inc()
}

func errorKind(err error) string {
	kinds := []struct {
		err  error
		name string
	}{
		{llm.ErrUnavailable, "unavailable"},
		{llm.ErrTimeout, "timeout"},
		{llm.ErrServerError, "server_error"},
		{llm.ErrReplyTooLarge, "bad_response"},
		{llm.ErrBadResponse, "bad_response"},
		{llm.ErrModelMissing, "model_missing"},
		{llm.ErrUnauthorized, "unauthorized"},
		{llm.ErrContextTooLong, "context_too_long"},
		{llm.ErrSchemaRefused, "schema_refused"},
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	if isCancel(err) {
		return "cancelled"
	}
	return "other"
}

// backendCollector reads the servers' states at scrape time.
type backendCollector func() []llm.BackendState

func (c backendCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backendInFlightDesc
	ch <- backendStateDesc
	ch <- backendSessionsDesc
}

func (c backendCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c() {
		ch <- prometheus.MustNewConstMetric(backendInFlightDesc, prometheus.GaugeValue, float64(b.InFlight), b.Name)
		ch <- prometheus.MustNewConstMetric(backendSessionsDesc, prometheus.GaugeValue, float64(b.Sessions), b.Name)
		for _, s := range backendStates {
			v := 0.0
			if b.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(backendStateDesc, prometheus.GaugeValue, v, b.Name, s)
		}
	}
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
