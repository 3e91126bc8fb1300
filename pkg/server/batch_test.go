package server_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// TestBatchForClients: a reply asking for two calls at once streams one
// tool_start and one tool_end per call, each with its place (call, batch);
// the answer's steps hold one entry per call; the stored session shows both
// calls and both results.
func TestBatchForClients(t *testing.T) {
	e := startWith(t, options{tools: &tools{}},
		ollamatest.Reply{Content: `{"thought":"both","calls":[{"action":"tmdb_search","args":{"query":"Dune"}},{"action":"tmdb_search","args":{"query":"Arrival"}}]}`},
		final("Both found."))
	_, events := e.stream(t, "/v1/chat", `{"message":"find both"}`)
	var tools []loop.Event
	var done server.ChatResponse
	for _, ev := range events {
		switch ev.name {
		case "tool_start", "tool_end":
			var te loop.Event
			if err := json.Unmarshal(ev.data, &te); err != nil {
				t.Fatal(err)
			}
			tools = append(tools, te)
		case "done":
			if err := json.Unmarshal(ev.data, &done); err != nil {
				t.Fatal(err)
			}
		}
	}
	var seen []string
	for _, ev := range tools {
		if ev.Batch != 2 || ev.Step != 1 {
			t.Errorf("event %+v", ev)
		}
		seen = append(seen, fmt.Sprintf("%s %d", ev.Type, ev.Call))
	}
	slices.Sort(seen)
	if want := []string{"tool_end 1", "tool_end 2", "tool_start 1", "tool_start 2"}; !slices.Equal(seen, want) {
		t.Errorf("tool events %q", seen)
	}
	if done.Answer != "Both found." || len(done.Steps) != 3 || done.Steps[0].Call != 1 || done.Steps[1].Call != 2 ||
		string(done.Steps[1].Args) != `{"query":"Arrival"}` || done.Steps[1].Batch != 2 || done.Fallback {
		t.Fatalf("done = %+v", done)
	}

	_, body := e.do(t, "GET", "/v1/sessions/"+done.SessionID, "")
	var view struct {
		Turns []server.TurnView `json:"turns"`
	}
	if err := json.Unmarshal(body, &view); err != nil || len(view.Turns) != 1 {
		t.Fatalf("session: %s", body)
	}
	var items []string
	for _, it := range view.Turns[0].Items {
		items = append(items, it.Type+" "+it.Tool)
	}
	if want := []string{"user ", "tool_call tmdb_search", "tool_call tmdb_search", "tool_result tmdb_search", "tool_result tmdb_search", "assistant "}; !slices.Equal(items, want) {
		t.Errorf("session items %q", items)
	}
}

// TestFallbackInTheAnswer: every call failed; the answer says so.
func TestFallbackInTheAnswer(t *testing.T) {
	e := startWith(t, options{tools: &failingTools{err: "TMDB is unreachable"}},
		call("tmdb_search", `{"query":"Dune"}`, "look it up"), final("TMDB failed; from memory, Dune is from 2021."))
	got := chat(t, e, `{"message":"when is Dune from?"}`)
	if !got.Fallback || got.Steps[0].Error != "TMDB is unreachable" {
		t.Errorf("response = %+v", got)
	}
}
