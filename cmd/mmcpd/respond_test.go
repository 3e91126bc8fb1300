package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// TestChatAndRespondCommands drives an approval from the command line: chat
// prints the request with the exact command to answer it, and respond runs
// it.
func TestChatAndRespondCommands(t *testing.T) {
	s := startMediaStack(t)
	s.ollama.Push(
		ollamatest.Reply{Content: `{"thought":"Find the film's TMDB id first.","action":"tmdb_search","args":{"query":"Dune","year":2021}}`},
		ollamatest.Reply{Content: `{"thought":"Dune is TMDB id 438631; I add it to Radarr.","action":"radarr_add","args":{"tmdb_id":438631}}`},
		ollamatest.Reply{Content: `{"thought":"Done.","action":"final_response","args":{"answer":"Added Dune (2021) to Radarr."}}`},
	)
	env := []string{"MMCP_LISTEN_ADDR=" + s.addr, "MMCP_API_TOKEN=" + canary}
	out, err := command(env, "chat", "Add Dune (2021) to my films").CombinedOutput()
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, out)
	}
	text := string(out)
	if !strings.Contains(text, `The agent wants to run radarr_add {"tmdb_id":438631}`) || !strings.Contains(text, "because: Dune is TMDB id 438631; I add it to Radarr.") {
		t.Fatalf("chat output:\n%s", text)
	}
	m := regexp.MustCompile(`Allow it:  mmcpd respond --session (\S+) --approval (\S+) approve`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no respond command in:\n%s", text)
	}
	if n := len(s.radarr.lines()); n != 0 {
		t.Fatalf("Radarr called %d times before the approval", n)
	}
	out, err = command(env, "respond", "--session", m[1], "--approval", m[2], "approve").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Added Dune (2021) to Radarr.") {
		t.Fatalf("respond: %v\n%s", err, out)
	}
	posts := 0
	for _, l := range s.radarr.lines() {
		if strings.HasPrefix(l, "POST ") {
			posts++
		}
	}
	if posts != 1 {
		t.Errorf("Radarr got %d POSTs, want 1: %q", posts, s.radarr.lines())
	}
	// The same answer again: refused, nothing runs.
	out, err = command(env, "respond", "--session", m[1], "--approval", m[2], "approve").CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "approval_used") {
		t.Errorf("replay: %v\n%s", err, out)
	}
	out, err = command(env, "respond", "--session", m[1], "maybe").CombinedOutput()
	if exitCode(err) != 2 || !strings.Contains(string(out), "usage: mmcpd respond") {
		t.Errorf("bad usage: %v\n%s", err, out)
	}
}
