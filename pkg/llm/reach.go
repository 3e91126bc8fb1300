package llm

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// reachability is what the client's calls, chats and readiness checks alike,
// last found about reaching the server: a fresh "down" spares chats their
// retries, and each change is logged once.
type reachability struct {
	mu       sync.Mutex
	state    reachState
	since    time.Time // when state began
	lastDown time.Time // when a call last found the server unreachable
}

type reachState int

const (
	reachUnknown reachState = iota // no call has finished yet
	reachUp
	reachDown
)

// observe records what a finished call says about reaching the server. A
// call that ended by its caller's context, or by its own timeout, says
// nothing either way; any answer from the server, an error status included,
// says it is reachable.
func (c *Client) observe(err error) {
	down := unreachable(err)
	if err != nil && !down && (errors.Is(err, ErrTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	r := &c.reach
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if down {
		r.lastDown = now
	}
	was := r.state
	switch {
	case down && was != reachDown:
		r.state, r.since = reachDown, now
		// The first finding is the daemon's to report (its start-up check
		// says what to do); only a server lost while in use is news here.
		if was == reachUp {
			c.log.LogAttrs(context.Background(), slog.LevelWarn, "Ollama is unreachable",
				slog.String("ollama", c.host), slog.String("model", c.model), slog.String("problem", err.Error()))
		}
	case !down && was != reachUp:
		r.state = reachUp
		if was == reachDown {
			c.log.LogAttrs(context.Background(), slog.LevelInfo, "Ollama is reachable again",
				slog.String("ollama", c.host), slog.String("model", c.model), slog.Duration("down_for", now.Sub(r.since).Round(time.Millisecond)))
		}
		r.since = now
	}
}

// knownDown reports whether the last call found the server unreachable, and
// did so within the freshness: retrying now would only spend the caller's
// time.
func (c *Client) knownDown() bool {
	r := &c.reach
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state == reachDown && time.Since(r.lastDown) < c.downFresh
}
