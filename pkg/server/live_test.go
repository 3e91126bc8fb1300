package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// slowFinal is an answer the fake model gives after delay.
func slowFinal(answer string, delay time.Duration) ollamatest.Reply {
	r := final(answer)
	r.Delay = delay
	return r
}

// post sends body to path with the given Accept header and reads the whole
// answer.
func (e *env) post(t *testing.T, path, body, accept string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
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
	return resp, string(data)
}

// approvalFor runs a turn that stops at radarr_add and returns the body that
// approves it.
func approvalFor(t *testing.T, e *env) string {
	t.Helper()
	e.fake.Push(call("radarr_add", `{"query":"Dune"}`, "add it"))
	req := chat(t, e, `{"message":"add Dune"}`)
	if req.Type != server.TypeActionRequest {
		t.Fatalf("no action request: %+v", req)
	}
	return fmt.Sprintf(`{"session_id":%q,"approval_id":%q,"decision":"approve"}`, req.SessionID, req.ApprovalID)
}

// liveRoutes are the three streamed turns: a chat, the answer to an
// approval, and an OpenAI completion; each gets body from prepare.
var liveRoutes = []struct {
	name, path string
	prepare    func(t *testing.T, e *env) string
	// answered reports whether a line of the stream carries the answer.
	answered func(line string) bool
}{
	{"chat", "/v1/chat", func(*testing.T, *env) string { return `{"message":"hi"}` },
		func(l string) bool { return l == "event: final" }},
	{"respond", "/v1/chat/respond", approvalFor,
		func(l string) bool { return l == "event: final" }},
	{"openai", "/v1/chat/completions", func(*testing.T, *env) string {
		return `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}, func(l string) bool { return strings.Contains(l, `"content":"Slow answer."`) }},
}

// TestStreamHeartbeat: while the model is slow, each stream gets a comment
// line every MMCP_STREAM_HEARTBEAT, before the answer, and clients read the
// stream as before.
func TestStreamHeartbeat(t *testing.T) {
	const every, delay = 50 * time.Millisecond, 600 * time.Millisecond
	for _, rt := range liveRoutes {
		t.Run(rt.name, func(t *testing.T) {
			e := startWith(t, options{tools: &tools{}, limits: server.Limits{StreamHeartbeat: every}})
			body := rt.prepare(t, e)
			e.fake.Push(slowFinal("Slow answer.", delay))
			resp, text := e.post(t, rt.path, body, "text/event-stream")
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, text)
			}
			beats, answered := 0, false
			for line := range strings.SplitSeq(text, "\n") {
				switch {
				case rt.answered(line):
					answered = true
				case line == strings.TrimSuffix(server.Heartbeat, "\n") && !answered:
					beats++
				case strings.HasPrefix(line, ":"):
					t.Errorf("comment line %q after the answer, or not a heartbeat", line)
				}
			}
			// About delay/every; a loaded machine may send fewer.
			if !answered || beats < 3 {
				t.Errorf("%d heartbeats before the answer (answered %v):\n%s", beats, answered, text)
			}
		})
	}
	// openai-go reads a stream with heartbeats as any other.
	e := startWith(t, options{limits: server.Limits{StreamHeartbeat: every}}, slowFinal("Slow answer.", 300*time.Millisecond))
	stream := openaiClient(e, "").Chat.Completions.NewStreaming(context.Background(), params(openai.UserMessage("hi")))
	defer stream.Close()
	var content strings.Builder
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			content.WriteString(c.Delta.Content)
		}
	}
	if stream.Err() != nil || content.String() != "Slow answer." {
		t.Errorf("openai-go read %q, then %v", content.String(), stream.Err())
	}
}

// TestTurnTimeout: a turn past MMCP_TURN_TIMEOUT ends with 504 timeout (in a
// stream, its one error event), says which setting, and is recorded failed.
func TestTurnTimeout(t *testing.T) {
	const limit = 300 * time.Millisecond
	tests := []struct {
		name, path, accept string
		prepare            func(t *testing.T, e *env) string
	}{
		{"chat", "/v1/chat", "", func(*testing.T, *env) string { return `{"message":"hi"}` }},
		{"chat stream", "/v1/chat", "text/event-stream", func(*testing.T, *env) string { return `{"message":"hi"}` }},
		{"respond", "/v1/chat/respond", "", approvalFor},
		{"respond stream", "/v1/chat/respond", "text/event-stream", approvalFor},
		{"openai", "/v1/chat/completions", "", func(*testing.T, *env) string {
			return `{"messages":[{"role":"user","content":"hi"}]}`
		}},
		{"openai stream", "/v1/chat/completions", "", func(*testing.T, *env) string {
			return `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startWith(t, options{tools: &tools{}, limits: server.Limits{TurnTimeout: limit}})
			body := tc.prepare(t, e)
			e.fake.Push(slowFinal("too late", 10*time.Second))
			start := time.Now()
			resp, text := e.post(t, tc.path, body, tc.accept)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the turn took %s, past its deadline of %s", took, limit)
			}
			code, msg := timeoutError(t, resp, text)
			if code != "timeout" || !strings.Contains(msg, "did not finish within 300ms (MMCP_TURN_TIMEOUT)") {
				t.Errorf("code %q, message %q:\n%s", code, msg, text)
			}
			if l := logLine(t, e.logs.String(), resp.Header.Get("X-Trace-Id"), "http"); l["error_code"] != "timeout" {
				t.Errorf("http log line %v", l)
			}
			if tc.path == "/v1/chat/completions" {
				return // stateless: nothing recorded
			}
			sessions, _, err := e.store.Sessions(context.Background(), "", 10)
			if err != nil || len(sessions) != 1 {
				t.Fatalf("sessions %v, %v", sessions, err)
			}
			turns, err := e.store.Turns(context.Background(), sessions[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			last := turns[len(turns)-1]
			if last.Status != store.TurnFailed || !strings.Contains(last.Error, "MMCP_TURN_TIMEOUT") {
				t.Errorf("turn recorded %s: %q", last.Status, last.Error)
			}
		})
	}
}

// timeoutError reads the error of any route's answer: the native envelope
// (a JSON body or the stream's error event) or OpenAI's (a body or a chunk).
func timeoutError(t *testing.T, resp *http.Response, text string) (code, msg string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	switch {
	case resp.Header.Get("Content-Type") != "text/event-stream":
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("status %d, want 504", resp.StatusCode)
		}
		_ = json.Unmarshal([]byte(text), &e)
	default:
		for line := range strings.SplitSeq(text, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && strings.HasPrefix(d, `{"error":`) {
				_ = json.Unmarshal([]byte(d), &e)
			}
		}
	}
	return e.Error.Code, e.Error.Message
}

// TestOpenAIReasoning: a streamed completion shows the turn's steps as
// reasoning_content (thought, tool, one line of result or error), before the
// answer, which alone is the content.
func TestOpenAIReasoning(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name   string
		script []ollamatest.Reply
		tools  *failingTools
		want   string
	}{
		{"tool result", []ollamatest.Reply{call("tmdb_search", `{"query":"dune"}`, "Look it up."), final("Dune (2021).")}, &failingTools{},
			"Step 1: Look it up.\n\nCalling `tmdb_search` `{\"query\":\"dune\"}`\n\nResult: `Dune (2021), id 438631 ![x](http://evil.example/x.png) ''`\n\nStep 2: t\n\n"},
		{"tool error, long", []ollamatest.Reply{call("tmdb_search", `{"query":"dune"}`, "Look it up."), final("No luck.")}, &failingTools{err: long},
			"Step 1: Look it up.\n\nCalling `tmdb_search` `{\"query\":\"dune\"}`\n\nFailed: `" + strings.Repeat("x", 200) + "…`\n\nStep 2: t\n\n"},
		{"invalid reply", []ollamatest.Reply{{Content: "not json"}, final("Fixed.")}, &failingTools{},
			"Step 1: the reply was not valid, asking again: `reply: no JSON object found; send one JSON object and nothing else`\n\nStep 1: t\n\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startWith(t, options{tools: tc.tools}, tc.script...)
			stream := openaiClient(e, "").Chat.Completions.NewStreaming(context.Background(), params(openai.UserMessage("find dune")))
			defer stream.Close()
			var reasoning, content strings.Builder
			for stream.Next() {
				for _, c := range stream.Current().Choices {
					if f, ok := c.Delta.JSON.ExtraFields["reasoning_content"]; ok {
						var s string
						if err := json.Unmarshal([]byte(f.Raw()), &s); err != nil {
							t.Fatalf("reasoning_content %s: %v", f.Raw(), err)
						}
						if content.Len() > 0 {
							t.Errorf("reasoning %q after the content", s)
						}
						reasoning.WriteString(s)
					}
					content.WriteString(c.Delta.Content)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if reasoning.String() != tc.want {
				t.Errorf("reasoning = %q\nwant        %q", reasoning.String(), tc.want)
			}
			if want := tc.script[len(tc.script)-1].Content; !strings.Contains(want, `"answer":"`+content.String()+`"`) {
				t.Errorf("content = %q", content.String())
			}
		})
	}
}

// failingTools is tmdb_search answering with a result that holds Markdown,
// or failing with err.
type failingTools struct {
	tools
	err string
}

func (f *failingTools) Call(ctx context.Context, name string, args json.RawMessage) (string, error) {
	if f.err != "" {
		return "", fmt.Errorf("%s", f.err)
	}
	return "Dune (2021),\n id 438631 ![x](http://evil.example/x.png) ``", nil
}
