// Package ollamatest provides a fake Ollama server for tests: it speaks
// /api/chat from a script and records every request.
//
// Requests are decoded into, and replies encoded from, the ollama api
// package's own types, so the wire format cannot drift from the client's.
package ollamatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/internal/fakeserver"
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
	// Repeat > 0 sends Content as that many done=false lines, then a final
	// line with no content, whatever the request's stream setting: a server
	// that streams a reply the client asked for whole, or streams a huge one.
	Repeat int
	// Line > 0 sends one line of that many bytes and no newline: a chat
	// response whose content string never ends.
	Line int
	// Drip > 0 sends the reply one byte at a time, this long apart, headers
	// with the first: a server that answers, but slower than the client
	// waits. It stops once the client is gone.
	Drip time.Duration
}

// Response is what the server sent for one /api/chat request, so that a test
// can tell whether the client read everything or went away first.
type Response struct {
	Bytes    int64 // body bytes written (accepted by the connection)
	Complete bool  // the whole reply was written
	Ended    bool  // the handler has returned: Bytes and Complete are final
}

// Server is a running fake Ollama. It is safe for concurrent use.
type Server struct {
	URL string // base URL, e.g. http://127.0.0.1:PORT

	srv       *httptest.Server
	quit      chan struct{}
	closeOnce sync.Once

	script *fakeserver.Script[api.ChatRequest, Reply]

	mu       sync.Mutex
	requests []api.ChatRequest
	sent     []Response      // one per request, same index
	models   map[string]bool // nil: every model name is known

	cost    *Cost               // nil: replies cost nothing (see SetCost)
	prompts map[string][]string // per model, the previous prompt's messages as rendered
	costs   []CallCost          // one per call under the cost model
}

// New starts a fake Ollama that answers /api/chat with script, in order. It is
// closed when the test ends.
func New(t testing.TB, script ...Reply) *Server {
	t.Helper()
	return start(t, nil, script...)
}

// NewAt is New listening on addr (host:port): the fake can start where a
// client already looks, as Ollama started after the daemon.
func NewAt(t testing.TB, addr string, script ...Reply) *Server {
	t.Helper()
	return start(t, fakeserver.Listen(t, addr), script...)
}

// start serves on ln, or on a port of its own when ln is nil.
func start(t testing.TB, ln net.Listener, script ...Reply) *Server {
	s := &Server{
		quit:   make(chan struct{}),
		script: fakeserver.NewScript[api.ChatRequest](script),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat", s.chat)
	mux.HandleFunc("POST /api/show", s.show)
	mux.HandleFunc("GET /api/tags", s.tags)
	mux.HandleFunc("GET /api/version", s.version)
	mux.HandleFunc("/{$}", s.root)
	s.srv = fakeserver.Start(ln, mux)
	s.URL = s.srv.URL
	t.Cleanup(s.Close)
	return s
}

// Push appends replies to the script.
func (s *Server) Push(r ...Reply) { s.script.Push(r...) }

// Handle sets a function that answers /api/chat whenever the script is
// empty.
func (s *Server) Handle(f func(req api.ChatRequest) Reply) { s.script.Handle(f) }

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

// Responses returns what was sent for each /api/chat request, in the order of
// Requests. A response still being written has Ended false.
func (s *Server) Responses() []Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
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

func (s *Server) known(model string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.models == nil || s.models[model]
}

// next takes the reply for req: the head of the script, else the Handle
// function's answer, given a copy of req.
func (s *Server) next(req api.ChatRequest) Reply {
	if r, ok := s.script.Next(copyRequest(req)); ok {
		return r
	}
	return Reply{Status: http.StatusInternalServerError, Error: "ollamatest: script exhausted"}
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req api.ChatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "ollamatest: invalid chat request: "+err.Error())
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, copyRequest(req))
	s.sent = append(s.sent, Response{})
	slot := len(s.sent) - 1
	s.mu.Unlock()
	cw := &countingWriter{ResponseWriter: w}
	w = cw
	defer func() {
		s.mu.Lock()
		s.sent[slot] = Response{Bytes: cw.n, Complete: cw.complete, Ended: true}
		s.mu.Unlock()
	}()

	if !s.known(req.Model) {
		// The text real Ollama sends for a model that is not pulled.
		writeError(w, http.StatusNotFound, fmt.Sprintf("model %q not found, try pulling it first", req.Model))
		cw.complete = true
		return
	}

	reply := s.next(req)
	if !s.wait(r, reply.Delay) {
		return
	}
	switch {
	case reply.Status != 0:
		msg := reply.Error
		if msg == "" {
			msg = http.StatusText(reply.Status)
		}
		writeError(w, reply.Status, msg)
		cw.complete = true
		return
	case reply.Empty:
		w.WriteHeader(http.StatusOK)
		cw.complete = true
		return
	case reply.Line > 0:
		w.Header().Set("Content-Type", "application/x-ndjson")
		cw.complete = s.endlessLine(cw, r, req.Model, reply.Line)
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

	if c, ok := s.costModel(); ok && reply.Repeat == 0 && reply.Drip == 0 {
		cw.complete = s.serveCost(cw, r, req, reply, final, c)
		return
	}

	if reply.Repeat > 0 {
		w.Header().Set("Content-Type", "application/x-ndjson")
		chunk := api.ChatResponse{Model: req.Model, CreatedAt: final.CreatedAt, Message: final.Message}
		final.Message.Content = ""
		cw.complete = s.repeat(cw, r, chunk, reply.Repeat) && writeLines(w, final)
		return
	}

	// A nil Stream means streaming, as in Ollama: then the content comes in
	// one chunk and the figures in a final chunk of their own.
	lines := []any{final}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if req.Stream == nil || *req.Stream {
		w.Header().Set("Content-Type", "application/x-ndjson")
		chunk := api.ChatResponse{Model: req.Model, CreatedAt: final.CreatedAt, Message: final.Message}
		final.Message.Content = ""
		lines = []any{chunk, final}
	}
	if reply.Drip > 0 {
		cw.complete = s.drip(cw, r, lines, reply.Drip)
		return
	}
	cw.complete = writeLines(w, lines...)
}

// wait waits d, and reports false if the client went away or the server is
// closing first.
func (s *Server) wait(r *http.Request, d time.Duration) bool { return fakeserver.Wait(r, s.quit, d) }

// drip writes lines as writeLines does, one byte every pause, and reports
// whether every byte went out.
func (s *Server) drip(w *countingWriter, r *http.Request, lines []any, pause time.Duration) bool {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	for _, v := range lines {
		if err := enc.Encode(v); err != nil {
			return false
		}
	}
	for i, b := range body.Bytes() {
		if i > 0 && !s.wait(r, pause) {
			return false
		}
		if w.send([]byte{b}) != nil {
			return false
		}
	}
	return true
}

// repeat writes chunk n times, one line each, and reports whether every line
// went out. It stops as soon as the client is gone.
func (s *Server) repeat(w *countingWriter, r *http.Request, chunk api.ChatResponse, n int) bool {
	line, err := json.Marshal(chunk)
	if err != nil {
		return false
	}
	line = append(line, '\n')
	for range n {
		if s.gone(r) || w.send(line) != nil {
			return false
		}
	}
	return true
}

// endlessLine writes size bytes of one chat response whose content string
// never closes, and no newline. It stops as soon as the client is gone.
func (s *Server) endlessLine(w *countingWriter, r *http.Request, model string, size int) bool {
	head := fmt.Sprintf(`{"model":%q,"created_at":%q,"message":{"role":"assistant","content":"`,
		model, time.Now().UTC().Format(time.RFC3339Nano))
	fill := bytes.Repeat([]byte("x"), 32<<10)
	block := []byte(head)
	for left := size; left > 0; block = fill {
		if len(block) > left {
			block = block[:left]
		}
		if s.gone(r) || w.send(block) != nil {
			return false
		}
		left -= len(block)
	}
	return true
}

// gone reports whether the client went away or the server is closing.
func (s *Server) gone(r *http.Request) bool {
	select {
	case <-r.Context().Done():
		return true
	case <-s.quit:
		return true
	default:
		return false
	}
}

// countingWriter counts the body bytes the connection accepted.
type countingWriter struct {
	http.ResponseWriter
	n        int64
	complete bool
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

// Flush lets writeLines flush through the wrapper.
func (w *countingWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// send writes p and flushes it, so that a client that went away shows as an
// error now rather than when the buffer fills.
func (w *countingWriter) send(p []byte) error {
	if _, err := w.Write(p); err != nil {
		return err
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
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
	fakeserver.WriteJSON(w, http.StatusOK, api.ShowResponse{
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
	fakeserver.WriteJSON(w, http.StatusOK, list)
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	fakeserver.WriteJSON(w, http.StatusOK, map[string]string{"version": Version})
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
	fakeserver.WriteJSON(w, status, map[string]string{"error": msg})
}

// writeLines writes one JSON value per line, as Ollama's chat endpoint does,
// and reports whether every line was written.
func writeLines(w http.ResponseWriter, vs ...any) bool {
	enc := json.NewEncoder(w)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return false
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	return true
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
