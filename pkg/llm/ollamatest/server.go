// Package ollamatest provides a fake Ollama server for tests: it speaks
// /api/chat from a script and records every request.
//
// Requests are decoded into, and replies encoded from, the ollama api
// package's own types, so the wire format cannot drift from the client's.
package ollamatest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
)

// Defaults for the figures a Reply leaves at zero.
const (
	DefaultPromptTokens     = 12
	DefaultCompletionTokens = 7
	DefaultTotalDuration    = 5 * time.Millisecond
)

// Version is what GET /api/version reports.
const Version = "0.0.0-ollamatest"

// Reply is one scripted answer to POST /api/chat.
type Reply struct {
	Content          string        // the assistant message content
	Status           int           // non-zero: answer with this HTTP status and {"error": Error}
	Error            string        // the error text for Status; defaults to the status text
	Empty            bool          // 200 with an empty body
	NotDone          bool          // final line has done=false
	Delay            time.Duration // wait before answering; ends early if the client goes away
	PromptTokens     int           // prompt_eval_count; 0 means DefaultPromptTokens
	CompletionTokens int           // eval_count; 0 means DefaultCompletionTokens
	TotalDuration    time.Duration // total_duration; 0 means DefaultTotalDuration
}

// Server is a running fake Ollama. It is safe for concurrent use.
type Server struct {
	URL string // base URL, e.g. http://127.0.0.1:PORT

	srv       *httptest.Server
	quit      chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	script   []Reply
	handle   func(api.ChatRequest) Reply
	requests []api.ChatRequest
	models   map[string]bool // nil: every model name is known
}

// New starts a fake Ollama that answers /api/chat with script, in order. It is
// closed when the test ends.
func New(t testing.TB, script ...Reply) *Server {
	t.Helper()
	s := &Server{
		quit:   make(chan struct{}),
		script: slices.Clone(script),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat", s.chat)
	mux.HandleFunc("POST /api/show", s.show)
	mux.HandleFunc("GET /api/tags", s.tags)
	mux.HandleFunc("GET /api/version", s.version)
	mux.HandleFunc("/{$}", s.root)
	s.srv = httptest.NewServer(drain(mux))
	s.URL = s.srv.URL
	t.Cleanup(s.Close)
	return s
}

// Push appends replies to the script.
func (s *Server) Push(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, r...)
}

// Handle sets a function that answers /api/chat whenever the script is
// empty.
func (s *Server) Handle(f func(req api.ChatRequest) Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handle = f
}

// Requests returns copies of every /api/chat request received, in order.
func (s *Server) Requests() []api.ChatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.ChatRequest, len(s.requests))
	for i, r := range s.requests {
		out[i] = copyRequest(r)
	}
	return out
}

// Models sets the models the server has: /api/show, /api/tags and /api/chat
// answer as Ollama does for a model that is not pulled (404) for any other
// name. Until Models is called every name is known; Models() with no names
// makes every model missing.
func (s *Server) Models(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = make(map[string]bool, len(names))
	for _, n := range names {
		s.models[n] = true
	}
}

// Close stops the server. Requests still waiting out a Delay end at once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.quit)
		s.srv.Close()
	})
}

// drain reads and closes every request body, so that a handler that stops
// reading early never keeps a connection (and Close) waiting.
func drain(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			_, _ = io.Copy(io.Discard, r.Body)
			_ = r.Body.Close()
		}()
		h.ServeHTTP(w, r)
	})
}

func (s *Server) known(model string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.models == nil || s.models[model]
}

// next takes the reply for req: the head of the script, else the Handle
// function's answer (called without the lock, so it may call Push).
func (s *Server) next(req api.ChatRequest) Reply {
	s.mu.Lock()
	if len(s.script) > 0 {
		r := s.script[0]
		s.script = s.script[1:]
		s.mu.Unlock()
		return r
	}
	f := s.handle
	s.mu.Unlock()
	if f == nil {
		return Reply{Status: http.StatusInternalServerError, Error: "ollamatest: script exhausted"}
	}
	return f(copyRequest(req))
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req api.ChatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "ollamatest: invalid chat request: "+err.Error())
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, copyRequest(req))
	s.mu.Unlock()

	if !s.known(req.Model) {
		// The text real Ollama sends for a model that is not pulled.
		writeError(w, http.StatusNotFound, fmt.Sprintf("model %q not found, try pulling it first", req.Model))
		return
	}

	reply := s.next(req)
	if reply.Delay > 0 {
		t := time.NewTimer(reply.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-s.quit:
			t.Stop()
			return
		}
	}
	switch {
	case reply.Status != 0:
		msg := reply.Error
		if msg == "" {
			msg = http.StatusText(reply.Status)
		}
		writeError(w, reply.Status, msg)
		return
	case reply.Empty:
		w.WriteHeader(http.StatusOK)
		return
	}

	final := api.ChatResponse{
		Model:      req.Model,
		CreatedAt:  time.Now().UTC(),
		Message:    api.Message{Role: "assistant", Content: reply.Content},
		Done:       !reply.NotDone,
		DoneReason: "stop",
		Metrics: api.Metrics{
			TotalDuration:   or(reply.TotalDuration, DefaultTotalDuration),
			PromptEvalCount: or(reply.PromptTokens, DefaultPromptTokens),
			EvalCount:       or(reply.CompletionTokens, DefaultCompletionTokens),
		},
	}
	if reply.NotDone {
		final.DoneReason = ""
	}

	// A nil Stream means streaming, as in Ollama: then the content comes in
	// one chunk and the figures in a final chunk of their own.
	if req.Stream == nil || *req.Stream {
		w.Header().Set("Content-Type", "application/x-ndjson")
		chunk := api.ChatResponse{Model: req.Model, CreatedAt: final.CreatedAt, Message: final.Message}
		final.Message.Content = ""
		writeLines(w, chunk, final)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	writeLines(w, final)
}

func (s *Server) show(w http.ResponseWriter, r *http.Request) {
	var req api.ShowRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "ollamatest: invalid show request: "+err.Error())
		return
	}
	name := req.Model
	if name == "" {
		//lint:ignore SA1019 older clients still send the deprecated field
		name = req.Name
	}
	if !s.known(name) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", name))
		return
	}
	writeJSON(w, http.StatusOK, api.ShowResponse{
		Details: api.ModelDetails{
			Format:            "gguf",
			Family:            "ollamatest",
			Families:          []string{"ollamatest"},
			ParameterSize:     "1B",
			QuantizationLevel: "Q4_K_M",
		},
		ModelInfo: map[string]any{"general.architecture": "ollamatest"},
	})
}

func (s *Server) tags(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	names := slices.Sorted(maps.Keys(s.models))
	s.mu.Unlock()
	list := api.ListResponse{Models: []api.ListModelResponse{}}
	for _, n := range names {
		list.Models = append(list.Models, api.ListModelResponse{
			Name:       n,
			Model:      n,
			ModifiedAt: time.Now().UTC(),
			Size:       1 << 30,
			Digest:     fmt.Sprintf("%064x", len(n)),
		})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": Version})
}

func (s *Server) root(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "Ollama is running")
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeLines writes one JSON value per line, as Ollama's chat endpoint does.
func writeLines(w http.ResponseWriter, vs ...any) {
	enc := json.NewEncoder(w)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// copyRequest copies what a test might modify, so recorded requests stay as
// received.
func copyRequest(r api.ChatRequest) api.ChatRequest {
	r.Messages = slices.Clone(r.Messages)
	r.Format = slices.Clone(r.Format)
	r.Tools = slices.Clone(r.Tools)
	r.Options = maps.Clone(r.Options)
	return r
}
