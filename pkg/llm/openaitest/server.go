// Package openaitest provides a fake OpenAI-compatible model server for
// tests (llama.cpp's llama-server, vLLM, LM Studio): it speaks
// /v1/chat/completions, streamed as Server-Sent Events with the usage event,
// and /v1/models, from a script, and records every request.
//
// Like llama.cpp's server it holds replies to response_format: a schema its
// grammar converter could not handle is refused with llama.cpp's 400, and a
// scripted reply that does not match the schema fails the test (a grammar
// makes that impossible on the real server, so such a script is a test's
// mistake).
package openaitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/mmcpd/mmcpd/pkg/llm/internal/fakeserver"
)

// Model is the one model the server has until Models says otherwise.
const Model = "qwen2.5-7b-instruct"

// Reply is one scripted answer to POST /v1/chat/completions.
type Reply struct {
	Content string
	// Status non-zero answers with this HTTP status and an error object
	// whose message is Error (the status text when empty) and type Type.
	Status int
	Error  string
	Type   string
	// RetryAfter, when set, is sent as the Retry-After header.
	RetryAfter string
	// Delay waits before answering; it ends early if the client goes away.
	Delay time.Duration
	// Pieces splits Content into that many events (0: about 16 bytes each).
	Pieces int
	// Pause waits between two events once the first went out.
	Pause time.Duration
	// Hang sends the first event, then nothing until the client goes away.
	Hang bool
	// StreamError sends an error event after the content instead of the
	// finish: what llama.cpp does when it fails mid-reply.
	StreamError string
	// FinishReason of the last event; empty means "stop".
	FinishReason string
	// NoFinish ends the stream without any finish_reason.
	NoFinish bool
	// PromptTokens and CompletionTokens of the usage; 0 means about a
	// token per 4 characters of the prompt, and one per piece.
	PromptTokens, CompletionTokens int
}

// Request is what the server received in one chat request.
type Request struct {
	Model         string    `json:"model"`
	Messages      []Message `json:"messages"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ResponseFormat *ResponseFormat `json:"response_format"`
	Temperature    *float64        `json:"temperature"`
	// Authorization is the request's header, as sent.
	Authorization string `json:"-"`
}

// Message is one chat message of a request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ResponseFormat is the request's response_format.
type ResponseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// Server is a running fake. It is safe for concurrent use.
type Server struct {
	// URL is the base URL clients are given, ending in /v1.
	URL string

	t         testing.TB
	srv       *httptest.Server
	quit      chan struct{}
	closeOnce sync.Once

	script *fakeserver.Script[Request, Reply]

	mu       sync.Mutex
	requests []Request
	models   []string
	key      string
	nCtx     int           // tokens; 0: no limit
	slots    chan struct{} // nil: no limit
	inFlight int
	maxIn    int
}

// New starts a fake that answers with script, in order; it is closed when the
// test ends.
func New(t testing.TB, script ...Reply) *Server {
	t.Helper()
	return start(t, nil, script...)
}

// NewAt is New listening on addr (host:port), so that a server can come back
// where clients already look.
func NewAt(t testing.TB, addr string, script ...Reply) *Server {
	t.Helper()
	return start(t, fakeserver.Listen(t, addr), script...)
}

func start(t testing.TB, ln net.Listener, script ...Reply) *Server {
	s := &Server{t: t, quit: make(chan struct{}), script: fakeserver.NewScript[Request](script), models: []string{Model}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.listModels)
	s.srv = fakeserver.Start(ln, mux)
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(s.Close)
	return s
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.srv.Listener.Addr().String() }

// Push appends replies to the script.
func (s *Server) Push(r ...Reply) { s.script.Push(r...) }

// Handle sets a function that answers whenever the script is empty.
func (s *Server) Handle(f func(Request) Reply) { s.script.Handle(f) }

// Models sets the models the server has: the list, and the names a chat may
// ask for (any other gets 404, as vLLM and LM Studio answer).
func (s *Server) Models(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = slices.Clone(names)
}

// Key makes the server require "Authorization: Bearer key" (llama-server's
// --api-key), answering 401 otherwise.
func (s *Server) Key(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key = key
}

// ContextSize makes the server refuse, as llama.cpp does, a prompt of more
// than n tokens, counting a token per 4 characters.
func (s *Server) ContextSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nCtx = n
}

// Slots makes the server answer at most n chat requests at once, the others
// waiting their turn, as llama-server's --parallel slots do: a server's
// throughput is bounded, so that more servers carry more.
func (s *Server) Slots(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots = make(chan struct{}, n)
}

// Requests returns every chat request received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// MaxInFlight is the most chat requests the server held at once.
func (s *Server) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn
}

// Close stops the server as if its process died; requests still waiting end
// at once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		// As a process that dies: connections drop before any handler
		// could answer them, so that a client sees a reset, never a reply
		// cut short as if it were whole.
		_ = s.srv.Listener.Close()
		s.srv.CloseClientConnections()
		close(s.quit)
		s.srv.Close()
	})
}

// authorized answers 401 as llama-server does when a key is required and the
// request lacks it.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if key == "" || r.Header.Get("Authorization") == "Bearer "+key {
		return true
	}
	writeError(w, http.StatusUnauthorized, "Invalid API Key", "authentication_error")
	return false
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	s.mu.Lock()
	names := slices.Clone(s.models)
	s.mu.Unlock()
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, n := range names {
		out.Data = append(out.Data, model{ID: n, Object: "model", Created: 1700000000, OwnedBy: "openaitest"})
	}
	fakeserver.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) next(req Request) Reply {
	if r, ok := s.script.Next(req); ok {
		return r
	}
	return Reply{Status: http.StatusInternalServerError, Error: "openaitest: script exhausted"}
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	var req Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "openaitest: invalid request: "+err.Error(), "invalid_request_error")
		return
	}
	req.Authorization = r.Header.Get("Authorization")
	s.mu.Lock()
	s.requests = append(s.requests, req)
	known := slices.Contains(s.models, req.Model)
	nCtx := s.nCtx
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()

	if !known {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model), "NotFoundError")
		return
	}
	var schema *jsonschema.Schema
	if rf := req.ResponseFormat; rf != nil && rf.Type == "json_schema" {
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			writeError(w, http.StatusBadRequest, "\"json_schema\" must contain a \"schema\"", "invalid_request_error")
			return
		}
		var problems []string
		schema, problems = convert(rf.JSONSchema.Schema)
		if len(problems) > 0 {
			// llama.cpp's words when json_schema_to_grammar throws.
			writeError(w, http.StatusBadRequest, "JSON schema conversion failed:\n"+strings.Join(problems, "\n"), "invalid_request_error")
			return
		}
	}
	prompt := 0
	for _, m := range req.Messages {
		prompt += utf8.RuneCountInString(m.Content)
	}
	promptTokens := prompt/4 + 1
	if nCtx > 0 && promptTokens > nCtx {
		// llama.cpp's exceed_context_size_error, with its sizes.
		fakeserver.WriteJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"code": 400, "message": "the request exceeds the available context size, try increasing it",
			"type": "exceed_context_size_error", "n_prompt_tokens": promptTokens, "n_ctx": nCtx,
		}})
		return
	}

	s.mu.Lock()
	slots := s.slots
	s.mu.Unlock()
	if slots != nil {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		case <-r.Context().Done():
			return
		case <-s.quit:
			return
		}
	}
	reply := s.next(req)
	if reply.Delay > 0 && !s.wait(r, reply.Delay) {
		return
	}
	if reply.Status != 0 {
		if reply.RetryAfter != "" {
			w.Header().Set("Retry-After", reply.RetryAfter)
		}
		msg := reply.Error
		if msg == "" {
			msg = http.StatusText(reply.Status)
		}
		typ := reply.Type
		if typ == "" {
			typ = "server_error"
		}
		writeError(w, reply.Status, msg, typ)
		return
	}
	if schema != nil && reply.StreamError == "" && !reply.NoFinish && !reply.Hang {
		if err := valid(schema, reply.Content); err != nil {
			s.t.Errorf("openaitest: the scripted reply %q does not match the request's response_format, which llama.cpp's grammar would never let out: %v", reply.Content, err)
			writeError(w, http.StatusInternalServerError, "openaitest: scripted reply does not match the schema", "server_error")
			return
		}
	}
	if reply.PromptTokens == 0 {
		reply.PromptTokens = promptTokens
	}
	pieces := split(reply.Content, reply.Pieces)
	if reply.CompletionTokens == 0 {
		reply.CompletionTokens = max(len(pieces), 1)
	}
	finish := reply.FinishReason
	if finish == "" {
		finish = "stop"
	}
	if !req.Stream {
		s.whole(w, req, reply, finish)
		return
	}
	s.stream(w, r, req, reply, pieces, finish)
}

// whole answers a request that did not ask for a stream.
func (s *Server) whole(w http.ResponseWriter, req Request, reply Reply, finish string) {
	fakeserver.WriteJSON(w, http.StatusOK, map[string]any{
		"id": "chatcmpl-openaitest", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{
			"index": 0, "message": map[string]any{"role": "assistant", "content": reply.Content}, "finish_reason": finish,
		}},
		"usage": usage(reply),
	})
}

func usage(r Reply) map[string]int {
	return map[string]int{"prompt_tokens": r.PromptTokens, "completion_tokens": r.CompletionTokens, "total_tokens": r.PromptTokens + r.CompletionTokens}
}

// stream writes the reply as chat.completion.chunk events, the way
// llama-server and vLLM do: a role, the content pieces, an empty delta with
// the finish_reason, the usage event when asked, then [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req Request, reply Reply, pieces []string, finish string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	withUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	created := time.Now().Unix()
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id": "chatcmpl-openaitest", "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		}
		if withUsage {
			c["usage"] = nil // as OpenAI's: every event but the last has it null
		}
		return c
	}
	events := []any{chunk(map[string]any{"role": "assistant", "content": ""}, nil)}
	for _, p := range pieces {
		events = append(events, chunk(map[string]any{"content": p}, nil))
	}
	for i, ev := range events {
		if i > 0 && reply.Pause > 0 && !s.wait(r, reply.Pause) {
			return
		}
		if !s.event(w, ev) {
			return
		}
		if reply.Hang {
			<-s.waitGone(r)
			return
		}
	}
	switch {
	case reply.StreamError != "":
		s.event(w, map[string]any{"error": map[string]any{"code": 500, "message": reply.StreamError, "type": "server_error"}})
		return
	case reply.NoFinish:
	default:
		s.event(w, chunk(map[string]any{}, finish))
		if withUsage {
			s.event(w, map[string]any{
				"id": "chatcmpl-openaitest", "object": "chat.completion.chunk", "created": created, "model": req.Model,
				"choices": []any{}, "usage": usage(reply),
			})
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	flush(w)
}

func (s *Server) event(w http.ResponseWriter, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
		return false
	}
	flush(w)
	return true
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// wait waits d, and reports false if the client went away or the server is
// closing first.
func (s *Server) wait(r *http.Request, d time.Duration) bool { return fakeserver.Wait(r, s.quit, d) }

func (s *Server) waitGone(r *http.Request) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		select {
		case <-r.Context().Done():
		case <-s.quit:
		}
		close(done)
	}()
	return done
}

// split cuts content into n pieces on character boundaries (about 16 bytes
// each when n is 0).
func split(content string, n int) []string {
	if content == "" {
		return nil
	}
	if n <= 0 {
		n = (len(content) + 15) / 16
	}
	size := max((len(content)+n-1)/n, 1)
	var out []string
	for len(content) > 0 {
		end := min(size, len(content))
		for end < len(content) && !utf8.RuneStart(content[end]) {
			end++
		}
		out = append(out, content[:end])
		content = content[end:]
	}
	return out
}

func writeError(w http.ResponseWriter, status int, msg, typ string) {
	fakeserver.WriteJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": msg, "type": typ}})
}

// convert checks a schema the way llama.cpp's json_schema_to_grammar would
// take it, and compiles it to validate replies. The problems are those its
// converter throws on: a boolean schema where a schema is expected, a pattern
// not anchored ^...$, lookaround in a pattern, a $ref outside the document.
func convert(raw json.RawMessage) (*jsonschema.Schema, []string) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, []string{"invalid JSON: " + err.Error()}
	}
	var problems []string
	walk(doc, "#", &problems)
	if len(problems) > 0 {
		return nil, problems
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuse{})
	if err := c.AddResource("mem:///reply.json", doc); err != nil {
		return nil, []string{err.Error()}
	}
	sch, err := c.Compile("mem:///reply.json")
	if err != nil {
		return nil, []string{err.Error()}
	}
	return sch, nil
}

type refuse struct{}

func (refuse) Load(url string) (any, error) { return nil, fmt.Errorf("no loading of %s", url) }

// subschemaKeys hold one schema; subschemaLists a list; subschemaMaps a map
// of them.
var (
	subschemaKeys  = []string{"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames"}
	subschemaLists = []string{"oneOf", "anyOf", "allOf", "prefixItems"}
	subschemaMaps  = []string{"properties", "$defs", "definitions", "patternProperties"}
)

func walk(node any, at string, problems *[]string) {
	switch n := node.(type) {
	case bool:
		*problems = append(*problems, fmt.Sprintf("Unrecognized schema: %t at %s", n, at))
		return
	case map[string]any:
		if p, ok := n["pattern"].(string); ok {
			switch {
			case !strings.HasPrefix(p, "^") || !strings.HasSuffix(p, "$"):
				*problems = append(*problems, fmt.Sprintf("Pattern must start with '^' and end with '$' at %s", at))
			case strings.Contains(p, "(?=") || strings.Contains(p, "(?!") || strings.Contains(p, "(?<"):
				*problems = append(*problems, fmt.Sprintf("Unsupported pattern syntax at %s", at))
			}
		}
		if ref, ok := n["$ref"].(string); ok && !strings.HasPrefix(ref, "#") {
			*problems = append(*problems, fmt.Sprintf("Unsupported ref: %s at %s", ref, at))
		}
		for _, k := range subschemaKeys {
			if v, ok := n[k]; ok {
				if b, isBool := v.(bool); isBool && k == "additionalProperties" {
					_ = b // additionalProperties: false (or true) is a keyword value here, not a schema
					continue
				}
				walk(v, at+"/"+k, problems)
			}
		}
		for _, k := range subschemaLists {
			if list, ok := n[k].([]any); ok {
				for i, v := range list {
					walk(v, fmt.Sprintf("%s/%s/%d", at, k, i), problems)
				}
			}
		}
		for _, k := range subschemaMaps {
			if m, ok := n[k].(map[string]any); ok {
				for name, v := range m {
					walk(v, at+"/"+k+"/"+name, problems)
				}
			}
		}
	}
}

// valid reports whether content is JSON that matches the schema.
func valid(sch *jsonschema.Schema, content string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(content))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(v)
}
