package plugins

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// ContextOptions bound the context providers run before each turn.
type ContextOptions struct {
	PerProvider  time.Duration // one provider's time
	Overall      time.Duration // all of them together
	MaxChars     int           // one provider's text
	FailureLimit int           // consecutive failures before a provider is skipped
	SkipFor      time.Duration // how long it is skipped then
}

// DefaultContextOptions are the limits when the daemon's settings leave them.
var DefaultContextOptions = ContextOptions{
	PerProvider:  300 * time.Millisecond,
	Overall:      800 * time.Millisecond,
	MaxChars:     1000,
	FailureLimit: 3,
	SkipFor:      5 * time.Minute,
}

// provider is the health record of one context provider.
type provider struct {
	failures  int
	skipUntil time.Time
}

type providerResult struct {
	plugin, key, text string
}

// RuntimeContext runs the context providers of every ready plugin at once and
// returns what finished in time, one "plugin.key: text" line each, sorted. A
// slow provider costs its own line, never the others': results are collected
// as they arrive until the overall deadline.
func (h *Host) RuntimeContext(ctx context.Context) string {
	o := h.opts.Context
	ctx, cancel := context.WithTimeout(ctx, o.Overall)
	defer cancel()
	results := make(chan providerResult)
	var wg sync.WaitGroup
	for _, m := range h.plugins {
		m.mu.Lock()
		// A plugin that crashed is started again for its providers as for
		// its tools; one on standby or failed is left alone.
		usable := m.status == StatusReady || m.status == StatusRestarting
		var keys []string
		if usable {
			for key, p := range m.providers {
				if time.Now().After(p.skipUntil) {
					keys = append(keys, key)
				}
			}
		}
		m.mu.Unlock()
		for _, key := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				proc, err := h.running(ctx, m)
				if err != nil {
					return
				}
				text, err := h.provide(ctx, m, proc, key)
				h.release(m)
				if err != nil {
					return
				}
				select {
				case results <- providerResult{m.name, key, text}:
				case <-ctx.Done():
				}
			}()
		}
	}
	go func() { wg.Wait(); close(results) }()
	var lines []string
	for {
		select {
		case r, ok := <-results:
			if !ok {
				sort.Strings(lines)
				return strings.Join(lines, "\n")
			}
			lines = append(lines, fmt.Sprintf("%s.%s: %s", r.plugin, r.key, r.text))
		case <-ctx.Done():
			sort.Strings(lines)
			return strings.Join(lines, "\n")
		}
	}
}

// provide runs one provider and keeps its health record.
func (h *Host) provide(ctx context.Context, m *managed, proc *process, key string) (string, error) {
	o := h.opts.Context
	pctx, cancel := context.WithTimeout(ctx, o.PerProvider)
	defer cancel()
	resp, err := proc.rpc.Context(pctx, &pluginpb.ContextRequest{Key: key})
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.providers[key]
	if err != nil {
		p.failures++
		if p.failures >= o.FailureLimit {
			p.skipUntil = time.Now().Add(o.SkipFor)
			p.failures = 0
			h.log.Warn("context provider skipped", "plugin", m.name, "key", key, "for", o.SkipFor, "last_error", oneLine(status.Convert(err).Message()))
		}
		return "", err
	}
	p.failures = 0
	return clip(strings.Join(strings.Fields(resp.Text), " "), o.MaxChars), nil
}
