package plugins

import (
	"context"
	"fmt"
	"time"
)

// A plugin's lifecycle, with Options.Idle > 0:
//
//   - At Start a plugin binary whose description is in the describe cache
//     (cache.go) is not started: its tools join the union from the cache.
//     One that is not is started and describes itself, as are MCP servers.
//   - A plugin on standby (a required setting missing, or refused) is stopped
//     right after it described itself: it cannot work until its settings
//     change, which takes a restart of the daemon.
//   - A ready plugin that is not running is started by the first call of one
//     of its tools, or by the first turn whose context it provides. Every
//     caller that needs it meanwhile waits for that one start, each within
//     its own deadline; a caller that gives up does not cancel the start.
//   - A plugin none has used for Options.Idle is stopped. A call in progress
//     keeps it running. Health probes and tool listings are not uses: they
//     never start a plugin nor keep one running. A plugin stopped while its
//     probe said unreachable is ready again: the answer is stale, and its next
//     start is probed afresh.
//
// With Options.Idle == 0 every plugin is started at Start and kept running,
// standby ones included, as before idle stop existed.

// Plugin states, as /v1/plugins shows them beside the status: whether a
// process runs.
const (
	StateStarting    = "starting"
	StateRunning     = "running"
	StateIdleStopped = "idle-stopped" // ready, not running; starts on first use
	StateStandby     = "standby"
	StateFailed      = "failed" // could not start, or exited; see the reason
)

// startFlight is one start of a plugin that callers wait for.
type startFlight struct {
	done chan struct{}
	err  error
}

// stateLocked is m's state. The caller holds m.mu.
func (m *managed) stateLocked() string {
	switch {
	case m.status == StatusFailed:
		return StateFailed
	case m.status == StatusStandby:
		return StateStandby
	case m.status == StatusStarting || m.flight != nil:
		return StateStarting
	case m.proc != nil && !m.proc.exited():
		return StateRunning
	case m.status == StatusRestarting:
		return StateFailed // crashed, or an on-demand start failed: the next use tries again
	}
	return StateIdleStopped
}

// fromCache sets m's description from the describe cache, leaving it
// stopped, and reports whether it could.
func (h *Host) fromCache(m *managed) bool {
	if h.opts.Idle <= 0 || m.mcp != nil || h.cache == nil {
		return false
	}
	desc := h.cache.get(m.path, fileIdentity(m.path), m.env, m.name)
	if desc == nil {
		return false
	}
	m.mu.Lock()
	m.desc = desc
	m.offered, m.listedAt = desc.Tools, true
	m.status, m.reason = StatusReady, ""
	if problems := settingProblems(m.name, desc, m.env); len(problems) > 0 {
		m.status, m.reason = StatusStandby, joinProblems(problems)
	}
	m.probe.has = desc.HasHealth
	m.providers = map[string]*provider{}
	for _, c := range desc.Contexts {
		m.providers[c.Key] = &provider{}
	}
	st, reason := m.status, m.reason
	m.mu.Unlock()
	h.log.Info("plugin described from cache", "plugin", m.name, "version", desc.Version, "tools", len(desc.Tools), "status", st, "reason", reason)
	return true
}

// running returns m's process, starting it if it is not running, and counts
// a use of it: the caller must call h.release(m) when done with it. A plugin
// that crashed is started again with a growing pause between attempts, so
// one that crashes at once is not respawned in a loop.
func (h *Host) running(ctx context.Context, m *managed) (*process, error) {
	for {
		m.mu.Lock()
		if proc := m.proc; proc != nil && !proc.exited() {
			m.inUse++
			m.mu.Unlock()
			return proc, nil
		}
		f := m.flight
		if f == nil {
			if err := h.startableLocked(m); err != nil {
				m.mu.Unlock()
				return nil, err
			}
			f = &startFlight{done: make(chan struct{})}
			m.flight = f
			go h.fly(m, f)
		}
		m.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("plugin %s was still starting when the time for this use ran out: %w", m.name, ctx.Err())
		}
		if f.err != nil {
			return nil, f.err
		}
		m.mu.Lock()
		st, reason := m.status, m.reason
		m.mu.Unlock()
		if st == StatusStandby {
			return nil, fmt.Errorf("plugin %s is on standby: %s", m.name, reason)
		}
		// Loop to take the new process; should it have died already, the
		// crash backoff decides whether it is tried again.
	}
}

// startableLocked says why m cannot be started now, or nil; it records a
// crash it finds. The caller holds m.mu.
func (h *Host) startableLocked(m *managed) error {
	if h.ctx.Err() != nil {
		return fmt.Errorf("plugin %s: the daemon is shutting down", m.name)
	}
	switch m.status {
	case StatusStandby:
		return fmt.Errorf("plugin %s is on standby: %s", m.name, m.reason)
	case StatusFailed:
		return fmt.Errorf("plugin %s failed: %s", m.name, m.reason)
	}
	if m.proc != nil { // died between calls
		h.markCrashedLocked(m, "exited")
	}
	if d := time.Until(m.nextStart); d > 0 {
		return fmt.Errorf("plugin %s crashed and restarts in %s", m.name, d.Round(time.Second))
	}
	if m.status == StatusRestarting {
		m.restarts++ // an idle plugin's start is no restart
	}
	return nil
}

// fly starts m for every caller waiting on f. It runs under the host's
// context, not a caller's: one caller that gives up must not fail the
// others.
func (h *Host) fly(m *managed, f *startFlight) {
	h.log.Info("starting plugin on demand", "plugin", m.name)
	err := h.startPlugin(h.ctx, m)
	m.mu.Lock()
	if err != nil {
		m.status, m.reason = StatusRestarting, "could not be started: "+err.Error()
		switch {
		case m.backoff == 0:
			m.backoff = time.Second
		case m.backoff < time.Minute:
			m.backoff *= 2
		}
		m.nextStart = time.Now().Add(m.backoff)
		f.err = fmt.Errorf("plugin %s could not be started: %w", m.name, err)
	}
	m.flight = nil
	m.mu.Unlock()
	close(f.done)
}

// release ends a use that running counted, and arms m's idle stop.
func (h *Host) release(m *managed) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inUse--
	m.lastUse = time.Now()
	h.armIdleLocked(m)
}

// armIdleLocked makes sure an idle check of m is due; the check itself
// looks at the last use. The caller holds m.mu.
func (h *Host) armIdleLocked(m *managed) {
	if h.opts.Idle <= 0 || m.idleTimer != nil {
		return
	}
	m.idleTimer = time.AfterFunc(h.opts.Idle, func() { h.idleCheck(m) })
}

// idleCheck stops m if nothing used it for Options.Idle.
func (h *Host) idleCheck(m *managed) {
	m.mu.Lock()
	m.idleTimer = nil
	proc := m.proc
	if proc == nil || h.ctx.Err() != nil || m.inUse > 0 {
		m.mu.Unlock() // not running, closing, or in use: release arms it again
		return
	}
	if rest := h.opts.Idle - time.Since(m.lastUse); rest > 0 {
		m.idleTimer = time.AfterFunc(rest, func() { h.idleCheck(m) })
		m.mu.Unlock()
		return
	}
	m.proc = nil // before the stop: its exit is no crash
	if m.status == StatusUnreachable {
		m.status, m.reason = StatusReady, ""
	}
	m.probe.at, m.probe.backoff = time.Time{}, 0
	if m.probe.timer != nil {
		m.probe.timer.Stop()
		m.probe.timer = nil
	}
	m.mu.Unlock()
	h.log.Info("plugin stopped: idle", "plugin", m.name, "idle", h.opts.Idle)
	proc.stop(h.opts.KillGrace)
}

// stopIdleTimers cancels the idle checks; Close stops the processes.
func (h *Host) stopIdleTimers() {
	for _, m := range h.plugins {
		m.mu.Lock()
		if m.idleTimer != nil {
			m.idleTimer.Stop()
			m.idleTimer = nil
		}
		m.mu.Unlock()
	}
}

// Running counts the plugin and MCP server processes running now.
func (h *Host) Running() int {
	n := 0
	for _, m := range h.plugins {
		if m.alive() != nil {
			n++
		}
	}
	return n
}
