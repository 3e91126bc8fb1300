package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// failPost posts a chat message to the daemon, as JSON or, with sse, as a
// stream, and gives the error the client got (the stream's last event), its
// status (a stream's is 200), the X-Trace-Id header and every event name.
func failPost(t *testing.T, addr string, sse bool) (server.ErrorBody, int, string, []string) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat", strings.NewReader(`{"message":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if sse {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if sse {
		var last string
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				names = append(names, name)
			}
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				last = data
			}
		}
		body = []byte(last)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var got server.ErrorBody
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("not the error envelope (%v): %s", err, body)
	}
	return got, resp.StatusCode, resp.Header.Get("X-Trace-Id"), names
}

// failLog is the daemon's first JSON log line with that message and trace
// id, waited for a moment: the request's line is written as its response
// ends, after the client may have read it.
func failLog(logs *syncBuffer, traceID, msg string) map[string]any {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, line := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg && m["trace_id"] == traceID {
				return m
			}
		}
	}
	return nil
}

// TestModelFailures: what Ollama does wrong reaches the client as what it is
// (its own error, a timeout naming the setting, a reply too large), never as
// a bug of ours, in JSON and in a stream (one error event), and the request's
// log line says why.
func TestModelFailures(t *testing.T) {
	answer := `{"thought":"t","action":"final_response","args":{"answer":"late"}}`
	fake := ollamatest.New(t)
	addr, logs, _ := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_LLM_TIMEOUT=1s", "MMCP_LLM_RATE_LIMIT_RETRIES=0"})
	tests := []struct {
		name      string
		reply     ollamatest.Reply
		status    int
		code      string
		retryable bool
		message   []string
	}{
		{"Ollama fails (500)", ollamatest.Reply{Status: 500, Error: "llama runner process has terminated: signal: killed"},
			502, "model_error", true, []string{"500 Internal Server Error: llama runner process has terminated: signal: killed", fake.URL}},
		{"a proxy before Ollama fails (504)", ollamatest.Reply{Status: 504, Error: "upstream timed out"},
			502, "model_error", true, []string{"504 Gateway Timeout: upstream timed out"}},
		{"Ollama overloaded (503)", ollamatest.Reply{Status: 503, Error: "server busy"},
			503, "model_unavailable", true, []string{"overloaded (503 Service Unavailable: server busy)"}},
		{"no answer in time", ollamatest.Reply{Content: answer, Delay: 10 * time.Second},
			504, "model_timeout", true, []string{"did not answer within 1s (MMCP_LLM_TIMEOUT); a slow machine", fake.URL}},
		{"a slow drip", ollamatest.Reply{Content: answer, Drip: 50 * time.Millisecond},
			504, "model_timeout", true, []string{"did not answer within 1s (MMCP_LLM_TIMEOUT)"}},
		{"a 200 MB line", ollamatest.Reply{Line: 200 << 20},
			502, "model_error", true, []string{"reply too large", "262144 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, sse := range []bool{false, true} {
				how := map[bool]string{false: "JSON", true: "stream"}[sse]
				fake.Push(tt.reply)
				start := time.Now()
				got, status, traceID, events := failPost(t, addr, sse)
				if took := time.Since(start); took > 10*time.Second {
					t.Errorf("%s: took %s", how, took)
				}
				wantStatus := tt.status
				if sse {
					wantStatus = 200
					if n := strings.Count(strings.Join(events, " "), "error"); n != 1 || events[len(events)-1] != "error" {
						t.Errorf("stream: events %v, want one error event, last", events)
					}
				}
				if status != wantStatus || got.Error.Code != tt.code || got.Error.Retryable != tt.retryable || got.TraceID != traceID {
					t.Errorf("%s: %d %+v (trace %s, header %s), want %d %s retryable=%v", how, status, got.Error, got.TraceID, traceID, wantStatus, tt.code, tt.retryable)
				}
				for _, m := range tt.message {
					if !strings.Contains(got.Error.Message, m) {
						t.Errorf("%s: message %q lacks %q", how, got.Error.Message, m)
					}
				}
				if line := failLog(logs, traceID, "http"); line == nil || line["error_code"] != tt.code || line["error"] != got.Error.Message {
					t.Errorf("%s: http log line %v lacks error_code %s and the message", how, line, tt.code)
				}
				if turn := failLog(logs, traceID, "turn started"); turn == nil || turn["session_id"] == nil {
					t.Errorf("%s: no turn started line with the session: %v", how, turn)
				}
			}
		})
	}
	if l := logs.String(); strings.Contains(l, "internal error") || strings.Contains(l, "goroutine") {
		t.Errorf("a model failure was taken for a bug:\n%s", l)
	}
}

// TestOllamaDownThenBack: while readiness knows Ollama is down a chat fails
// at once (not after seconds of retries) with what to do; once Ollama is
// there the next chat works, and the log says once that it is back.
func TestOllamaDownThenBack(t *testing.T) {
	ollama := freeAddr(t) // nothing listens there yet
	addr, logs, _ := startDaemon(t, []string{"MMCP_OLLAMA_HOST=http://" + ollama})

	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(ready), `"code":"model_unavailable"`) || !strings.Contains(string(ready), "ollama serve") {
		t.Fatalf("readyz: %d %s", resp.StatusCode, ready)
	}

	// The default 3 retries would wait 1+2+4 s.
	start := time.Now()
	got, status, traceID, _ := failPost(t, addr, false)
	took := time.Since(start)
	if status != 503 || got.Error.Code != "model_unavailable" || !got.Error.Retryable ||
		!strings.Contains(got.Error.Message, "cannot reach Ollama at http://"+ollama) || !strings.Contains(got.Error.Message, "ollama serve") {
		t.Errorf("chat while down: %d %+v", status, got.Error)
	}
	if took > 3*time.Second {
		t.Errorf("chat while down took %s, want it to fail at once", took)
	}
	if line := failLog(logs, traceID, "http"); line == nil || line["error_code"] != "model_unavailable" {
		t.Errorf("http log line %v lacks the reason", line)
	}

	ollamatest.NewAt(t, ollama, ollamatest.Reply{Content: `{"thought":"t","action":"final_response","args":{"answer":"back"}}`})
	for _, path := range []string{"/v1/chat", "/readyz"} {
		var resp *http.Response
		if path == "/readyz" {
			resp, err = http.Get("http://" + addr + path)
		} else {
			resp, err = http.Post("http://"+addr+path, "application/json", strings.NewReader(`{"message":"hi"}`))
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s once Ollama is up: %d %s", path, resp.StatusCode, body)
		}
	}
	l := logs.String()
	if n := strings.Count(l, `"msg":"Ollama is reachable again"`); n != 1 {
		t.Errorf("logged %d times that Ollama is back, want once:\n%s", n, l)
	}
	if !strings.Contains(l, fmt.Sprintf(`"ollama":"http://%s"`, ollama)) {
		t.Errorf("the log does not name Ollama's address:\n%s", l)
	}
}
