// Package fakeserver holds what the fake model servers of ollamatest and
// openaitest share: the script of replies, the HTTP server that can come back
// where clients look, and waiting that ends when the client goes away.
package fakeserver

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// Script hands out scripted replies in order, then asks a handler. It is
// safe for concurrent use.
type Script[Req, Rep any] struct {
	mu      sync.Mutex
	replies []Rep
	handle  func(Req) Rep
}

// NewScript starts a script with replies.
func NewScript[Req, Rep any](replies []Rep) *Script[Req, Rep] {
	return &Script[Req, Rep]{replies: slices.Clone(replies)}
}

// Push appends replies to the script.
func (s *Script[Req, Rep]) Push(r ...Rep) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, r...)
}

// Handle sets a function that answers whenever the script is empty.
func (s *Script[Req, Rep]) Handle(f func(Req) Rep) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handle = f
}

// Next takes the reply for req: the head of the script, else the Handle
// function's answer (called without the lock, so that it may Push). ok is
// false when there is neither.
func (s *Script[Req, Rep]) Next(req Req) (reply Rep, ok bool) {
	s.mu.Lock()
	if len(s.replies) > 0 {
		r := s.replies[0]
		s.replies = s.replies[1:]
		s.mu.Unlock()
		return r, true
	}
	f := s.handle
	s.mu.Unlock()
	if f == nil {
		return reply, false
	}
	return f(req), true
}

// Listen listens on addr (host:port), so that a fake can start, or come
// back, where clients already look.
func Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("fake model server: %v", err)
	}
	return ln
}

// Start serves h on ln, or on a port of its own when ln is nil. Every
// request body is read to its end and closed, so that a handler that stops
// reading early never keeps a connection (and Close) waiting.
func Start(ln net.Listener, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			_, _ = io.Copy(io.Discard, r.Body)
			_ = r.Body.Close()
		}()
		h.ServeHTTP(w, r)
	}))
	if ln != nil {
		_ = srv.Listener.Close()
		srv.Listener = ln
	}
	srv.Start()
	return srv
}

// Wait waits d, and reports false if the client went away or quit closed
// first.
func Wait(r *http.Request, quit <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-quit:
		return false
	}
}

// WriteJSON answers with status and v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
