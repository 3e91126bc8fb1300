package server

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm"
)

// TestTurnEnd: the turn's deadline is its cause only while the request's own
// context lives; the daemon's shutdown and the client leaving win over it.
func TestTurnEnd(t *testing.T) {
	loopErr := fmt.Errorf("step 1: model call: %w", context.DeadlineExceeded)
	tests := []struct {
		name     string
		limit    time.Duration
		end      error // how the request's context ends after the deadline; nil: it lives
		cancel   bool
		err      error
		want     error
		timedOut bool
	}{
		{name: "deadline", limit: time.Nanosecond, err: loopErr, timedOut: true},
		{name: "deadline, then shutdown", limit: time.Nanosecond, cancel: true, end: ErrShuttingDown, err: loopErr, want: ErrShuttingDown},
		{name: "deadline, then the client left", limit: time.Nanosecond, cancel: true, err: loopErr, want: loopErr},
		{name: "shutdown", limit: time.Hour, cancel: true, end: ErrShuttingDown, err: context.Canceled, want: ErrShuttingDown},
		{name: "the client left", limit: time.Hour, cancel: true, err: context.Canceled, want: context.Canceled},
		{name: "a failure of its own", limit: time.Hour, err: loopErr, want: loopErr},
		{name: "an answer past the deadline", limit: time.Nanosecond, err: nil, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			r := httptest.NewRequest("POST", "/v1/chat", nil).WithContext(base)
			s := &Server{Limits: Limits{TurnTimeout: tc.limit}}
			turnCtx, stop := s.turnContext(r)
			defer stop()
			if tc.limit == time.Nanosecond {
				<-turnCtx.Done()
			}
			if tc.cancel {
				cancel(tc.end)
			}
			got := turnEnd(r, turnCtx, tc.err)
			var timeout *TurnTimeoutError
			switch {
			case tc.timedOut:
				if !errors.As(got, &timeout) || timeout.Limit != tc.limit {
					t.Errorf("turnEnd = %v, want the turn's timeout", got)
				}
			case got != tc.want:
				t.Errorf("turnEnd = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTurnTimeoutMessage(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Minute:        "within 10m (MMCP_TURN_TIMEOUT)",
		time.Hour:               "within 1h (MMCP_TURN_TIMEOUT)",
		90 * time.Minute:        "within 1h30m (MMCP_TURN_TIMEOUT)",
		1500 * time.Millisecond: "within 1.5s (MMCP_TURN_TIMEOUT)",
		300 * time.Millisecond:  "within 300ms (MMCP_TURN_TIMEOUT)",
	} {
		msg := (&TurnTimeoutError{Limit: d}).Error()
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %q lacks %q", d, msg, want)
		}
		if status, code, retryable := turnError(&TurnTimeoutError{Limit: d}); status != 504 || code != "timeout" || !retryable {
			t.Errorf("turnError = %d %s %v", status, code, retryable)
		}
	}
}

// TestContextTooLongIsNoBug: Ollama refusing a prompt as longer than its
// context (a task request's, which has no window) is the settings' matter,
// not internal.
func TestContextTooLongIsNoBug(t *testing.T) {
	err := fmt.Errorf("model call: %w", llm.ErrContextTooLong)
	if status, code, retryable := turnError(err); status != 500 || code != "context_overflow" || retryable {
		t.Errorf("turnError = %d %s %v", status, code, retryable)
	}
}
