package main

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// TestLiveTurns drives slow turns through the daemon and the chat command:
// chat prints each step as its events arrive, a quiet stream gets
// heartbeats (MMCP_STREAM_HEARTBEAT), and a turn past MMCP_TURN_TIMEOUT
// ends with timeout.
func TestLiveTurns(t *testing.T) {
	const slow = 2 * time.Second // the model's delay on the turn's last reply
	dir := pluginsFolder(t, "system")
	fake := ollamatest.New(t)
	env := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir,
		"MMCP_TURN_TIMEOUT=5s", "MMCP_STREAM_HEARTBEAT=100ms"}
	addr, logs, _ := startDaemon(t, env)
	env = append(env, "MMCP_LISTEN_ADDR="+addr)
	if !waitFor(30*time.Second, func() bool { tl, ok := listTools(t, addr)["system_time"]; return ok && tl.Disabled == "" }) {
		t.Fatalf("system_time never usable:\n%s", logs)
	}
	later := func(r ollamatest.Reply, d time.Duration) ollamatest.Reply { r.Delay = d; return r }

	t.Run("chat prints steps as they happen", func(t *testing.T) {
		fake.Push(ollamatest.Reply{Content: `{"thought":"Check the clock.","action":"system_time","args":{}}`},
			later(answer("It is noon."), slow))
		cmd := command(env, "chat", "--steps", "what time is it?")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr syncBuffer
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// When each line came, read as it is printed.
		var lines []string
		var at []time.Duration
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines, at = append(lines, sc.Text()), append(at, time.Since(start))
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("chat: %v\n%s\n%s", err, strings.Join(lines, "\n"), stderr.String())
		}
		when := func(prefix string) time.Duration {
			for i, l := range lines {
				if strings.HasPrefix(l, prefix) {
					return at[i]
				}
			}
			t.Fatalf("no line %q in:\n%s", prefix, strings.Join(lines, "\n"))
			return 0
		}
		// The step's result was printed while the model still thought.
		result, answered := when("  result: {"), when("It is noon.")
		if answered-result < slow/2 {
			t.Errorf("the result came %s before the answer, want about %s: steps are not printed as they happen\n%s",
				answered-result, slow, strings.Join(lines, "\n"))
		}
		when("step 1: system_time {} (model ")
		when("  thought: Check the clock.")
		when("step 2: final_response")
		// No terminal: no status line.
		if s := stderr.String(); strings.Contains(s, "\r") || strings.Contains(s, "waiting") || !strings.HasPrefix(s, "(session ") {
			t.Errorf("stderr: %q", s)
		}
	})

	t.Run("chat prints the answer as the model writes it", func(t *testing.T) {
		// 10 tokens a second: the envelope's start takes about 1.5 s, the
		// answer's 80 characters about 2 s more.
		fake.SetCost(ollamatest.Cost{GenRate: 10})
		defer fake.SetCost(ollamatest.Cost{})
		const text = "It is noon, and the sun stands high over the quiet town; nothing is downloading."
		fake.Push(answer(text))
		cmd := command(env, "chat", "what time is it?")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var got []byte
		var first time.Time // when the answer's first bytes were printed
		buf := make([]byte, 64)
		for {
			n, err := stdout.Read(buf)
			if n > 0 && first.IsZero() {
				first = time.Now()
			}
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		end := time.Now()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("chat: %v\n%s", err, got)
		}
		if strings.TrimSpace(string(got)) != text {
			t.Errorf("chat printed %q, want the answer once", got)
		}
		if end.Sub(first) < time.Second {
			t.Errorf("the answer's first bytes came %s before its end: not printed as it was written", end.Sub(first))
		}
	})

	t.Run("heartbeats while the model is slow", func(t *testing.T) {
		fake.Push(later(answer("Slow."), slow))
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat", strings.NewReader(`{"message":"hi"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Authorization", "Bearer "+canary)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		before, _, ok := strings.Cut(string(body), "event: final")
		if n := strings.Count(before, server.Heartbeat); !ok || n < 5 {
			t.Errorf("%d heartbeats before the answer:\n%s", n, body)
		}
	})

	t.Run("turn timeout", func(t *testing.T) {
		fake.Push(later(answer("too late"), time.Minute))
		start := time.Now()
		out, err := command(env, "chat", "hi").CombinedOutput()
		if exitCode(err) != 1 || !strings.Contains(string(out), "did not finish within 5s (MMCP_TURN_TIMEOUT)") || !strings.Contains(string(out), "(timeout, trace ") {
			t.Errorf("chat: %v\n%s", err, out)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("chat took %s", took)
		}
	})
}
