package plugins

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/pkg/redact"
)

// ProbeOptions schedule the health probes of the plugins that declare one
// (Describe's has_health). A plugin is probed:
//   - once at start, after Describe, concurrently with the others;
//   - while it is unreachable, in the background, Backoff after the first
//     failure and twice as long after each further one, up to MaxBackoff;
//   - when its tools are listed (each step of a turn, GET /v1/tools) and
//     its last probe, or its last successful call, is older than MaxAge. That
//     probe runs aside: the listing in hand keeps the state as it was, the
//     next one gets the answer. A listing never waits for a service. A plugin
//     started again after a crash has no answer yet: its next listing probes.
type ProbeOptions struct {
	Timeout    time.Duration // one probe
	MaxAge     time.Duration // how long an answer holds
	Backoff    time.Duration // first pause before probing an unreachable plugin again
	MaxBackoff time.Duration // longest such pause
}

// DefaultProbeOptions are the schedule unless Options.Probe says otherwise.
var DefaultProbeOptions = ProbeOptions{
	Timeout:    5 * time.Second,
	MaxAge:     time.Minute,
	Backoff:    5 * time.Second,
	MaxBackoff: 5 * time.Minute,
}

// withDefaults fills the fields left zero.
func (o ProbeOptions) withDefaults() ProbeOptions {
	d := DefaultProbeOptions
	if o.Timeout <= 0 {
		o.Timeout = d.Timeout
	}
	if o.MaxAge <= 0 {
		o.MaxAge = d.MaxAge
	}
	if o.Backoff <= 0 {
		o.Backoff = d.Backoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = d.MaxBackoff
	}
	o.MaxBackoff = max(o.MaxBackoff, o.Backoff)
	return o
}

// probeState is what the host knows of a plugin's service. Guarded by the
// plugin's mu.
type probeState struct {
	has     bool          // the plugin declared a probe
	running bool          // one probe at a time
	at      time.Time     // the last answer (probe, or successful call); zero: none yet
	backoff time.Duration // the pause before the next background probe; 0 while reachable
	timer   *time.Timer   // the next background probe, while unreachable
}

// probable reports whether a probe of m would mean anything: a plugin on
// standby, failed or restarting has other troubles. The caller holds m.mu.
func (m *managed) probable() bool {
	return m.probe.has && (m.status == StatusReady || m.status == StatusUnreachable) && m.proc != nil && !m.proc.exited()
}

// probeIfStale starts a probe of m aside when its last answer is older than
// MaxAge.
func (h *Host) probeIfStale(m *managed) {
	m.mu.Lock()
	stale := m.probable() && !m.probe.running && time.Since(m.probe.at) > h.opts.Probe.MaxAge
	m.mu.Unlock()
	if stale {
		h.probeAside(m)
	}
}

// probeAside runs a probe of m in its own goroutine, unless the host is
// closing; Close waits for those that run.
func (h *Host) probeAside(m *managed) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return
	}
	h.probing.Add(1) // under h.mu: Close cannot be waiting yet
	go func() {
		defer h.probing.Done()
		h.probe(h.ctx, m)
	}()
}

// probe asks m whether its service answers, and records the answer: a
// failure makes the plugin unreachable, with the probe's reason, and
// schedules the next probe; a success makes it ready again. The probe does
// not go through the tools' breakers: it is not a call of any tool.
func (h *Host) probe(ctx context.Context, m *managed) {
	m.mu.Lock()
	if !m.probable() || m.probe.running {
		m.mu.Unlock()
		return
	}
	m.probe.running = true
	proc, secrets := m.proc, m.secrets()
	m.mu.Unlock()

	timeout := h.opts.Probe.Timeout
	pctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := proc.rpc.Health(pctx, &pluginpb.HealthRequest{})
	cancel()

	m.mu.Lock()
	defer m.mu.Unlock()
	m.probe.running = false
	if ctx.Err() != nil || m.proc != proc || !m.probable() {
		return // shutting down, or the plugin changed meanwhile: the answer is moot
	}
	var problem string
	switch code := status.Code(err); {
	case code == codes.Unimplemented:
		// has_health without the RPC: a plugin built against another
		// contract. It keeps working, unprobed.
		m.probe.has = false
		h.log.Warn("plugin declares a health probe but does not serve it; it is not probed", "plugin", m.name)
		return
	case code == codes.DeadlineExceeded || code == codes.Canceled:
		problem = "its health probe did not answer within " + timeout.String()
	case err != nil:
		problem = "its health probe failed: " + status.Convert(err).Message()
	case !resp.Ok && strings.TrimSpace(resp.Problem) == "":
		problem = "its health probe failed without saying why"
	case !resp.Ok:
		problem = resp.Problem
	}
	m.probe.at = time.Now()
	if problem == "" {
		h.reachableLocked(m, "probe")
		return
	}
	// The SDK blanks secrets out already; a plugin built without it may not.
	problem = oneLine(scrub(problem, secrets))
	if m.status != StatusUnreachable || m.reason != problem {
		h.log.Warn("plugin unreachable", "plugin", m.name, "reason", problem)
	}
	m.status, m.reason = StatusUnreachable, problem
	if m.probe.backoff == 0 {
		m.probe.backoff = h.opts.Probe.Backoff
	} else {
		m.probe.backoff = min(2*m.probe.backoff, h.opts.Probe.MaxBackoff)
	}
	if m.probe.timer != nil {
		m.probe.timer.Stop() // an on-demand probe came first: one schedule only
	}
	m.probe.timer = time.AfterFunc(m.probe.backoff, func() { h.probeAside(m) })
}

// reachable records that m's service answered: to a tool call that
// succeeded, or to a probe. The caller must not hold m.mu.
func (h *Host) reachable(m *managed, how string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.probe.at = time.Now()
	h.reachableLocked(m, how)
}

func (h *Host) reachableLocked(m *managed, how string) {
	if m.status == StatusUnreachable {
		m.status, m.reason = StatusReady, ""
		h.log.Info("plugin reachable again", "plugin", m.name, "by", how)
	}
	m.probe.backoff = 0
	if m.probe.timer != nil {
		m.probe.timer.Stop()
		m.probe.timer = nil
	}
}

// secrets are the values a probe's reason must not show: those of m's secret
// settings, and the credentials its plain settings' URLs carry. The caller
// holds m.mu.
func (m *managed) secrets() []string {
	if m.desc == nil {
		return nil
	}
	var out []string
	for _, s := range m.desc.Settings {
		v, _ := lookup(m.env, EnvPrefix(m.name)+s.Key)
		parts := redact.Secrets(v)
		if s.Secret {
			parts = []string{v}
		}
		for _, p := range parts {
			// Shorter values would blank out ordinary words.
			if len(p) >= 4 {
				out = append(out, p)
			}
		}
	}
	return out
}

// scrub blanks every secret out of msg, longest first, so that a secret
// inside another leaves no part of that one.
func scrub(msg string, secrets []string) string {
	secrets = slices.Clone(secrets)
	slices.SortStableFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "[secret]")
	}
	return msg
}

// stopProbes cancels the background probes; Close waits for those running.
func (h *Host) stopProbes() {
	h.cancel()
	for _, m := range h.plugins {
		m.mu.Lock()
		if m.probe.timer != nil {
			m.probe.timer.Stop()
			m.probe.timer = nil
		}
		m.mu.Unlock()
	}
	h.probing.Wait()
}

// unreachableReason is how a tool of an unreachable plugin is listed.
func unreachableReason(plugin, reason string) string {
	return fmt.Sprintf("plugin %s is unreachable: %s", plugin, reason)
}
