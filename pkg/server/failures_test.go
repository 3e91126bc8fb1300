package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// sseEvent is one Server-Sent Event as a client reads it.
type sseEvent struct {
	name string
	data json.RawMessage
}

// stream posts body to path asking for Server-Sent Events, and reads them
// all as a client would.
func (e *env) stream(t *testing.T, path, body string) (*http.Response, []sseEvent) {
	t.Helper()
	req, err := http.NewRequest("POST", e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("%s: %d %s, want a 200 stream", path, resp.StatusCode, ct)
	}
	var events []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" {
				events = append(events, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = json.RawMessage(strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, ":"):
			// A comment (a heartbeat): clients ignore it.
		default:
			t.Errorf("unexpected line in the stream: %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return resp, events
}

func eventNames(es []sseEvent) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.name
	}
	return out
}

// strictError decodes an error envelope, refusing any other shape.
func strictError(t *testing.T, data []byte) server.ErrorBody {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var got server.ErrorBody
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("not the error envelope (%v): %s", err, data)
	}
	return got
}

// logLines are the JSON log lines carrying a trace id.
func logLines(t *testing.T, logs string, traceID string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["trace_id"] == traceID {
			out = append(out, m)
		}
	}
	return out
}

// logLine is the first line of the trace with that message.
func logLine(t *testing.T, logs, traceID, msg string) map[string]any {
	t.Helper()
	for _, m := range logLines(t, logs, traceID) {
		if m["msg"] == msg {
			return m
		}
	}
	t.Errorf("no %q log line for trace %s in:\n%s", msg, traceID, logs)
	return map[string]any{}
}

// TestTurnFailures: each way a turn fails reaches the client as its own
// status and code, with a message that says what happened, the same in JSON
// and in a stream (one error event), and on the request's log line.
func TestTurnFailures(t *testing.T) {
	answer := final("too late").Content
	tests := []struct {
		name      string
		script    []ollamatest.Reply
		model     func(*llm.Options)
		budget    int // the loop's MaxContextChars, when set
		status    int
		code      string
		retryable bool
		message   []string
	}{
		{name: "Ollama fails (500)", script: []ollamatest.Reply{{Status: 500, Error: "llama runner process has terminated: signal: killed"}},
			status: 502, code: "model_error", retryable: true, message: []string{"500 Internal Server Error: llama runner process has terminated: signal: killed"}},
		{name: "a proxy before Ollama fails (502)", script: []ollamatest.Reply{{Status: 502, Error: "upstream connect error"}},
			status: 502, code: "model_error", retryable: true, message: []string{"502 Bad Gateway: upstream connect error"}},
		{name: "overloaded after the retries (503)", script: []ollamatest.Reply{{Status: 503, Error: "busy"}, {Status: 503, Error: "busy"}},
			status: 503, code: "model_unavailable", retryable: true, message: []string{"overloaded", "busy"}},
		{name: "no answer in time", script: []ollamatest.Reply{{Content: answer, Delay: 10 * time.Second}},
			model:  func(o *llm.Options) { o.Timeout = 200 * time.Millisecond },
			status: 504, code: "model_timeout", retryable: true, message: []string{"did not answer within 200ms (MMCP_LLM_TIMEOUT)", "may need more"}},
		{name: "an answer dripping in too slowly", script: []ollamatest.Reply{{Content: answer, Drip: 20 * time.Millisecond}},
			model:  func(o *llm.Options) { o.Timeout = 300 * time.Millisecond },
			status: 504, code: "model_timeout", retryable: true, message: []string{"did not answer within 300ms (MMCP_LLM_TIMEOUT)"}},
		{name: "a 200 MB line", script: []ollamatest.Reply{{Line: 200 << 20}},
			status: 502, code: "model_error", retryable: true, message: []string{"too large", "262144 bytes"}},
		{name: "the prompt does not fit the budget", budget: 10,
			status: 500, code: "context_overflow", retryable: false, message: []string{"exceeds MMCP_LLM_MAX_CONTEXT_CHARS=10", "raise it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startWith(t, options{model: tt.model, configure: func(_ *store.Store, r *loop.Runner, _ *server.Server) {
				if tt.budget > 0 {
					r.Config.MaxContextChars = tt.budget
				}
			}})
			check := func(how string, status int, header http.Header, got server.ErrorBody) {
				t.Helper()
				if status != tt.status || got.Error.Code != tt.code || got.Error.Retryable != tt.retryable {
					t.Errorf("%s: %d %+v, want %d %s retryable=%v", how, status, got.Error, tt.status, tt.code, tt.retryable)
				}
				for _, m := range tt.message {
					if !strings.Contains(got.Error.Message, m) {
						t.Errorf("%s: message %q lacks %q", how, got.Error.Message, m)
					}
				}
				id := header.Get("X-Trace-Id")
				if got.TraceID != id {
					t.Errorf("%s: trace_id %q, header %q", how, got.TraceID, id)
				}
				// The request's log line says why, and the turn's start is
				// logged with its session.
				logs := e.logs.String()
				if l := logLine(t, logs, id, "http"); l["error_code"] != tt.code || l["error"] != got.Error.Message {
					t.Errorf("%s: http log line %v lacks error_code %s and the message", how, l, tt.code)
				}
				if l := logLine(t, logs, id, "turn started"); l["session_id"] == "" || l["session_id"] == nil {
					t.Errorf("%s: turn log line %v lacks the session", how, l)
				}
			}

			e.fake.Push(tt.script...)
			resp, body := e.do(t, "POST", "/v1/chat", `{"message":"hi"}`)
			check("JSON", resp.StatusCode, resp.Header, strictError(t, body))

			e.fake.Push(tt.script...)
			resp, events := e.stream(t, "/v1/chat", `{"message":"hi"}`)
			names := eventNames(events)
			if n := strings.Count(strings.Join(names, " "), "error"); n != 1 || names[len(names)-1] != "error" {
				t.Fatalf("stream events %v, want exactly one error event, last", names)
			}
			check("stream", tt.status, resp.Header, strictError(t, events[len(events)-1].data))
		})
	}
}

// pluginList is a fixed set of plugins.
type pluginList []plugins.Info

func (p pluginList) Plugins() []plugins.Info { return p }
func (p pluginList) Starting() []string      { return nil }

// TestReadyz: readiness says what keeps the daemon from serving, with the
// same codes and retryability as a chat, and warns of plugins that cannot
// serve.
func TestReadyz(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(*env)
		plugins   pluginList
		status    int
		code      string
		retryable bool
		text      []string // in the message, or in the warnings when ready
	}{
		{name: "ready"},
		{name: "model missing", setup: func(e *env) { e.fake.Models("other-model") },
			status: 503, code: "model_missing", retryable: false, text: []string{`ollama pull test-model`}},
		{name: "Ollama down", setup: func(e *env) { e.fake.Close() },
			status: 503, code: "model_unavailable", retryable: true, text: []string{"cannot reach Ollama", "ollama serve"}},
		{name: "plugins that cannot serve", plugins: pluginList{
			{Name: "tmdb", Status: plugins.StatusUnreachable, Reason: "TMDB refused the credentials (401); check MMCP_PLUGIN_TMDB_API_KEY"},
			{Name: "radarr", Status: plugins.StatusStandby, Reason: "MMCP_PLUGIN_RADARR_URL is required"},
			{Name: "system", Status: plugins.StatusReady},
		}, text: []string{
			"plugin tmdb is unreachable: TMDB refused the credentials (401); check MMCP_PLUGIN_TMDB_API_KEY",
			"plugin radarr is on standby: MMCP_PLUGIN_RADARR_URL is required",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startWith(t, options{configure: func(_ *store.Store, _ *loop.Runner, api *server.Server) {
				if tt.plugins != nil {
					api.Plugins = tt.plugins
				}
			}})
			if tt.setup != nil {
				tt.setup(e)
			}
			resp, body := e.do(t, "GET", "/readyz", "")
			if tt.status == 0 {
				var ready struct {
					Status   string   `json:"status"`
					Warnings []string `json:"warnings"`
				}
				if err := json.Unmarshal(body, &ready); err != nil || resp.StatusCode != 200 || ready.Status != "ready" {
					t.Fatalf("readyz: %d %s", resp.StatusCode, body)
				}
				if !slices.Equal(ready.Warnings, tt.text) {
					t.Errorf("warnings = %q\nwant       %q", ready.Warnings, tt.text)
				}
				return
			}
			got := strictError(t, body)
			if resp.StatusCode != tt.status || got.Error.Code != tt.code || got.Error.Retryable != tt.retryable {
				t.Errorf("readyz: %d %+v, want %d %s retryable=%v", resp.StatusCode, got.Error, tt.status, tt.code, tt.retryable)
			}
			for _, s := range tt.text {
				if !strings.Contains(got.Error.Message, s) {
					t.Errorf("message %q lacks %q", got.Error.Message, s)
				}
			}
			// A chat says the same, retryable alike.
			resp, body = e.do(t, "POST", "/v1/chat", `{"message":"hi"}`)
			chat := strictError(t, body)
			if resp.StatusCode != tt.status || chat.Error.Code != tt.code || chat.Error.Retryable != tt.retryable {
				t.Errorf("chat: %d %+v, want %d %s retryable=%v", resp.StatusCode, chat.Error, tt.status, tt.code, tt.retryable)
			}
		})
	}
}

// TestStreamEvents reads whole streams as a UI would: every event carries
// the trace id and what it needs to be shown, the session is known from the
// first event, an action request carries the approval to answer, and a
// failed turn ends with one error event.
func TestStreamEvents(t *testing.T) {
	tl := &tools{}
	e := startWithTools(t, tl, nil)
	// The keys each event must carry, none of them empty.
	keys := map[string][]string{
		"start":          {"type", "trace_id", "session_id"},
		"step_start":     {"type", "trace_id", "step"},
		"model_reply":    {"type", "trace_id", "step", "thought", "action", "args", "duration_ns", "usage"},
		"tool_start":     {"type", "trace_id", "step", "action", "args"},
		"tool_end":       {"type", "trace_id", "step", "action", "observation", "duration_ns"},
		"action_request": {"type", "trace_id", "session_id", "approval_id", "step", "action", "args", "explanation"},
		"final":          {"type", "trace_id", "step", "thought", "answer"},
		"thought_delta":  {"type", "trace_id", "step", "text"},
		"answer_delta":   {"type", "trace_id", "step", "text"},
		"done":           {"type", "trace_id", "session_id", "steps", "usage"},
		"error":          {"error", "trace_id"},
	}
	// read checks a stream against the names it should have, and gives each
	// event's data by name (the last of a name).
	read := func(t *testing.T, path, body string, want ...string) map[string]map[string]any {
		t.Helper()
		resp, events := e.stream(t, path, body)
		if got := eventNames(events); !slices.Equal(got, want) {
			t.Fatalf("events = %v\nwant     %v", got, want)
		}
		id := resp.Header.Get("X-Trace-Id")
		byName := map[string]map[string]any{}
		for _, ev := range events {
			var m map[string]any
			if err := json.Unmarshal(ev.data, &m); err != nil {
				t.Fatalf("%s: data is not a JSON object: %s", ev.name, ev.data)
			}
			for _, k := range keys[ev.name] {
				if v, ok := m[k]; !ok || v == "" || v == nil {
					t.Errorf("%s event lacks %s: %s", ev.name, k, ev.data)
				}
			}
			if typ, ok := m["type"]; ok && ev.name != "done" && typ != ev.name {
				t.Errorf("%s event has type %v", ev.name, typ)
			}
			if m["trace_id"] != id {
				t.Errorf("%s event has trace_id %v, header %s", ev.name, m["trace_id"], id)
			}
			byName[ev.name] = m
		}
		if s, d := byName["start"]["session_id"], byName["done"]["session_id"]; byName["done"] != nil && s != d {
			t.Errorf("start names session %v, done %v", s, d)
		}
		return byName
	}

	t.Run("answer after a tool", func(t *testing.T) {
		e.fake.Push(call("tmdb_search", `{"query":"Dune"}`, "look it up"), final("Dune (2021)"))
		got := read(t, "/v1/chat", `{"message":"find Dune"}`,
			"start", "step_start", "thought_delta", "model_reply", "tool_start", "tool_end", "step_start", "thought_delta", "answer_delta", "model_reply", "final", "done")
		if got["final"]["answer"] != "Dune (2021)" || got["tool_end"]["observation"] != "Dune (2021), id 438631" {
			t.Errorf("final %v, tool_end %v", got["final"], got["tool_end"])
		}
	})

	t.Run("action request, then its answer", func(t *testing.T) {
		e.fake.Push(call("radarr_add", `{"query":"Dune"}`, "Add **Dune** from [here](http://evil.example)"))
		got := read(t, "/v1/chat", `{"message":"add Dune"}`,
			"start", "step_start", "thought_delta", "model_reply", "action_request", "done")
		ar, done := got["action_request"], got["done"]
		for _, k := range []string{"approval_id", "explanation", "session_id"} {
			if ar[k] != done[k] {
				t.Errorf("action_request %s = %v, done has %v", k, ar[k], done[k])
			}
		}
		if ar["action"] != "radarr_add" || ar["explanation"] != "Add Dune from here" {
			t.Errorf("action_request = %v", ar)
		}
		e.fake.Push(final("Added."))
		body, _ := json.Marshal(map[string]any{"session_id": done["session_id"], "approval_id": ar["approval_id"], "decision": "approve"})
		got = read(t, "/v1/chat/respond", string(body),
			"start", "tool_start", "tool_end", "step_start", "thought_delta", "answer_delta", "model_reply", "final", "done")
		if got["start"]["session_id"] != done["session_id"] {
			t.Errorf("the resumed stream starts with session %v, want %v", got["start"]["session_id"], done["session_id"])
		}
	})

	t.Run("failed turn", func(t *testing.T) {
		e.fake.Push(ollamatest.Reply{Status: 500, Error: "llama runner process has terminated"})
		got := read(t, "/v1/chat", `{"message":"hi"}`, "start", "step_start", "error")
		if detail, _ := got["error"]["error"].(map[string]any); detail["code"] != "model_error" || detail["retryable"] != true {
			t.Errorf("error event = %v", got["error"])
		}
	})
}

// TestOpenAIFailureIsLogged: the OpenAI routes answer in their own shape,
// with the native code, and their log line says why too.
func TestOpenAIFailureIsLogged(t *testing.T) {
	e := start(t, "", ollamatest.Reply{Status: 500, Error: "llama runner process has terminated"})
	resp, body := e.do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	var got server.OpenAIError
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 502 || got.Error.Code != "model_error" ||
		!strings.Contains(got.Error.Message, "llama runner process has terminated") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if l := logLine(t, e.logs.String(), resp.Header.Get("X-Trace-Id"), "http"); l["error_code"] != "model_error" || l["error"] != got.Error.Message {
		t.Errorf("http log line %v lacks the reason", l)
	}
}
