// Package breaker owns the daemon-wide circuit breaker of each tool: a tool
// that keeps failing is taken out of every conversation until a cool-down has
// passed and a trial call succeeds.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Settings are the thresholds shared by every tool's breaker.
type Settings struct {
	Failures uint32        // consecutive failures that open the breaker
	Cooldown time.Duration // how long it stays open before a trial call
}

// ErrOpen is returned, wrapped, for a call refused because the tool's
// breaker is open.
var ErrOpen = errors.New("paused after repeated failures")

// Set holds one breaker per tool name. Safe for concurrent use.
type Set struct {
	settings Settings
	log      *slog.Logger
	// Excluded reports errors that say nothing about the tool's health (the
	// caller's own cancellation, an error the tool returned on purpose): they
	// count neither as failures nor as successes.
	excluded func(error) bool

	mu       sync.Mutex
	breakers map[string]*entry
}

type entry struct {
	cb *gobreaker.CircuitBreaker[string]
	// openedAt is when the breaker last opened; kept here because
	// OnStateChange runs under the breaker's lock and may not ask it.
	mu       sync.Mutex
	openedAt time.Time
}

// New returns a Set. excluded may be nil; the caller's cancellation is always
// excluded.
func New(s Settings, excluded func(error) bool, log *slog.Logger) *Set {
	if log == nil {
		log = slog.Default()
	}
	return &Set{settings: s, excluded: excluded, log: log, breakers: map[string]*entry{}}
}

func (s *Set) get(name string) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.breakers[name]; ok {
		return e
	}
	e := &entry{}
	e.cb = gobreaker.NewCircuitBreaker[string](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Timeout:     s.settings.Cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= s.settings.Failures },
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || (s.excluded != nil && s.excluded(err))
		},
		OnStateChange: func(name string, from, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				e.mu.Lock()
				e.openedAt = time.Now()
				e.mu.Unlock()
			}
			s.log.Warn("tool breaker", "tool", name, "from", from.String(), "to", to.String())
		},
	})
	s.breakers[name] = e
	return e
}

// Execute runs fn behind the named tool's breaker. A refused call returns an
// error wrapping ErrOpen that says when the tool will be tried again.
func (s *Set) Execute(name string, fn func() (string, error)) (string, error) {
	e := s.get(name)
	out, err := e.cb.Execute(fn)
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return "", fmt.Errorf("tool %s is %w; it will be tried again %s", name, ErrOpen, s.retryIn(e))
	}
	return out, err
}

// Open reports whether the named tool's breaker refuses calls now, and if so a
// reason for the model and the API.
func (s *Set) Open(name string) (bool, string) {
	s.mu.Lock()
	e, ok := s.breakers[name]
	s.mu.Unlock()
	if !ok || e.cb.State() != gobreaker.StateOpen {
		return false, ""
	}
	return true, fmt.Sprintf("%s (%d consecutive failures); it will be tried again %s", ErrOpen, s.settings.Failures, s.retryIn(e))
}

func (s *Set) retryIn(e *entry) string {
	e.mu.Lock()
	at := e.openedAt.Add(s.settings.Cooldown)
	e.mu.Unlock()
	if d := time.Until(at); d > 0 {
		return "in " + d.Round(time.Second).String()
	}
	return "on the next call"
}

// State returns the named tool's breaker state as a word: closed, half-open
// or open.
func (s *Set) State(name string) string {
	return s.get(name).cb.State().String()
}
