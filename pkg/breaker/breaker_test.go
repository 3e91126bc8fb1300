package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/breaker"
)

var (
	errBoom    = errors.New("plugin crashed")
	errOnceful = errors.New("not found") // stands for an error the tool meant
)

func newSet(failures uint32, cooldown time.Duration) *breaker.Set {
	return breaker.New(breaker.Settings{Failures: failures, Cooldown: cooldown},
		func(err error) bool { return errors.Is(err, errOnceful) },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func fail(err error) func() (string, error) { return func() (string, error) { return "", err } }
func ok() (string, error)                   { return "fine", nil }

func TestOpensAfterConsecutiveFailures(t *testing.T) {
	s := newSet(3, time.Hour)
	for i := range 2 {
		if _, err := s.Execute("tmdb_search", fail(errBoom)); !errors.Is(err, errBoom) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if open, _ := s.Open("tmdb_search"); open {
		t.Fatal("open after 2 of 3 failures")
	}
	s.Execute("tmdb_search", fail(errBoom))
	open, why := s.Open("tmdb_search")
	if !open || !strings.Contains(why, "paused after repeated failures (3 consecutive failures)") || !strings.Contains(why, "tried again in ") {
		t.Fatalf("open=%v why=%q", open, why)
	}
	ran := false
	_, err := s.Execute("tmdb_search", func() (string, error) { ran = true; return ok() })
	if ran || !errors.Is(err, breaker.ErrOpen) || !strings.Contains(err.Error(), "tool tmdb_search is paused") {
		t.Errorf("open breaker: ran=%v err=%v", ran, err)
	}
	// Breakers are per tool.
	if out, err := s.Execute("radarr_add", ok); err != nil || out != "fine" {
		t.Errorf("another tool: %q %v", out, err)
	}
	if got := s.State("tmdb_search"); got != "open" {
		t.Errorf("state = %s", got)
	}
}

func TestSuccessResetsTheCount(t *testing.T) {
	s := newSet(2, time.Hour)
	for range 5 {
		s.Execute("t", fail(errBoom))
		s.Execute("t", ok)
	}
	if open, _ := s.Open("t"); open {
		t.Error("alternating failures opened the breaker")
	}
}

func TestExcludedErrorsDoNotCount(t *testing.T) {
	s := newSet(2, time.Hour)
	for _, err := range []error{errOnceful, context.Canceled, fmt.Errorf("call: %w", context.Canceled), errOnceful, context.Canceled} {
		if _, got := s.Execute("t", fail(err)); !errors.Is(got, err) {
			t.Fatalf("error changed: %v", got)
		}
	}
	if open, _ := s.Open("t"); open {
		t.Error("tool errors or cancellations opened the breaker")
	}
}

func TestHalfOpensAfterCooldown(t *testing.T) {
	s := newSet(1, 20*time.Millisecond)
	s.Execute("t", fail(errBoom))
	if open, _ := s.Open("t"); !open {
		t.Fatal("not open")
	}
	for deadline := time.Now().Add(5 * time.Second); s.State("t") == "open"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never half-opened")
		}
	}
	if s.State("t") != "half-open" {
		t.Fatalf("state = %s", s.State("t"))
	}
	// A failed trial opens it again; a good one closes it.
	s.Execute("t", fail(errBoom))
	if s.State("t") != "open" {
		t.Fatalf("after a failed trial: %s", s.State("t"))
	}
	for deadline := time.Now().Add(5 * time.Second); s.State("t") == "open"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never half-opened again")
		}
	}
	if _, err := s.Execute("t", ok); err != nil || s.State("t") != "closed" {
		t.Errorf("after a good trial: %v %s", err, s.State("t"))
	}
}
