package llm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// TestChatStreamPieces checks that the pieces reach the callback in order as
// the model writes them, one per token, and make up the whole reply.
func TestChatStreamPieces(t *testing.T) {
	const content = `{"thought":"t","action":"final_response","args":{"answer":"Dune (2021)"}}`
	srv := ollamatest.New(t, ollamatest.Reply{Content: content})
	srv.SetCost(ollamatest.Cost{GenRate: 1000, CharsPerToken: 4})
	var pieces []string
	r, err := newClient(t, srv.URL).ChatStream(context.Background(), ask("hi"), schema, func(p string) {
		pieces = append(pieces, p)
	})
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if r.Content != content {
		t.Errorf("content = %q, want %q", r.Content, content)
	}
	if got := strings.Join(pieces, ""); got != content {
		t.Errorf("pieces make %q, want %q", got, content)
	}
	if want := (len(content) + 3) / 4; len(pieces) != want {
		t.Errorf("%d pieces, want %d (one per token)", len(pieces), want)
	}
}

// TestChatIdleTimeout: a model that keeps writing is not cut at Timeout,
// only a silence is: before the first piece (Timeout) or between two
// (IdleTimeout), each named in the error.
func TestChatIdleTimeout(t *testing.T) {
	content := strings.Repeat("abcd", 8) // 8 tokens
	tests := []struct {
		name    string
		reply   ollamatest.Reply
		rate    float64 // tokens per second; 0: no cost model
		timeout time.Duration
		idle    time.Duration
		want    string // in the error; empty: a reply
	}{
		// A piece every 250 ms for 2 s: each wait is a quarter of the
		// first-piece timeout and a sixth of the idle one, so a loaded
		// machine does not cut it; the whole is twice the timeout.
		{name: "steady, longer than the timeout", reply: ollamatest.Reply{Content: content}, rate: 4,
			timeout: time.Second, idle: 1500 * time.Millisecond},
		{name: "silent from the start", reply: ollamatest.Reply{Content: content, Delay: 10 * time.Second},
			timeout: 300 * time.Millisecond, idle: time.Second, want: "did not answer within 300ms (MMCP_LLM_TIMEOUT)"},
		{name: "silent between pieces", reply: ollamatest.Reply{Content: content}, rate: 5,
			timeout: time.Second, idle: 100 * time.Millisecond, want: "sent nothing for 100ms (MMCP_LLM_IDLE_TIMEOUT) after the first piece"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ollamatest.New(t, tt.reply)
			if tt.rate > 0 {
				srv.SetCost(ollamatest.Cost{GenRate: tt.rate, CharsPerToken: 4})
			}
			c := newClient(t, srv.URL, func(o *llm.Options) { o.Timeout, o.IdleTimeout = tt.timeout, tt.idle })
			start := time.Now()
			r, err := c.Chat(context.Background(), ask("hi"), schema)
			took := time.Since(start)
			if tt.want == "" {
				if err != nil || r.Content != content {
					t.Fatalf("Chat = %q, %v; want the whole reply", r.Content, err)
				}
				if took < tt.timeout {
					t.Errorf("took %s, want a reply longer than the timeout %s", took, tt.timeout)
				}
				return
			}
			if !errors.Is(err, llm.ErrTimeout) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrTimeout saying %q", err, tt.want)
			}
			if took > 2*time.Second {
				t.Errorf("took %s, want the cut at the silence", took)
			}
		})
	}
}
