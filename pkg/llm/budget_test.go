package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// TestChatNeverLetsOllamaCut: Ollama's defaults drop the oldest messages of a
// prompt longer than num_ctx (truncate) and shift the context when a reply
// reaches it (shift), silently either way. The client turns both off, on the
// wire, so that the window stays the only thing that cuts.
func TestChatNeverLetsOllamaCut(t *testing.T) {
	var body map[string]json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("request body: %v", err)
		}
		_, _ = io.WriteString(w, `{"model":"m","message":{"role":"assistant","content":"{}"},"done":true,"done_reason":"stop"}`+"\n")
	}))
	defer srv.Close()
	if _, err := newClient(t, srv.URL).Chat(context.Background(), ask("hi"), schema); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"truncate", "shift"} {
		if got := string(body[field]); got != "false" {
			t.Errorf("%s = %q in the request, want false", field, got)
		}
	}
}

// TestChatContextTooLong: with truncate off, Ollama answers a prompt longer
// than num_ctx with 400 and its own words. That is ErrContextTooLong, not
// retried, and the message says which setting is short.
func TestChatContextTooLong(t *testing.T) {
	tests := []struct {
		name    string
		reply   ollamatest.Reply
		tooLong bool
	}{
		{"the runner's words", ollamatest.Reply{Status: 400, Error: "the input length exceeds the context length"}, true},
		{"older words", ollamatest.Reply{Status: 400, Error: "input exceeds maximum context length"}, true},
		{"another 400", ollamatest.Reply{Status: 400, Error: "invalid format: expected \"json\" or a JSON schema"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ollamatest.New(t, tt.reply, tt.reply)
			_, err := newClient(t, srv.URL).Chat(context.Background(), ask("hi"), schema)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, llm.ErrContextTooLong) != tt.tooLong {
				t.Fatalf("err = %v; ErrContextTooLong: %v, want %v", err, errors.Is(err, llm.ErrContextTooLong), tt.tooLong)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1 (not retried)", n)
			}
			if !tt.tooLong {
				return
			}
			if errors.Is(err, llm.ErrBadResponse) || errors.Is(err, llm.ErrUnavailable) {
				t.Errorf("err = %v is also a bad response or unavailable", err)
			}
			for _, s := range []string{model, "127.0.0.1", "num_ctx 4096", "MMCP_OLLAMA_NUM_CTX", tt.reply.Error} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %q, want it to contain %q", err, s)
				}
			}
		})
	}
}

// TestChatReplyCutAtTheContext: with shift off, a reply that reaches num_ctx
// ends with done_reason "length"; the reply says it was cut.
func TestChatReplyCutAtTheContext(t *testing.T) {
	for _, tt := range []struct {
		reason string
		cut    bool
	}{{"length", true}, {"stop", false}, {"", false}} {
		t.Run("done_reason="+tt.reason, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				_, _ = io.WriteString(w, `{"model":"m","message":{"role":"assistant","content":"{\"thought\":\"a"},"done":true,"done_reason":"`+tt.reason+`","eval_count":900}`+"\n")
			}))
			defer srv.Close()
			r, err := newClient(t, srv.URL).Chat(context.Background(), ask("hi"), schema)
			if err != nil {
				t.Fatal(err)
			}
			if r.Truncated != tt.cut || r.Content != `{"thought":"a` {
				t.Errorf("reply = %+v, want Truncated %v and the content as it came", r, tt.cut)
			}
		})
	}
}

// chars is a message of n characters, distinct for each tag.
func chars(tag string, n int) convo.Message {
	return convo.Message{Role: convo.User, Content: tag + strings.Repeat("x", n-len(tag))}
}

// TestPromptBudget: the characters of prompt that fit num_ctx with room kept
// for the reply, at a characters-per-token ratio learned from what Ollama
// says it evaluated. Only the part of a prompt Ollama's cache cannot hold
// teaches it (the cache skips a prefix shared with a prompt before); a call
// that evaluated fewer tokens than any sane ratio allows met a cache the
// client did not know of and teaches nothing; a refusal caps the ratio; the
// ratio stays within 2..6 and moves the budget only in steps of 0.2.
func TestPromptBudget(t *testing.T) {
	sys := chars("system", 4000)
	type call struct {
		msgs      []convo.Message
		evaluated int // prompt_eval_count
		refused   bool
	}
	tests := []struct {
		name      string
		numCtx    int
		calls     []call
		wantRatio string // as the explanation writes it
		wantChars int
	}{
		{name: "before any call", numCtx: 4096, wantRatio: "3.0", wantChars: (4096 - 1024) * 3},
		{name: "a small context keeps a quarter for the reply", numCtx: 2048, wantRatio: "3.0", wantChars: (2048 - 512) * 3},
		{name: "the first call reads the whole prompt", numCtx: 4096,
			calls:     []call{{msgs: []convo.Message{sys}, evaluated: 1000}},
			wantRatio: "4.0", wantChars: (4096 - 1024) * 4},
		{name: "then only what is new", numCtx: 4096,
			calls: []call{
				{msgs: []convo.Message{sys}, evaluated: 1000},
				{msgs: []convo.Message{sys, chars("a", 1200)}, evaluated: 400}, // 3 a token: 5200 in 1400
			},
			wantRatio: "3.7", wantChars: (4096 - 1024) * 37 / 10},
		{name: "what the model wrote counts as held", numCtx: 4096,
			calls: []call{
				{msgs: []convo.Message{sys}, evaluated: 1000},
				// The assistant message may be read from the cache, as
				// the model wrote it: only the 2000 after it count.
				{msgs: []convo.Message{sys, {Role: convo.Assistant, Content: strings.Repeat("r", 900)}, chars("b", 2000)}, evaluated: 1000},
			},
			wantRatio: "3.0", wantChars: (4096 - 1024) * 3},
		{name: "a small new part teaches nothing", numCtx: 4096,
			calls: []call{
				{msgs: []convo.Message{sys}, evaluated: 1000},
				{msgs: []convo.Message{sys, chars("a", 300)}, evaluated: 300},
			},
			wantRatio: "4.0", wantChars: (4096 - 1024) * 4},
		{name: "a cache the client did not know of teaches nothing", numCtx: 4096,
			calls:     []call{{msgs: []convo.Message{sys}, evaluated: 40}},
			wantRatio: "3.0", wantChars: (4096 - 1024) * 3},
		{name: "a small step does not move the budget", numCtx: 4096,
			calls: []call{
				{msgs: []convo.Message{sys}, evaluated: 1000},
				{msgs: []convo.Message{sys, chars("a", 2000)}, evaluated: 520}, // 6000 in 1520: 3.9
			},
			wantRatio: "4.0", wantChars: (4096 - 1024) * 4},
		{name: "dense text stops at 2", numCtx: 4096,
			calls:     []call{{msgs: []convo.Message{sys}, evaluated: 4000}},
			wantRatio: "2.0", wantChars: (4096 - 1024) * 2},
		{name: "sparse text stops at 6", numCtx: 4096,
			calls:     []call{{msgs: []convo.Message{chars("s", 6000)}, evaluated: 1000}},
			wantRatio: "6.0", wantChars: (4096 - 1024) * 6},
		// 10,000 characters took more than 4,096 tokens: fewer than 2.44 a
		// token, whatever was learned before.
		{name: "a refusal caps the ratio", numCtx: 4096,
			calls: []call{
				{msgs: []convo.Message{sys}, evaluated: 800},
				{msgs: []convo.Message{sys, chars("big", 6000)}, refused: true},
			},
			wantRatio: "2.4", wantChars: (4096 - 1024) * 24 / 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ollamatest.New(t)
			for _, c := range tt.calls {
				r := ollamatest.Reply{Content: "{}", PromptTokens: c.evaluated}
				if c.refused {
					r = ollamatest.Reply{Status: 400, Error: "the input length exceeds the context length"}
				}
				srv.Push(r)
			}
			client := newClient(t, srv.URL, func(o *llm.Options) { o.NumCtx = tt.numCtx })
			for i, c := range tt.calls {
				_, err := client.Chat(context.Background(), c.msgs, schema)
				if (err != nil) != c.refused {
					t.Fatalf("call %d: err = %v", i, err)
				}
			}
			got, why := client.PromptBudget(context.Background())
			if got != tt.wantChars {
				t.Errorf("PromptBudget = %d (%s), want %d", got, why, tt.wantChars)
			}
			for _, s := range []string{"MMCP_OLLAMA_NUM_CTX=", tt.wantRatio + " characters per token"} {
				if !strings.Contains(why, s) {
					t.Errorf("explanation %q lacks %q", why, s)
				}
			}
		})
	}
}
