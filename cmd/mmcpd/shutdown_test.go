package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// TestShutdownDrains: SIGTERM while two turns wait on a slow model. The
// daemon stops accepting, gives the turns MMCP_SHUTDOWN_GRACE, then cancels
// them (the model call too), records them cancelled, answers both clients
// (503 shutting_down, and the stream's error event), and exits 0.
func TestShutdownDrains(t *testing.T) {
	fake := ollamatest.New(t)
	fake.Handle(func(api.ChatRequest) ollamatest.Reply {
		return ollamatest.Reply{Delay: time.Minute, Content: `{"thought":"t","action":"final_response","args":{"answer":"too late"}}`}
	})
	data := pluginUserDir(t, true)
	env := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_DATA_DIR=" + data, "MMCP_SHUTDOWN_GRACE=1s"}
	addr, logs, daemon := startDaemon(t, env)

	type answer struct {
		status int
		body   string
		err    error
	}
	post := func(accept string, done chan<- answer) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat", strings.NewReader(`{"message":"slow question"}`))
		req.Header.Set("Authorization", "Bearer "+canary)
		req.Header.Set("Content-Type", "application/json")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, err = b.ReadFrom(resp.Body)
		done <- answer{status: resp.StatusCode, body: b.String(), err: err}
	}
	plain, stream := make(chan answer, 1), make(chan answer, 1)
	go post("", plain)
	go post("text/event-stream", stream)
	if !waitFor(10*time.Second, func() bool { return len(fake.Requests()) == 2 }) {
		t.Fatalf("the model was not asked twice:\n%s", logs)
	}

	start := time.Now()
	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	var exitErr error
	select {
	case exitErr = <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon did not exit 20s after SIGTERM:\n%s", logs)
	}
	if exitErr != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", exitErr, logs)
	}
	if d := time.Since(start); d < time.Second || d > 15*time.Second {
		t.Errorf("the daemon exited %s after SIGTERM with a 1s grace", d)
	}

	a := <-plain
	var env1 server.ErrorBody
	if a.err != nil || a.status != http.StatusServiceUnavailable || json.Unmarshal([]byte(a.body), &env1) != nil || env1.Error.Code != "shutting_down" || !env1.Error.Retryable {
		t.Errorf("the waiting client got %d %q (%v)", a.status, a.body, a.err)
	}
	s := <-stream
	errorEvents := 0
	sc := bufio.NewScanner(strings.NewReader(s.body))
	for sc.Scan() {
		if sc.Text() == "event: error" {
			errorEvents++
		}
	}
	if s.err != nil || s.status != http.StatusOK || errorEvents != 1 || !strings.Contains(s.body, `"shutting_down"`) {
		t.Errorf("the streaming client got %d, %d error events:\n%s (%v)", s.status, errorEvents, s.body, s.err)
	}
	// The model calls were cancelled, not left to run.
	for i, r := range fake.Responses() {
		if r.Complete {
			t.Errorf("model call %d ran to its end", i)
		}
	}

	// Both turns are recorded cancelled, none left running.
	addr2, logs2, _ := startDaemon(t, env)
	code, body := apiGet(t, addr2, "/v1/sessions")
	var list server.SessionList
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list.Sessions) != 2 {
		t.Fatalf("sessions after the restart: %d %s", code, body)
	}
	for _, sess := range list.Sessions {
		code, body := apiGet(t, addr2, "/v1/sessions/"+sess.ID)
		var v server.SessionView
		if code != 200 || json.Unmarshal(body, &v) != nil || len(v.Turns) != 1 {
			t.Fatalf("session %s: %d %s", sess.ID, code, body)
		}
		if tv := v.Turns[0]; tv.Status != "cancelled" || !strings.Contains(tv.Error, "shut down") {
			t.Errorf("turn after the shutdown: status %q, error %q\n%s", tv.Status, tv.Error, logs2)
		}
	}
	if l := logs.String(); !strings.Contains(l, `"msg":"stopped"`) {
		t.Errorf("no clean stop in the log:\n%s", l)
	}
}
