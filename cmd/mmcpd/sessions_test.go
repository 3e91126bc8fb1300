package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// TestSessionsCommands lists, shows and deletes sessions of the real daemon
// from the command line, with the token, and checks the errors a user meets.
func TestSessionsCommands(t *testing.T) {
	down := freeAddr(t) // nothing listens there
	if out, err := command([]string{"MMCP_LISTEN_ADDR=" + down}, "sessions").CombinedOutput(); exitCode(err) != 1 ||
		!strings.Contains(string(out), "no daemon at http://"+down) || !strings.Contains(string(out), "mmcpd serve") {
		t.Errorf("daemon down: exit %d\n%s", exitCode(err), out)
	}

	fake := ollamatest.New(t,
		ollamatest.Reply{Content: `{"thought":"Echo it back first.","action":"works_echo","args":{"text":"ping"}}`},
		ollamatest.Reply{Content: `{"thought":"done","action":"final_response","args":{"answer":"It said ping.\nThat is all."}}`},
		ollamatest.Reply{Content: `{"thought":"easy","action":"final_response","args":{"answer":"Hello."}}`},
	)
	dir := pluginsFolder(t, "works")
	base := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir}
	addr, logs, _ := startDaemon(t, base)
	env := append(base, "MMCP_LISTEN_ADDR="+addr)
	sessions := func(args ...string) (string, int) {
		t.Helper()
		out, err := command(env, append([]string{"sessions"}, args...)...).CombinedOutput()
		return string(out), exitCode(err)
	}

	if out, code := sessions(); code != 0 || strings.TrimSpace(out) != "no sessions" {
		t.Errorf("empty list: exit %d\n%s", code, out)
	}
	sessionOf := regexp.MustCompile(`\(session ([0-9a-f-]{36}), trace`)
	var ids []string
	for _, msg := range []string{"echo ping for me", "say hello"} {
		out, err := command(env, "chat", msg).CombinedOutput()
		m := sessionOf.FindStringSubmatch(string(out))
		if err != nil || m == nil {
			t.Fatalf("chat %q: %v\n%s\nlogs:\n%s", msg, err, out, logs)
		}
		ids = append(ids, m[1])
	}

	out, code := sessions()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "TITLE") ||
		!strings.HasPrefix(lines[1], ids[1]) || !strings.HasSuffix(lines[1], "say hello") ||
		!strings.HasPrefix(lines[2], ids[0]) || !strings.HasSuffix(lines[2], "echo ping for me") {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	if out, code := sessions("--limit", "1"); code != 0 || !strings.Contains(out, ids[1]) || strings.Contains(out, ids[0]) || !strings.Contains(out, "more with --limit N or --all") {
		t.Errorf("--limit 1: exit %d\n%s", code, out)
	}
	if out, code := sessions("--all"); code != 0 || !strings.Contains(out, ids[0]) || !strings.Contains(out, ids[1]) || strings.Contains(out, "more with") {
		t.Errorf("--all: exit %d\n%s", code, out)
	}

	out, code = sessions("show", ids[0])
	for _, want := range []string{"echo ping for me\nsession " + ids[0] + ", created ", "\nturn 1: done, ", "  you: echo ping for me\n",
		"  step: works_echo {\"text\":\"ping\"}\n    thought: Echo it back first.\n    result: Result of works_echo:", "ping",
		"  answer: It said ping.\n          That is all.\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q: exit %d\n%s", want, code, out)
		}
	}

	if out, code := sessions("rm", ids[0]); code != 0 || strings.TrimSpace(out) != "deleted session "+ids[0] {
		t.Errorf("rm: exit %d\n%s", code, out)
	}
	if out, _ := sessions(); strings.Contains(out, ids[0]) || !strings.Contains(out, ids[1]) {
		t.Errorf("list after rm:\n%s", out)
	}
	for _, args := range [][]string{{"show", ids[0]}, {"rm", ids[0]}} {
		if out, code := sessions(args...); code != 1 || !strings.Contains(out, "no session \""+ids[0]+"\"") || !strings.Contains(out, "session_not_found") {
			t.Errorf("%s of a deleted session: exit %d\n%s", args[0], code, out)
		}
	}

	// Without the token, or with a wrong one: refused, and told why.
	for _, tokenEnv := range []string{"MMCP_API_TOKEN=", "MMCP_API_TOKEN=wrong"} {
		out, err := command([]string{"MMCP_LISTEN_ADDR=" + addr, tokenEnv}, "sessions").CombinedOutput()
		if exitCode(err) != 1 || !strings.Contains(string(out), "unauthorized") || !strings.Contains(string(out), "set MMCP_API_TOKEN to the daemon's token") {
			t.Errorf("%s: exit %d\n%s", tokenEnv, exitCode(err), out)
		}
	}

	for _, args := range [][]string{{"show"}, {"rm"}, {"show", "a", "b"}, {"bogus"}, {"--limit", "0"}, {"list", "extra"}} {
		if out, code := sessions(args...); code != 2 || !strings.Contains(out, "usage: mmcpd sessions") && !strings.Contains(out, "--limit") {
			t.Errorf("sessions %v: exit %d\n%s", args, code, out)
		}
	}
	if out, code := sessions("--help"); code != 0 || !strings.Contains(out, "mmcpd sessions") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
	if strings.Contains(logs.String(), canary) {
		t.Error("the token reached the log")
	}
}
