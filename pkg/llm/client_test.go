package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

const model = "qwen2.5:7b-instruct"

var schema = json.RawMessage(`{"type":"object","properties":{"action":{"const":"final_response"}},"required":["action"]}`)

func newClient(t *testing.T, host string, edit ...func(*llm.Options)) *llm.Client {
	t.Helper()
	o := llm.Options{
		Host:        host,
		Model:       model,
		NumCtx:      4096,
		Temperature: 0.2,
		Timeout:     5 * time.Second,
		Retries:     3,
		Backoff:     time.Millisecond,
	}
	for _, f := range edit {
		f(&o)
	}
	c, err := llm.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func ask(content string) []convo.Message {
	return []convo.Message{{Role: convo.User, Content: content}}
}

// refusedHost is a URL nothing listens on.
func refusedHost(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		opts    llm.Options
		wantErr string
	}{
		{"ok", llm.Options{Host: "http://127.0.0.1:11434", Model: model}, ""},
		{"https with path", llm.Options{Host: "https://ollama.example/", Model: model}, ""},
		{"no scheme", llm.Options{Host: "127.0.0.1:11434", Model: model}, "not an http(s) URL"},
		{"other scheme", llm.Options{Host: "ftp://127.0.0.1", Model: model}, "not an http(s) URL"},
		{"empty host", llm.Options{Model: model}, "not an http(s) URL"},
		{"no model", llm.Options{Host: "http://127.0.0.1:11434", Model: "  "}, "no model"},
		{"negative retries", llm.Options{Host: "http://127.0.0.1:11434", Model: model, Retries: -1}, "retries"},
		{"negative num_ctx", llm.Options{Host: "http://127.0.0.1:11434", Model: model, NumCtx: -1}, "num_ctx"},
		{"negative reply reserve", llm.Options{Host: "http://127.0.0.1:11434", Model: model, ReplyReserve: -1}, "reply reserve"},
		{"reply reserve of the whole context", llm.Options{Host: "http://127.0.0.1:11434", Model: model, NumCtx: 1024, ReplyReserve: 1024}, "leaves nothing of num_ctx 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := llm.New(tt.opts)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if c.Model() != model {
					t.Errorf("Model() = %q", c.Model())
				}
				if strings.HasSuffix(c.Host(), "/") {
					t.Errorf("Host() = %q keeps a trailing slash", c.Host())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestChatRequestOnTheWire(t *testing.T) {
	msgs := []convo.Message{
		{Role: convo.System, Content: "be terse"},
		{Role: convo.User, Content: "find Dune"},
		{Role: convo.Assistant, Content: `{"action":"tmdb_search"}`, Tool: "tmdb_search"},
		{Role: convo.Observation, Content: "tmdb_search: Dune (2021)", Tool: "tmdb_search"},
	}
	tests := []struct {
		name      string
		format    json.RawMessage
		keepAlive time.Duration
		numCtx    int
		wantCtx   float64
	}{
		{name: "with format", format: schema, numCtx: 4096, wantCtx: 4096},
		{name: "without format", numCtx: 4096, wantCtx: 4096},
		{name: "keep alive and default num_ctx", format: schema, keepAlive: 10 * time.Minute, wantCtx: llm.DefaultNumCtx},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ollamatest.New(t, ollamatest.Reply{Content: `{"action":"final_response"}`})
			c := newClient(t, srv.URL, func(o *llm.Options) {
				o.KeepAlive = tt.keepAlive
				o.NumCtx = tt.numCtx
			})
			if _, err := c.Chat(context.Background(), msgs, tt.format); err != nil {
				t.Fatalf("Chat: %v", err)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("got %d requests, want 1", len(reqs))
			}
			req := reqs[0]
			if req.Model != model {
				t.Errorf("model = %q, want %q", req.Model, model)
			}
			if req.Stream == nil || !*req.Stream {
				t.Errorf("stream = %v, want an explicit true", req.Stream)
			}
			if string(req.Format) != string(tt.format) {
				t.Errorf("format = %s, want %s", req.Format, tt.format)
			}
			if len(req.Tools) != 0 {
				t.Errorf("tools = %v, want none", req.Tools)
			}
			if got := req.Options["temperature"]; got != 0.2 {
				t.Errorf("temperature = %v, want 0.2", got)
			}
			if got := req.Options["num_ctx"]; got != tt.wantCtx {
				t.Errorf("num_ctx = %v, want %v", got, tt.wantCtx)
			}
			switch {
			case tt.keepAlive == 0 && req.KeepAlive != nil:
				t.Errorf("keep_alive = %v, want none", req.KeepAlive)
			case tt.keepAlive != 0 && (req.KeepAlive == nil || req.KeepAlive.Duration != tt.keepAlive):
				t.Errorf("keep_alive = %v, want %v", req.KeepAlive, tt.keepAlive)
			}
			var roles []string
			for i, m := range req.Messages {
				roles = append(roles, m.Role)
				if m.Content != msgs[i].Content {
					t.Errorf("message %d content = %q, want %q", i, m.Content, msgs[i].Content)
				}
			}
			if want := []string{"system", "user", "assistant", "user"}; !reflect.DeepEqual(roles, want) {
				t.Errorf("roles = %v, want %v", roles, want)
			}
		})
	}
}

func TestChatTemperatureZeroIsSent(t *testing.T) {
	srv := ollamatest.New(t, ollamatest.Reply{Content: "{}"})
	c := newClient(t, srv.URL, func(o *llm.Options) { o.Temperature = 0 })
	if _, err := c.Chat(context.Background(), ask("hi"), schema); err != nil {
		t.Fatal(err)
	}
	got, ok := srv.Requests()[0].Options["temperature"]
	if !ok || got != 0.0 {
		t.Errorf("temperature = %v (present %v), want 0", got, ok)
	}
}

func TestChatUnknownRole(t *testing.T) {
	srv := ollamatest.New(t)
	c := newClient(t, srv.URL)
	_, err := c.Chat(context.Background(), []convo.Message{{Role: "tool", Content: "x"}}, schema)
	if err == nil || !strings.Contains(err.Error(), `unknown role "tool"`) {
		t.Fatalf("err = %v, want unknown role", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
}

func TestChatReplyAndUsage(t *testing.T) {
	srv := ollamatest.New(t, ollamatest.Reply{
		Content:          `{"action":"final_response"}`,
		PromptTokens:     321,
		CompletionTokens: 45,
		TotalDuration:    1500 * time.Millisecond,
	})
	c := newClient(t, srv.URL)
	r, err := c.Chat(context.Background(), ask("hi"), schema)
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != `{"action":"final_response"}` {
		t.Errorf("content = %q", r.Content)
	}
	want := llm.Usage{Calls: 1, PromptTokens: 321, CompletionTokens: 45, ModelTime: 1500 * time.Millisecond}
	if r.Usage != want {
		t.Errorf("usage = %+v, want %+v", r.Usage, want)
	}
}

func TestChatEmptyContentIsAllowed(t *testing.T) {
	srv := ollamatest.New(t, ollamatest.Reply{Content: ""})
	c := newClient(t, srv.URL)
	r, err := c.Chat(context.Background(), ask("hi"), schema)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if r.Content != "" || r.Usage.Calls != 1 {
		t.Errorf("reply = %+v, want empty content and one call", r)
	}
}

func TestUsageAdd(t *testing.T) {
	u := llm.Usage{Calls: 1, PromptTokens: 10, CompletionTokens: 2, ModelTime: time.Second}
	u.Add(llm.Usage{Calls: 2, PromptTokens: 5, CompletionTokens: 3, ModelTime: time.Millisecond})
	want := llm.Usage{Calls: 3, PromptTokens: 15, CompletionTokens: 5, ModelTime: time.Second + time.Millisecond}
	if u != want {
		t.Errorf("sum = %+v, want %+v", u, want)
	}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"model_calls":3,"prompt_tokens":15,"completion_tokens":5,"model_time_ns":1001000000}` {
		t.Errorf("json = %s", got)
	}
}

func TestChatRetries(t *testing.T) {
	busy := ollamatest.Reply{Status: http.StatusTooManyRequests, Error: "too many requests"}
	full := ollamatest.Reply{Status: http.StatusServiceUnavailable, Error: "server busy, please try again.  maximum pending requests exceeded"}
	ok := ollamatest.Reply{Content: "{}"}
	tests := []struct {
		name     string
		retries  int
		script   []ollamatest.Reply
		wantReqs int
		wantErr  error
		wantText string
	}{
		{name: "429 then 503 then success", retries: 3, script: []ollamatest.Reply{busy, full, ok}, wantReqs: 3},
		{name: "all 429", retries: 3, script: []ollamatest.Reply{busy, busy, busy, busy, ok}, wantReqs: 4,
			wantErr: llm.ErrUnavailable, wantText: "overloaded (429 Too Many Requests: too many requests) after 4 attempts"},
		{name: "all 503", retries: 2, script: []ollamatest.Reply{full, full, full, ok}, wantReqs: 3,
			wantErr: llm.ErrUnavailable, wantText: "503 Service Unavailable"},
		{name: "no retries", retries: 0, script: []ollamatest.Reply{busy, ok}, wantReqs: 1, wantErr: llm.ErrUnavailable},
		// Other 5xx are Ollama (or a proxy before it) failing: a model_error
		// with its message, not retried.
		{name: "500 is not retried", retries: 3, script: []ollamatest.Reply{{Status: 500, Error: "llama runner process has terminated"}, ok}, wantReqs: 1,
			wantErr: llm.ErrServerError, wantText: "500 Internal Server Error: llama runner process has terminated"},
		{name: "502 from a proxy", retries: 3, script: []ollamatest.Reply{{Status: 502, Error: "upstream connect error"}, ok}, wantReqs: 1,
			wantErr: llm.ErrServerError, wantText: "502 Bad Gateway: upstream connect error"},
		{name: "504 from a proxy", retries: 3, script: []ollamatest.Reply{{Status: 504}, ok}, wantReqs: 1,
			wantErr: llm.ErrServerError, wantText: "504 Gateway Timeout"},
		{name: "400 is not retried", retries: 3, script: []ollamatest.Reply{{Status: 400, Error: "invalid JSON schema in format"}, ok}, wantReqs: 1,
			wantText: "400 Bad Request: invalid JSON schema in format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ollamatest.New(t, tt.script...)
			c := newClient(t, srv.URL, func(o *llm.Options) { o.Retries = tt.retries })
			r, err := c.Chat(context.Background(), ask("hi"), schema)
			if got := len(srv.Requests()); got != tt.wantReqs {
				t.Errorf("%d requests, want %d", got, tt.wantReqs)
			}
			if tt.wantErr == nil && tt.wantText == "" {
				if err != nil {
					t.Fatalf("Chat: %v", err)
				}
				if r.Content != "{}" {
					t.Errorf("content = %q", r.Content)
				}
				return
			}
			if err == nil {
				t.Fatal("Chat succeeded, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if errors.Is(err, llm.ErrServerError) && !errors.Is(err, llm.ErrBadResponse) {
				t.Errorf("err = %v is not an ErrBadResponse (model_error)", err)
			}
			if tt.wantErr == nil {
				for _, s := range []error{llm.ErrUnavailable, llm.ErrModelMissing, llm.ErrBadResponse} {
					if errors.Is(err, s) {
						t.Errorf("err = %v wraps %v", err, s)
					}
				}
				var se api.StatusError
				if !errors.As(err, &se) {
					t.Errorf("err = %v does not wrap api.StatusError", err)
				}
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantText)
			}
		})
	}
}

func TestChatBackoffDoubles(t *testing.T) {
	busy := ollamatest.Reply{Status: http.StatusTooManyRequests}
	srv := ollamatest.New(t, busy, busy, busy)
	c := newClient(t, srv.URL, func(o *llm.Options) {
		o.Retries = 2
		o.Backoff = 20 * time.Millisecond
	})
	start := time.Now()
	_, err := c.Chat(context.Background(), ask("hi"), schema)
	if !errors.Is(err, llm.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	// 20ms + 40ms of backoff.
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Errorf("gave up after %s, want at least 60ms of backoff", d)
	}
}

func TestChatConnectionRefused(t *testing.T) {
	host := refusedHost(t)
	c := newClient(t, host, func(o *llm.Options) {
		o.Retries = 2
		o.Backoff = 10 * time.Millisecond
	})
	start := time.Now()
	_, err := c.Chat(context.Background(), ask("hi"), schema)
	if !errors.Is(err, llm.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	for _, want := range []string{host, "connection refused", "after 3 attempts", "ollama serve"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %q, want it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "&{") || strings.Contains(err.Error(), "Post \"") {
		t.Errorf("err = %q leaks raw Go errors", err)
	}
	// Retried: 10ms + 20ms of backoff.
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("gave up after %s, want the refused connection retried", d)
	}
}

func TestChatUnknownHost(t *testing.T) {
	c := newClient(t, "http://ollama.invalid:11434", func(o *llm.Options) { o.Retries = 0 })
	_, err := c.Chat(context.Background(), ask("hi"), schema)
	if !errors.Is(err, llm.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "http://ollama.invalid:11434") {
		t.Errorf("err = %q does not name the host", err)
	}
}

func TestChatCancelledDuringBackoff(t *testing.T) {
	srv := ollamatest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv.Handle(func(api.ChatRequest) ollamatest.Reply {
		cancel()
		return ollamatest.Reply{Status: http.StatusServiceUnavailable}
	})
	c := newClient(t, srv.URL, func(o *llm.Options) { o.Backoff = time.Hour })
	done := make(chan error, 1)
	go func() {
		_, err := c.Chat(ctx, ask("hi"), schema)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if !strings.Contains(err.Error(), model) {
			t.Errorf("err = %q does not name the model", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Chat did not return after its context was cancelled")
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1 (no retry after cancel)", n)
	}
}

func TestChatContextDeadline(t *testing.T) {
	srv := ollamatest.New(t, ollamatest.Reply{Content: "{}", Delay: time.Minute})
	c := newClient(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Chat(ctx, ask("hi"), schema)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestChatErrors(t *testing.T) {
	tests := []struct {
		name    string
		reply   ollamatest.Reply
		timeout time.Duration
		want    error
		notWant error
		text    []string
	}{
		{name: "model missing", reply: ollamatest.Reply{Status: 404, Error: `model "qwen2.5:7b-instruct" not found, try pulling it first`},
			want: llm.ErrModelMissing, text: []string{`run "ollama pull qwen2.5:7b-instruct"`, "127.0.0.1"}},
		{name: "empty 200", reply: ollamatest.Reply{Empty: true}, want: llm.ErrBadResponse, text: []string{"empty response"}},
		{name: "done=false", reply: ollamatest.Reply{Content: "{}", NotDone: true}, want: llm.ErrBadResponse, text: []string{"incomplete"}},
		// A slow model is no unreachable server: its own error, naming the
		// setting, whether nothing came in time or the reply came too slowly.
		{name: "timeout", reply: ollamatest.Reply{Content: "{}", Delay: 10 * time.Second}, timeout: 50 * time.Millisecond,
			want: llm.ErrTimeout, notWant: llm.ErrUnavailable, text: []string{"did not answer within 50ms (MMCP_LLM_TIMEOUT)", "may need more"}},
		{name: "slow drip", reply: ollamatest.Reply{Content: "{}", Drip: 20 * time.Millisecond}, timeout: 300 * time.Millisecond,
			want: llm.ErrTimeout, notWant: llm.ErrBadResponse, text: []string{"did not answer within 300ms (MMCP_LLM_TIMEOUT)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ollamatest.New(t, tt.reply, tt.reply, tt.reply, tt.reply)
			c := newClient(t, srv.URL, func(o *llm.Options) {
				if tt.timeout != 0 {
					o.Timeout = tt.timeout
				}
			})
			start := time.Now()
			_, err := c.Chat(context.Background(), ask("hi"), schema)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if tt.notWant != nil && errors.Is(err, tt.notWant) {
				t.Errorf("err = %v is also %v", err, tt.notWant)
			}
			for _, s := range append(tt.text, model) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %q, want it to contain %q", err, s)
				}
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1 (not retried)", n)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

// TestChatErrorIn200 needs replies ollamatest does not make: an error or
// garbage in a 200.
func TestChatErrorIn200(t *testing.T) {
	tests := []struct {
		name string
		body string
		text string
	}{
		{"error field", `{"error":"unexpected EOF"}` + "\n", "unexpected EOF"},
		{"not json", "<html>proxy says hi</html>\n", "proxy says hi"},
		{"truncated", `{"model":"x","message":{"role":"assistant","content":"{}"},"done":`, `"done":`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			c := newClient(t, srv.URL)
			_, err := c.Chat(context.Background(), ask("hi"), schema)
			if !errors.Is(err, llm.ErrBadResponse) {
				t.Fatalf("err = %v, want ErrBadResponse", err)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %q, want it to contain %q", err, tt.text)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		models []string // nil: every model is known
		down   bool
		want   error
		text   []string
	}{
		{name: "ok"},
		{name: "model pulled", models: []string{"llama3.2", model}},
		{name: "model missing", models: []string{"llama3.2"}, want: llm.ErrModelMissing,
			text: []string{`model "qwen2.5:7b-instruct" is not available on http://127.0.0.1:`, `run "ollama pull qwen2.5:7b-instruct"`}},
		{name: "server down", down: true, want: llm.ErrUnavailable, text: []string{"cannot reach Ollama at http://127.0.0.1:", "ollama serve"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ollamatest.New(t)
			if tt.models != nil {
				srv.Models(tt.models...)
			}
			host := srv.URL
			if tt.down {
				host = refusedHost(t)
			}
			err := newClient(t, host).Check(context.Background())
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			for _, s := range tt.text {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %q, want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestChatModelMissingFromServer(t *testing.T) {
	srv := ollamatest.New(t, ollamatest.Reply{Content: "{}"})
	srv.Models("llama3.2")
	_, err := newClient(t, srv.URL).Chat(context.Background(), ask("hi"), schema)
	if !errors.Is(err, llm.ErrModelMissing) {
		t.Fatalf("err = %v, want ErrModelMissing", err)
	}
}

// finished waits until the fake has stopped writing every response, and
// gives what it sent.
func finished(t *testing.T, srv *ollamatest.Server) []ollamatest.Response {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs := srv.Responses()
		done := true
		for _, r := range rs {
			done = done && r.Ended
		}
		if done {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fake is still writing after 10s: %+v", rs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestChatReplyTooLarge sends replies over the content cap (256 KiB, what the
// decoder accepts): as many done=false lines though the client asked for one
// (a server that streams anyway), and as one line that never ends. The call
// must end as soon as the cap is passed, with a model_error (ErrBadResponse)
// that says so, without reading the rest: the fake sees the client go away.
func TestChatReplyTooLarge(t *testing.T) {
	chunk := strings.Repeat("x", 8<<10)
	tests := []struct {
		name  string
		reply ollamatest.Reply
		size  int64 // bytes of the whole reply
		calls int   // at once
		cut   bool  // the client must go away before the end
	}{
		{name: "64 MiB as done=false lines", reply: ollamatest.Reply{Content: chunk, Repeat: 8 << 10}, size: 64 << 20, calls: 1, cut: true},
		{name: "four 64 MiB replies at once", reply: ollamatest.Reply{Content: chunk, Repeat: 8 << 10}, size: 64 << 20, calls: 4, cut: true},
		{name: "200 MiB in one line without a newline", reply: ollamatest.Reply{Line: 200 << 20}, size: 200 << 20, calls: 1, cut: true},
		{name: "one byte over the cap in lines", reply: ollamatest.Reply{Content: "x" + chunk, Repeat: 32}, size: 32 * (8<<10 + 1), calls: 1},
		{name: "1 MiB of content in one reply", reply: ollamatest.Reply{Content: strings.Repeat("x", 1<<20)}, size: 1 << 20, calls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ollamatest.New(t)
			srv.Handle(func(api.ChatRequest) ollamatest.Reply { return tt.reply })
			c := newClient(t, srv.URL, func(o *llm.Options) { o.Timeout = time.Minute })

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			errs := make(chan error, tt.calls)
			for range tt.calls {
				go func() {
					_, err := c.Chat(context.Background(), ask("hi"), schema)
					errs <- err
				}()
			}
			for range tt.calls {
				err := <-errs
				if !errors.Is(err, llm.ErrReplyTooLarge) || !errors.Is(err, llm.ErrBadResponse) {
					t.Errorf("err = %v, want ErrReplyTooLarge, an ErrBadResponse (model_error)", err)
					continue
				}
				for _, s := range []string{"too large", "262144 bytes", model, srv.URL} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("err = %q, want it to contain %q", err, s)
					}
				}
			}
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			t.Logf("%d call(s) took %s and allocated %d MiB in this process (fake included) for %d KiB of reply each",
				tt.calls, took.Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>20, tt.size>>10)
			if took > 5*time.Second {
				t.Errorf("took %s, want the call(s) to end at the cap", took)
			}

			rs := finished(t, srv)
			if len(rs) != tt.calls {
				t.Fatalf("%d requests, want %d (not retried)", len(rs), tt.calls)
			}
			for i, r := range rs {
				t.Logf("response %d: the fake wrote %d KiB of %d KiB", i, r.Bytes>>10, tt.size>>10)
				// What the connections hold between the two ends is counted
				// as written: allow for it, and ask for far less than the
				// whole reply.
				if tt.cut && (r.Complete || r.Bytes > tt.size/4) {
					t.Errorf("response %d: the fake wrote %d of %d bytes (complete %v): the client kept reading", i, r.Bytes, tt.size, r.Complete)
				}
			}
		})
	}
}

// TestChatReplyAtTheCap checks the boundary: content of exactly the cap, in
// lines or in one line, even when JSON escapes every byte of it (six bytes on
// the wire each), is a reply.
func TestChatReplyAtTheCap(t *testing.T) {
	const limit = 256 << 10
	tests := []struct {
		name  string
		reply ollamatest.Reply
	}{
		{"in lines", ollamatest.Reply{Content: strings.Repeat("x", 8<<10), Repeat: limit / (8 << 10)}},
		{"in one line", ollamatest.Reply{Content: strings.Repeat("x", limit)}},
		{"every byte escaped", ollamatest.Reply{Content: strings.Repeat("<", limit)}},
		{"every byte a control character", ollamatest.Reply{Content: strings.Repeat("\x01", limit)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ollamatest.New(t, tt.reply)
			r, err := newClient(t, srv.URL).Chat(context.Background(), ask("hi"), schema)
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if len(r.Content) != limit {
				t.Errorf("content is %d bytes, want %d", len(r.Content), limit)
			}
		})
	}
}

// TestChatBodyCap checks the bound on the bytes read for one reply, apart
// from its content: one line padded with a field the client ignores, exactly
// at the bound and one byte over. The bound is 6 times the content cap (JSON's
// worst escaping) plus 64 KiB.
func TestChatBodyCap(t *testing.T) {
	const bound = 6*llm.MaxReplyBytes + 64<<10
	line := func(size int) string {
		head := `{"model":"m","message":{"role":"assistant","content":"{}"},"done":true,"pad":"`
		tail := "\"}\n"
		return head + strings.Repeat("p", size-len(head)-len(tail)) + tail
	}
	tests := []struct {
		name string
		size int
		want error
	}{
		{"at the bound", bound, nil},
		{"one byte over", bound + 1, llm.ErrReplyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := line(tt.size)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				_, _ = io.WriteString(w, body)
			}))
			defer srv.Close()
			r, err := newClient(t, srv.URL).Chat(context.Background(), ask("hi"), schema)
			if tt.want == nil {
				if err != nil || r.Content != "{}" {
					t.Fatalf("Chat = %q, %v; want the reply", r.Content, err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), fmt.Sprintf("more than %d bytes of response body", bound)) {
				t.Errorf("err = %v, want %v naming the bound", err, tt.want)
			}
		})
	}
}

// TestChatFailsFastWhileDown: once a call (a readiness check, another chat)
// has found Ollama unreachable, a chat within DownFreshness tries once
// instead of spending its retries; later, or without that knowledge, it
// retries as before.
func TestChatFailsFastWhileDown(t *testing.T) {
	const backoff = 100 * time.Millisecond // 2 retries: 300 ms of backoff
	tests := []struct {
		name     string
		check    bool          // a Check fails first
		fresh    time.Duration // Options.DownFreshness
		wait     time.Duration // between the Check and the Chat
		attempts bool          // the chat retries
	}{
		{name: "nothing known: retried", attempts: true},
		{name: "check failed just now: one attempt", check: true},
		{name: "check failed long ago: retried", check: true, fresh: 20 * time.Millisecond, wait: 50 * time.Millisecond, attempts: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := refusedHost(t)
			c := newClient(t, host, func(o *llm.Options) {
				o.Retries = 2
				o.Backoff = backoff
				o.DownFreshness = tt.fresh
			})
			if tt.check {
				if err := c.Check(context.Background()); !errors.Is(err, llm.ErrUnavailable) {
					t.Fatalf("Check: %v, want ErrUnavailable", err)
				}
				time.Sleep(tt.wait)
			}
			start := time.Now()
			_, err := c.Chat(context.Background(), ask("hi"), schema)
			took := time.Since(start)
			if !errors.Is(err, llm.ErrUnavailable) || !strings.Contains(err.Error(), "ollama serve") {
				t.Fatalf("err = %v, want ErrUnavailable with the fix", err)
			}
			if retried := took >= 3*backoff; retried != tt.attempts {
				t.Errorf("took %s (retried %v), want retried %v", took, retried, tt.attempts)
			}
		})
	}
}

// TestReachabilityIsLogged: a server going from reachable to unreachable and
// back is logged once each way; what a call finds first is not (the daemon
// logs its own start-up check).
func TestReachabilityIsLogged(t *testing.T) {
	host := refusedHost(t)
	var logs strings.Builder
	c := newClient(t, host, func(o *llm.Options) {
		o.Retries = 0
		o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	ctx := context.Background()
	if c.Check(ctx) == nil {
		t.Fatal("Check succeeded with nothing listening")
	}
	if _, err := c.Chat(ctx, ask("hi"), schema); err == nil {
		t.Fatal("Chat succeeded with nothing listening")
	}
	if logs.Len() != 0 {
		t.Errorf("the first finding was logged:\n%s", logs.String())
	}

	srv := ollamatest.NewAt(t, strings.TrimPrefix(host, "http://"), ollamatest.Reply{Content: "{}"}, ollamatest.Reply{Content: "{}"})
	for range 2 {
		if _, err := c.Chat(ctx, ask("hi"), schema); err != nil {
			t.Fatalf("Chat once Ollama is up: %v", err)
		}
		if err := c.Check(ctx); err != nil {
			t.Fatalf("Check once Ollama is up: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "Ollama is reachable again"); n != 1 || !strings.Contains(logs.String(), host) {
		t.Errorf("logged %d times that it is back, want once naming %s:\n%s", n, host, logs.String())
	}

	srv.Close()
	logs.Reset()
	for range 2 {
		if c.Check(ctx) == nil {
			t.Fatal("Check succeeded after Ollama stopped")
		}
	}
	if n := strings.Count(logs.String(), "Ollama is unreachable"); n != 1 || !strings.Contains(logs.String(), "cannot reach Ollama at "+host) {
		t.Errorf("logged %d times that it is gone, want once with the reason:\n%s", n, logs.String())
	}
}
