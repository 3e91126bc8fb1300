package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// removeTool is an in-process tool that needs approval and counts its runs.
type removeTool struct {
	runs atomic.Int32
}

func (r *removeTool) Tools() []loop.Tool {
	return []loop.Tool{{Tool: schema.Tool{Name: "transmission_remove", Description: "Remove torrents",
		Schema: json.RawMessage(`{"type":"object","properties":{"ids":{"type":"array","items":{"type":"integer"}}},"required":["ids"],"additionalProperties":false}`)},
		NeedsApproval: true}}
}

func (r *removeTool) Call(context.Context, string, json.RawMessage) (string, error) {
	r.runs.Add(1)
	return `{"removed":[3]}`, nil
}

func call(tool, args, thought string) ollamatest.Reply {
	return ollamatest.Reply{Content: fmt.Sprintf(`{"thought":%q,"action":%q,"args":%s}`, thought, tool, args)}
}

func chat(t *testing.T, e *env, body string) server.ChatResponse {
	t.Helper()
	resp, data := e.do(t, "POST", "/v1/chat", body)
	if resp.StatusCode != 200 {
		t.Fatalf("chat %s: %d %s", body, resp.StatusCode, data)
	}
	var out server.ChatResponse
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestApprovalFlow(t *testing.T) {
	for _, decision := range []string{"approve", "deny"} {
		t.Run(decision, func(t *testing.T) {
			tool := &removeTool{}
			e := startWith(t, options{tools: tool},
				call("transmission_remove", `{"ids":[3]}`, "The user asked to **remove** torrent 3, see https://evil.example/x <b>now</b>."),
				final("Removed."))
			req := chat(t, e, `{"message":"remove torrent 3"}`)
			if req.Type != server.TypeActionRequest || req.ApprovalID == "" || req.Tool != "transmission_remove" || string(req.Args) != `{"ids":[3]}` {
				t.Fatalf("action request = %+v", req)
			}
			if req.Explanation != "The user asked to remove torrent 3, see now." {
				t.Errorf("explanation = %q", req.Explanation)
			}
			if tool.runs.Load() != 0 {
				t.Fatal("the tool ran before approval")
			}
			body := fmt.Sprintf(`{"session_id":%q,"approval_id":%q,"decision":%q}`, req.SessionID, req.ApprovalID, decision)
			resp, data := e.do(t, "POST", "/v1/chat/respond", body)
			if resp.StatusCode != 200 {
				t.Fatalf("respond: %d %s", resp.StatusCode, data)
			}
			var out server.ChatResponse
			json.Unmarshal(data, &out)
			want := int32(1)
			if decision == "deny" {
				want = 0
			}
			if out.Type != server.TypeAnswer || out.Answer != "Removed." || tool.runs.Load() != want {
				t.Errorf("after %s: %+v, runs %d", decision, out, tool.runs.Load())
			}
			// Replaying the answer runs nothing.
			resp, data = e.do(t, "POST", "/v1/chat/respond", body)
			if resp.StatusCode != 409 || !strings.Contains(string(data), `"approval_used"`) || tool.runs.Load() != want {
				t.Errorf("replay: %d %s, runs %d", resp.StatusCode, data, tool.runs.Load())
			}
			// The session reads as a person would: question, call, result, answer.
			_, data = e.do(t, "GET", "/v1/sessions/"+req.SessionID, "")
			var view server.SessionView
			json.Unmarshal(data, &view)
			if len(view.Turns) != 1 || view.Turns[0].Status != "done" {
				t.Fatalf("session = %s", data)
			}
			var types []string
			for _, it := range view.Turns[0].Items {
				types = append(types, it.Type)
			}
			if !slices.Equal(types, []string{"user", "tool_call", "tool_result", "assistant"}) {
				t.Errorf("items = %v", types)
			}
		})
	}
}

func TestStaleAndSupersededApprovals(t *testing.T) {
	tool := &removeTool{}
	e := startWith(t, options{tools: tool, limits: server.Limits{MaxMessageChars: 100, MaxConcurrentTurns: 4, ApprovalTTL: time.Millisecond}},
		call("transmission_remove", `{"ids":[3]}`, "remove it"))
	req := chat(t, e, `{"message":"remove torrent 3"}`)
	time.Sleep(5 * time.Millisecond) // past the 1 ms time to live
	resp, data := e.do(t, "POST", "/v1/chat/respond", fmt.Sprintf(`{"session_id":%q,"approval_id":%q,"decision":"approve"}`, req.SessionID, req.ApprovalID))
	if resp.StatusCode != 409 || !strings.Contains(string(data), `"approval_expired"`) || tool.runs.Load() != 0 {
		t.Errorf("stale: %d %s, runs %d", resp.StatusCode, data, tool.runs.Load())
	}

	// A new message instead of an answer: the model learns the call never ran.
	e2 := startWith(t, options{tools: tool}, call("transmission_remove", `{"ids":[3]}`, "remove it"), final("OK, not removed."))
	req = chat(t, e2, `{"message":"remove torrent 3"}`)
	out := chat(t, e2, fmt.Sprintf(`{"message":"actually, keep it","session_id":%q}`, req.SessionID))
	if out.Answer != "OK, not removed." {
		t.Fatalf("answer = %+v", out)
	}
	msgs := e2.fake.Requests()[1].Messages
	var seen bool
	for _, m := range msgs {
		seen = seen || m.Content == "transmission_remove was not run: the user sent a new message instead of approving it."
	}
	if !seen {
		t.Errorf("the model was not told the call was dropped: %+v", msgs)
	}
	resp, _ = e2.do(t, "POST", "/v1/chat/respond", fmt.Sprintf(`{"session_id":%q,"approval_id":%q,"decision":"approve"}`, req.SessionID, req.ApprovalID))
	if resp.StatusCode != 409 || tool.runs.Load() != 0 {
		t.Errorf("superseded approval: %d, runs %d", resp.StatusCode, tool.runs.Load())
	}
	resp, data = e2.do(t, "POST", "/v1/chat/respond", fmt.Sprintf(`{"session_id":%q,"approval_id":"nope","decision":"approve"}`, req.SessionID))
	if resp.StatusCode != 404 || !strings.Contains(string(data), "approval_not_found") {
		t.Errorf("unknown approval: %d %s", resp.StatusCode, data)
	}
	resp, _ = e2.do(t, "POST", "/v1/chat/respond", fmt.Sprintf(`{"session_id":%q,"approval_id":%q,"decision":"maybe"}`, req.SessionID, req.ApprovalID))
	if resp.StatusCode != 400 {
		t.Errorf("bad decision: %d", resp.StatusCode)
	}
}

func TestSSE(t *testing.T) {
	tool := &removeTool{}
	e := startWith(t, options{tools: tool}, ollamatest.Reply{Content: "garbage"}, final("Streamed answer."))
	_, streamed := e.stream(t, "/v1/chat", `{"message":"hi"}`)
	events := eventNames(streamed)
	var last json.RawMessage
	if len(streamed) > 0 {
		last = streamed[len(streamed)-1].data
	}
	want := []string{"start", "step_start", "model_reply", "validation_error", "thought_delta", "answer_delta", "model_reply", "final", "done"}
	if !slices.Equal(events, want) {
		t.Errorf("events = %v\nwant     %v", events, want)
	}
	var done server.ChatResponse
	if err := json.Unmarshal(last, &done); err != nil || done.Answer != "Streamed answer." || done.SessionID == "" || done.Type != "answer" {
		t.Errorf("done event = %s (%v)", last, err)
	}
}

func TestSSEError(t *testing.T) {
	e := start(t, "", ollamatest.Reply{Status: 404, Error: "model 'test-model' not found"})
	_, events := e.stream(t, "/v1/chat", `{"message":"hi"}`)
	if !slices.ContainsFunc(events, func(ev sseEvent) bool {
		return ev.name == "error" && strings.HasPrefix(string(ev.data), `{"error":{"code":"model_missing"`)
	}) {
		t.Errorf("no model_missing error event in %v", eventNames(events))
	}
}

func TestSessionsAPI(t *testing.T) {
	e := start(t, "")
	e.fake.Handle(func(api.ChatRequest) ollamatest.Reply { return final("ok") })
	var ids []string
	for i := range 5 {
		ids = append(ids, chat(t, e, fmt.Sprintf(`{"message":"question number %d with a long tail that goes on and on beyond sixty characters"}`, i)).SessionID)
	}
	// Newest first, two at a time.
	var got []string
	cursor := ""
	for page := 0; ; page++ {
		path := "/v1/sessions?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		resp, data := e.do(t, "GET", path, "")
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, data)
		}
		var list server.SessionList
		json.Unmarshal(data, &list)
		for _, s := range list.Sessions {
			got = append(got, s.ID)
			if !strings.HasPrefix(s.Title, "question number") || len([]rune(s.Title)) > 60 {
				t.Errorf("title %q", s.Title)
			}
		}
		if cursor = list.NextCursor; cursor == "" {
			break
		}
		if page > 5 {
			t.Fatal("pagination does not end")
		}
	}
	slices.Reverse(ids)
	if !slices.Equal(got, ids) {
		t.Errorf("listed %v, want newest first %v", got, ids)
	}
	for _, path := range []string{"/v1/sessions?limit=0", "/v1/sessions?limit=101", "/v1/sessions?cursor=zzz"} {
		if resp, _ := e.do(t, "GET", path, ""); resp.StatusCode != 400 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	resp, data := e.do(t, "PATCH", "/v1/sessions/"+ids[0], `{"title":"Dune plans"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(data), `"title":"Dune plans"`) {
		t.Errorf("rename: %d %s", resp.StatusCode, data)
	}
	if resp, _ := e.do(t, "PATCH", "/v1/sessions/"+ids[0], `{"title":"  "}`); resp.StatusCode != 400 {
		t.Errorf("blank title: %d", resp.StatusCode)
	}
	if resp, _ := e.do(t, "DELETE", "/v1/sessions/"+ids[0], ""); resp.StatusCode != 204 {
		t.Errorf("delete: %d", resp.StatusCode)
	}
	for _, m := range []string{"GET", "DELETE"} {
		if resp, _ := e.do(t, m, "/v1/sessions/"+ids[0], ""); resp.StatusCode != 404 {
			t.Errorf("%s deleted: %d", m, resp.StatusCode)
		}
	}
}

func TestLimits(t *testing.T) {
	slow := final("slow")
	slow.Delay = 2 * time.Second
	e := startWith(t, options{limits: server.Limits{MaxMessageChars: 10, MaxConcurrentTurns: 1, ApprovalTTL: time.Minute}}, slow, final("x"))
	resp, data := e.do(t, "POST", "/v1/chat", `{"message":"ééééééééééé"}`)
	if resp.StatusCode != 400 || !strings.Contains(string(data), `"message_too_long"`) || !strings.Contains(string(data), "11 characters; at most 10") {
		t.Errorf("long message: %d %s", resp.StatusCode, data)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		http.Post(e.url+"/v1/chat", "application/json", strings.NewReader(`{"message":"slow"}`))
	}()
	for deadline := time.Now().Add(5 * time.Second); len(e.fake.Requests()) == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	resp, data = e.do(t, "POST", "/v1/chat", `{"message":"hi"}`)
	if resp.StatusCode != 503 || !strings.Contains(string(data), `"too_busy"`) || !strings.Contains(string(data), `"retryable":true`) {
		t.Errorf("over the turn limit: %d %s", resp.StatusCode, data)
	}
	wg.Wait()
}

// TestCancelledTurnIsRecorded: a client that goes away cancels the turn, and
// the session says so.
func TestCancelledTurnIsRecorded(t *testing.T) {
	slow := final("never")
	slow.Delay = 10 * time.Second
	e := start(t, "", final("first"), slow)
	first := chat(t, e, `{"message":"hi"}`)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/chat", strings.NewReader(fmt.Sprintf(`{"message":"slow one","session_id":%q}`, first.SessionID)))
	req.Header.Set("Content-Type", "application/json")
	go func() {
		for len(e.fake.Requests()) < 2 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the request was not cancelled")
	}
	var view server.SessionView
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		_, data := e.do(t, "GET", "/v1/sessions/"+first.SessionID, "")
		json.Unmarshal(data, &view)
		if len(view.Turns) == 2 && view.Turns[1].Status != "running" {
			break
		}
	}
	if len(view.Turns) != 2 || view.Turns[1].Status != "cancelled" || view.Turns[1].Items[0].Content != "slow one" {
		t.Errorf("turns = %+v", view.Turns)
	}
}

func TestExplain(t *testing.T) {
	for thought, want := range map[string]string{
		"Dune (2021) is TMDB id 438631; add it with radarr_add.":                         "Dune (2021) is TMDB id 438631; add it with radarr_add.",
		"Remove the torrents with a ratio < 1 and a size > 10 GB, about ~40 GB in all.":  "Remove the torrents with a ratio < 1 and a size > 10 GB, about ~40 GB in all.",
		"Add **Dune** [now](https://evil.example) <b>please</b>":                         "Add Dune now please",
		"The user asked to **remove** torrent 3, see https://evil.example/x <b>now</b>.": "The user asked to remove torrent 3, see now.",
		"# Plan\n> quote _emphasis_ and `code` ~~gone~~ www.evil.example magnet:?xt=urn": "Plan quote emphasis and code gone",
	} {
		if got := server.Explain(thought); got != want {
			t.Errorf("Explain(%q) = %q, want %q", thought, got, want)
		}
	}
}
