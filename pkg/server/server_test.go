package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type env struct {
	fake    *ollamatest.Server
	url     string
	logs    *syncBuffer
	store   *store.Store
	handler http.Handler // the API, for tests that serve it themselves
}

func start(t *testing.T, token string, script ...ollamatest.Reply) *env {
	t.Helper()
	return startWith(t, options{token: token}, script...)
}

// options vary the server start builds.
type options struct {
	token  string
	tools  loop.Tools
	limits server.Limits
	// model, when set, changes the model client's options.
	model func(*llm.Options)
	// configure, when set, finishes the wiring before the server starts.
	configure func(*store.Store, *loop.Runner, *server.Server)
}

func startWith(t *testing.T, o options, script ...ollamatest.Reply) *env {
	t.Helper()
	fake := ollamatest.New(t, script...)
	mo := llm.Options{Host: fake.URL, Model: "test-model", Retries: 1, Backoff: time.Millisecond}
	if o.model != nil {
		o.model(&mo)
	}
	model, err := llm.New(mo)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(trace.Handler{Handler: slog.NewJSONHandler(logs, nil)})
	runner := &loop.Runner{Model: model, Tools: o.tools, Config: loop.DefaultConfig, Log: log}
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	api := &server.Server{Turns: runner, Catalog: runner, Model: model, Store: st, Token: o.token, Limits: o.limits, Log: log}
	if o.configure != nil {
		o.configure(st, runner, api)
	}
	h := api.Handler()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return &env{fake: fake, url: ts.URL, logs: logs, store: st, handler: h}
}

func final(answer string) ollamatest.Reply {
	return ollamatest.Reply{Content: fmt.Sprintf(`{"thought":"t","action":"final_response","args":{"answer":%q}}`, answer)}
}

func (e *env) do(t *testing.T, method, path, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // as every client of this JSON API
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Trace-Id") == "" {
		t.Errorf("%s %s: no X-Trace-Id", method, path)
	}
	return resp, data
}

func TestChatAndContinue(t *testing.T) {
	e := start(t, "", final("Hello!"), final("Again."))
	resp, body := e.do(t, "POST", "/v1/chat", `{"message":"hi"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var got server.ChatResponse
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Answer != "Hello!" || got.SessionID == "" || got.TraceID != resp.Header.Get("X-Trace-Id") || len(got.Steps) != 1 || got.Usage.Calls != 1 {
		t.Fatalf("response = %s", body)
	}
	resp, body = e.do(t, "POST", "/v1/chat", fmt.Sprintf(`{"message":"and again","session_id":%q}`, got.SessionID))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	second := e.fake.Requests()[1].Messages
	if len(second) != 4 || second[1].Content != "hi" || second[3].Content != "and again" {
		t.Errorf("second turn did not see the first: %+v", second)
	}
	// Logs are tagged with the request's trace id.
	if !strings.Contains(e.logs.String(), `"trace_id":"`+got.TraceID+`"`) {
		t.Errorf("no log line carries trace id %s:\n%s", got.TraceID, e.logs)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		script    []ollamatest.Reply
		status    int
		code      string
		retryable bool
		message   string
	}{
		{"invalid JSON", `{"message":`, nil, 400, "invalid_request", false, "not valid JSON"},
		{"not an object", `["hi"]`, nil, 400, "invalid_request", false, "not valid JSON"},
		{"unknown field", `{"message":"hi","sesion_id":"x"}`, nil, 400, "invalid_request", false, `unknown field "sesion_id"`},
		{"two values", `{"message":"hi"} {}`, nil, 400, "invalid_request", false, "more than one JSON value"},
		{"empty message", `{"message":""}`, nil, 400, "invalid_request", false, "message must not be empty"},
		{"whitespace message", `{"message":" \n\t"}`, nil, 400, "invalid_request", false, "message must not be empty"},
		{"invalid UTF-8", "{\"message\":\"\xff\"}", nil, 400, "invalid_request", false, "not valid UTF-8"},
		{"too large", `{"message":"` + strings.Repeat("a", server.MaxBodyBytes) + `"}`, nil, 413, "body_too_large", false, "over 1048576 bytes"},
		{"unknown session", `{"message":"hi","session_id":"nope"}`, nil, 404, "session_not_found", false, `no session "nope"`},
		{"model down", `{"message":"hi"}`, []ollamatest.Reply{{Status: 503, Error: "busy"}, {Status: 503, Error: "busy"}}, 503, "model_unavailable", true, "overloaded"},
		{"garbage replies", `{"message":"hi"}`, []ollamatest.Reply{{Content: "?"}, {Content: "?"}, {Content: "?"}}, 502, "invalid_model_reply", false, "no valid reply in 3 attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, "", tt.script...)
			resp, body := e.do(t, "POST", "/v1/chat", tt.body)
			var got server.ErrorBody
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body is not the error envelope: %s", body)
			}
			if resp.StatusCode != tt.status || got.Error.Code != tt.code || got.Error.Retryable != tt.retryable || !strings.Contains(got.Error.Message, tt.message) {
				t.Errorf("got %d %+v, want %d %s retryable=%v containing %q", resp.StatusCode, got.Error, tt.status, tt.code, tt.retryable, tt.message)
			}
			if got.TraceID != resp.Header.Get("X-Trace-Id") {
				t.Errorf("trace_id %q, header %q", got.TraceID, resp.Header.Get("X-Trace-Id"))
			}
		})
	}
}

func TestModelMissing(t *testing.T) {
	e := start(t, "")
	e.fake.Models("other-model")
	for _, path := range []string{"/readyz", "/v1/chat"} {
		resp, body := e.do(t, map[string]string{"/readyz": "GET", "/v1/chat": "POST"}[path], path, `{"message":"hi"}`)
		if resp.StatusCode != 503 || !strings.Contains(string(body), `ollama pull test-model`) || !strings.Contains(string(body), `"model_missing"`) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
}

func TestProbesAndCatalog(t *testing.T) {
	e := start(t, "", final("ok"))
	if resp, body := e.do(t, "GET", "/healthz", ""); resp.StatusCode != 200 {
		t.Errorf("healthz: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.do(t, "GET", "/readyz", ""); resp.StatusCode != 200 {
		t.Errorf("readyz: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.do(t, "GET", "/v1/tools", ""); resp.StatusCode != 200 || string(body) != "{\"tools\":[]}\n" {
		t.Errorf("tools: %d %s", resp.StatusCode, body)
	}
	_, schemaBody := e.do(t, "GET", "/v1/schema", "")
	e.do(t, "POST", "/v1/chat", `{"message":"hi"}`)
	if sent := e.fake.Requests()[0].Format; !bytes.Equal(schemaBody, sent) {
		t.Errorf("/v1/schema is not what the model was sent:\n%s\n%s", schemaBody, sent)
	}
	if resp, _ := e.do(t, "GET", "/nope", ""); resp.StatusCode != 404 {
		t.Errorf("unknown route: %d", resp.StatusCode)
	}
	if resp, _ := e.do(t, "GET", "/v1/chat", ""); resp.StatusCode != 405 {
		t.Errorf("GET /v1/chat: %d", resp.StatusCode)
	}
}

func TestToken(t *testing.T) {
	const canary = "canary-3b1f9c0e-secret"
	e := start(t, canary, final("ok"))
	if resp, _ := e.do(t, "GET", "/healthz", ""); resp.StatusCode != 200 {
		t.Errorf("healthz needs no token, got %d", resp.StatusCode)
	}
	for _, h := range []string{"", "Bearer wrong", "Bearer " + canary + "x", canary} {
		resp, body := e.do(t, "POST", "/v1/chat", `{"message":"hi"}`, "Authorization", h)
		if resp.StatusCode != 401 || !strings.Contains(string(body), `"unauthorized"`) || strings.Contains(string(body), canary) {
			t.Errorf("Authorization %q: %d %s", h, resp.StatusCode, body)
		}
	}
	resp, body := e.do(t, "POST", "/v1/chat", `{"message":"hi"}`, "Authorization", "Bearer "+canary)
	if resp.StatusCode != 200 {
		t.Errorf("with the token: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(e.logs.String(), canary) {
		t.Error("the token reached the log")
	}
}

func TestSessionBusy(t *testing.T) {
	e := start(t, "", final("first"))
	_, body := e.do(t, "POST", "/v1/chat", `{"message":"hi"}`)
	var first server.ChatResponse
	if err := json.Unmarshal(body, &first); err != nil {
		t.Fatal(err)
	}
	slow := final("slow")
	slow.Delay = 3 * time.Second
	e.fake.Push(slow)
	done := make(chan int)
	go func() {
		resp, err := http.Post(e.url+"/v1/chat", "application/json", strings.NewReader(fmt.Sprintf(`{"message":"slow","session_id":%q}`, first.SessionID)))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	// Wait until the slow turn reached the model, then knock again.
	for deadline := time.Now().Add(5 * time.Second); len(e.fake.Requests()) < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	resp, body := e.do(t, "POST", "/v1/chat", fmt.Sprintf(`{"message":"again","session_id":%q}`, first.SessionID))
	if resp.StatusCode != 409 || !strings.Contains(string(body), `"session_busy"`) || !strings.Contains(string(body), `"retryable":true`) {
		t.Errorf("second turn: %d %s", resp.StatusCode, body)
	}
	select {
	case <-done:
		t.Error("the busy answer came only after the running turn ended")
	default:
	}
	if code := <-done; code != 200 {
		t.Errorf("slow turn: %d", code)
	}
}
