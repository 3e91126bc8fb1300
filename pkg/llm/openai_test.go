package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/openaitest"
)

var answerSchema = json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false}`)

var hello = []convo.Message{{Role: convo.System, Content: "be brief"}, {Role: convo.User, Content: "hi"}}

func newOpenAI(t *testing.T, url string, edit ...func(*llm.OpenAIOptions)) *llm.OpenAI {
	t.Helper()
	o := llm.OpenAIOptions{BaseURL: url, Model: openaitest.Model, Timeout: 5 * time.Second, Retries: 2, Backoff: 10 * time.Millisecond, KeySetting: "MMCP_LLM_1_API_KEY"}
	for _, e := range edit {
		e(&o)
	}
	c, err := llm.NewOpenAI(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestOpenAIStreamsAReplyWithTheSchema(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "not-for-this-server") // the library must not pick it up
	fake := openaitest.New(t, openaitest.Reply{Content: `{"answer":"hello there, friend"}`, Pieces: 4, PromptTokens: 40, CompletionTokens: 9})
	c := newOpenAI(t, fake.URL)
	var pieces []string
	reply, err := c.ChatStream(context.Background(), hello, answerSchema, func(s string) { pieces = append(pieces, s) })
	if err != nil {
		t.Fatal(err)
	}
	if reply.Content != `{"answer":"hello there, friend"}` || strings.Join(pieces, "") != reply.Content || len(pieces) != 4 {
		t.Errorf("reply %q from pieces %q", reply.Content, pieces)
	}
	if reply.Usage.PromptTokens != 40 || reply.Usage.CompletionTokens != 9 || reply.Usage.Calls != 1 || reply.Model != openaitest.Model || reply.Truncated {
		t.Errorf("reply = %+v", reply)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if !r.Stream || r.StreamOptions == nil || !r.StreamOptions.IncludeUsage {
		t.Errorf("not streamed with usage: %+v", r)
	}
	rf := r.ResponseFormat
	if rf == nil || rf.Type != "json_schema" || rf.JSONSchema == nil || rf.JSONSchema.Name == "" || rf.JSONSchema.Strict == nil || !*rf.JSONSchema.Strict {
		t.Fatalf("response_format = %+v", rf)
	}
	if string(rf.JSONSchema.Schema) != string(answerSchema) {
		t.Errorf("schema sent = %s", rf.JSONSchema.Schema)
	}
	if r.Authorization != "" {
		t.Errorf("a key was sent although none is set: %q", r.Authorization)
	}
	if len(r.Messages) != 2 || r.Messages[0].Role != "system" || r.Messages[1].Role != "user" || r.Model != openaitest.Model {
		t.Errorf("messages = %+v", r.Messages)
	}
}

func TestOpenAIKey(t *testing.T) {
	fake := openaitest.New(t, openaitest.Reply{Content: `{"answer":"ok"}`})
	fake.Key("right-key")
	_, err := newOpenAI(t, fake.URL, func(o *llm.OpenAIOptions) { o.APIKey = "wrong-key" }).Chat(context.Background(), hello, answerSchema)
	if !errors.Is(err, llm.ErrUnauthorized) || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "MMCP_LLM_1_API_KEY") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "wrong-key") {
		t.Error("the key is in the error")
	}
	if len(fake.Requests()) != 0 {
		t.Error("a refused request was recorded as a chat")
	}
	reply, err := newOpenAI(t, fake.URL, func(o *llm.OpenAIOptions) { o.APIKey = "right-key" }).Chat(context.Background(), hello, answerSchema)
	if err != nil || reply.Content != `{"answer":"ok"}` {
		t.Fatalf("with the key: %v %+v", err, reply)
	}
	if got := fake.Requests()[0].Authorization; got != "Bearer right-key" {
		t.Errorf("Authorization = %q", got)
	}
}

func TestOpenAIErrorKinds(t *testing.T) {
	refusedURL := "http://" + freeAddr(t) + "/v1"
	tests := []struct {
		name     string
		script   []openaitest.Reply
		setup    func(*openaitest.Server)
		model    string
		url      string
		retries  int
		want     error
		wantText string
		wantReqs int
	}{
		{name: "unknown model", model: "no-such-model", want: llm.ErrModelMissing, wantText: "no-such-model", wantReqs: 1},
		{name: "429 after every retry", retries: 1, script: []openaitest.Reply{{Status: 429, RetryAfter: "0"}, {Status: 429, RetryAfter: "0"}},
			want: llm.ErrUnavailable, wantText: "after 2 attempts", wantReqs: 2},
		{name: "503 loading, then a reply", retries: 2, script: []openaitest.Reply{{Status: 503, Error: "Loading model"}, {Content: `{"answer":"ok"}`}}, wantReqs: 2},
		{name: "500 is a server error, not retried", retries: 3, script: []openaitest.Reply{{Status: 500, Error: "runner crashed"}},
			want: llm.ErrServerError, wantText: "runner crashed", wantReqs: 1},
		{name: "502 page from a proxy", script: []openaitest.Reply{{Status: 502, Error: "<html>bad gateway</html>"}},
			want: llm.ErrServerError, wantText: "502", wantReqs: 1},
		{name: "context too long", setup: func(s *openaitest.Server) { s.ContextSize(1) },
			want: llm.ErrContextTooLong, wantText: "longer than the model's context (1 tokens)", wantReqs: 1},
		{name: "refused connection", url: refusedURL, retries: 2, want: llm.ErrUnavailable, wantText: "cannot reach"},
		{name: "error event mid-stream", script: []openaitest.Reply{{Content: `{"answer":"o`, StreamError: "slot failed"}},
			want: llm.ErrBadResponse, wantText: "slot failed", wantReqs: 1},
		{name: "no finish", script: []openaitest.Reply{{Content: `{"answer":"o`, NoFinish: true}},
			want: llm.ErrBadResponse, wantText: "incomplete", wantReqs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := openaitest.New(t, tt.script...)
			if tt.setup != nil {
				tt.setup(fake)
			}
			url := fake.URL
			if tt.url != "" {
				url = tt.url
			}
			c := newOpenAI(t, url, func(o *llm.OpenAIOptions) {
				o.Retries = tt.retries
				if tt.model != "" {
					o.Model = tt.model
				}
			})
			_, err := c.Chat(context.Background(), hello, answerSchema)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("err = %v", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("err = %v, want %v", err, tt.want)
			case tt.want != nil && !strings.Contains(err.Error(), tt.wantText):
				t.Errorf("err = %q, want it to say %q", err, tt.wantText)
			}
			if n := len(fake.Requests()); n != tt.wantReqs {
				t.Errorf("%d requests, want %d", n, tt.wantReqs)
			}
		})
	}
}

func TestOpenAIHonoursRetryAfter(t *testing.T) {
	fake := openaitest.New(t, openaitest.Reply{Status: 429, RetryAfter: "1", Error: "slow down"}, openaitest.Reply{Content: `{"answer":"ok"}`})
	c := newOpenAI(t, fake.URL, func(o *llm.OpenAIOptions) { o.Backoff = time.Millisecond })
	start := time.Now()
	reply, err := c.Chat(context.Background(), hello, answerSchema)
	if err != nil || reply.Content != `{"answer":"ok"}` {
		t.Fatalf("%v %+v", err, reply)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("retried after %s, before the server's Retry-After of 1s", took)
	}
}

func TestOpenAISchemaRefusedAsLlamaCppDoes(t *testing.T) {
	fake := openaitest.New(t)
	unanchored := json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","pattern":"[a-z]+"}},"required":["id"]}`)
	_, err := newOpenAI(t, fake.URL).Chat(context.Background(), hello, unanchored)
	if !errors.Is(err, llm.ErrSchemaRefused) || !strings.Contains(err.Error(), "response_format") || !strings.Contains(err.Error(), "Pattern must start with") {
		t.Fatalf("err = %v", err)
	}
}

func TestOpenAITimeoutAndSize(t *testing.T) {
	fake := openaitest.New(t, openaitest.Reply{Content: `{"answer":"a long one"}`, Hang: true})
	c := newOpenAI(t, fake.URL, func(o *llm.OpenAIOptions) { o.Timeout = 2 * time.Second; o.IdleTimeout = 200 * time.Millisecond })
	_, err := c.Chat(context.Background(), hello, answerSchema)
	if !errors.Is(err, llm.ErrTimeout) || !strings.Contains(err.Error(), "MMCP_LLM_IDLE_TIMEOUT") {
		t.Fatalf("hang: err = %v", err)
	}
	// No schema: the fake then sends what it is told, however large.
	huge := strings.Repeat("x", llm.MaxReplyBytes+10)
	fake.Push(openaitest.Reply{Content: huge, Pieces: 300})
	_, err = c.Chat(context.Background(), hello, nil)
	if !errors.Is(err, llm.ErrReplyTooLarge) {
		t.Fatalf("huge: err = %v", err)
	}
}

func TestOpenAICheckAndBudget(t *testing.T) {
	fake := openaitest.New(t)
	c := newOpenAI(t, fake.URL)
	if err := c.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	fake.Models("other-model", "third")
	err := c.Check(context.Background())
	if !errors.Is(err, llm.ErrModelMissing) || !strings.Contains(err.Error(), "other-model, third") {
		t.Fatalf("err = %v", err)
	}
	// A refusal that names the context teaches it: the budget follows.
	fake.Models(openaitest.Model)
	before, _ := c.PromptBudget(context.Background())
	fake.ContextSize(2048)
	long := []convo.Message{{Role: convo.User, Content: strings.Repeat("word ", 2000)}}
	if _, err := c.Chat(context.Background(), long, answerSchema); !errors.Is(err, llm.ErrContextTooLong) {
		t.Fatalf("err = %v", err)
	}
	after, why := c.PromptBudget(context.Background())
	if after >= before || !strings.Contains(why, "2048-token context") || !strings.Contains(why, "as the server reported it") {
		t.Errorf("budget %d -> %d (%s)", before, after, why)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return freeAddrTB(t)
}

func freeAddrTB(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
