package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/llm/openaitest"
	"github.com/mmcpd/mmcpd/pkg/server"
)

const openAIKey = "sk-canary-backend-8d1e"

// readyState is /readyz's answer, ready or not.
type readyState struct {
	Status   string             `json:"status"`
	Error    server.ErrorDetail `json:"error"`
	Backends []llm.BackendState `json:"backends"`
}

func readyz(t *testing.T, addr string) (int, readyState) {
	t.Helper()
	code, body := apiGet(t, addr, "/readyz")
	var r readyState
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/readyz: %v: %s", err, body)
	}
	return code, r
}

// chatTurn posts a message (in session, when not empty) and decodes the
// answer, or the error.
func chatTurn(t *testing.T, addr, session, message string) (int, server.ChatResponse, server.ErrorBody) {
	t.Helper()
	body := map[string]string{"message": message}
	if session != "" {
		body["session_id"] = session
	}
	code, out := dbPost(t, addr, "/v1/chat", body)
	var resp server.ChatResponse
	var fail server.ErrorBody
	if code == http.StatusOK {
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	} else if err := json.Unmarshal(out, &fail); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return code, resp, fail
}

// One OpenAI-compatible server alone, as llama-server with --api-key: a turn
// with a tool call, streamed, the key never shown.
func TestServeOpenAIBackend(t *testing.T) {
	fake := openaitest.New(t)
	fake.Key(openAIKey)
	fake.Push(
		openaitest.Reply{Content: `{"thought":"check the clock","action":"system_time","args":{}}`},
		openaitest.Reply{Content: `{"thought":"done","action":"final_response","args":{"answer":"It is later than you think"}}`, Pieces: 12},
	)
	entry := "openai=" + fake.URL + "#" + openaitest.Model
	env := []string{"MMCP_LLM_BACKENDS=" + entry, "MMCP_LLM_1_API_KEY=" + openAIKey, "MMCP_PLUGINS_DIR=" + pluginsFolder(t, "system")}
	addr, logs, _ := startDaemon(t, env)
	if !waitFor(30*time.Second, func() bool { code, _ := apiGet(t, addr, "/readyz"); return code == 200 }) {
		_, body := apiGet(t, addr, "/readyz")
		t.Fatalf("/readyz never 200: %s\n%s", body, logs)
	}
	_, ready := readyz(t, addr)
	if len(ready.Backends) != 1 || ready.Backends[0].Name != entry || ready.Backends[0].State != llm.StateUp {
		t.Errorf("readyz backends: %+v", ready.Backends)
	}

	// Streamed: the answer comes in pieces.
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat", strings.NewReader(`{"message":"what time is it?"}`))
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var deltas int
	var done server.ChatResponse
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			event = name
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !ok:
		case event == "answer_delta":
			deltas++
		case event == "done":
			if err := json.Unmarshal([]byte(data), &done); err != nil {
				t.Fatal(err)
			}
		}
	}
	if done.Answer != "It is later than you think" || len(done.Steps) != 2 || done.Steps[0].Action != "system_time" || done.Steps[0].Observation == "" {
		t.Fatalf("turn: %+v\nlogs:\n%s", done, logs)
	}
	if deltas < 2 {
		t.Errorf("%d answer_delta events: the reply was not streamed", deltas)
	}
	for _, st := range done.Steps {
		if st.Backend != entry || st.Model != openaitest.Model || st.Failover != "" {
			t.Errorf("step %d: backend %q model %q failover %q", st.Number, st.Backend, st.Model, st.Failover)
		}
	}
	if done.Usage.Calls != 2 || done.Usage.PromptTokens == 0 {
		t.Errorf("usage: %+v", done.Usage)
	}
	reqs := fake.Requests()
	if len(reqs) != 2 || reqs[0].ResponseFormat == nil || !strings.Contains(string(reqs[0].ResponseFormat.JSONSchema.Schema), "system_time") {
		t.Errorf("requests: %d, first response_format %+v", len(reqs), reqs[0].ResponseFormat)
	}

	// 429, then a reply: the turn waits the server out.
	fake.Push(openaitest.Reply{Status: 429, RetryAfter: "1", Error: "busy"},
		openaitest.Reply{Content: `{"thought":"t","action":"final_response","args":{"answer":"after the wait"}}`})
	code, ok, fail := chatTurn(t, addr, "", "again")
	if code != 200 || ok.Answer != "after the wait" {
		t.Errorf("after 429: %d %+v %+v", code, ok, fail)
	}

	out, err := command(env, "config").CombinedOutput()
	if err != nil {
		t.Fatalf("config: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "MMCP_LLM_1_API_KEY=**********") || !strings.Contains(string(out), "1 "+entry+"  # key MMCP_LLM_1_API_KEY=**********") {
		t.Errorf("config output:\n%s", out)
	}
	if strings.Contains(string(out)+logs.String(), openAIKey) {
		t.Error("the key shows in the config output or the log")
	}
}

func TestServeOpenAIBackendRefusals(t *testing.T) {
	fake := openaitest.New(t)
	fake.Key(openAIKey)
	// A wrong key: not ready, and a chat says which setting to check.
	addr, logs, _ := startDaemon(t, []string{"MMCP_LLM_BACKENDS=openai=" + fake.URL + "#" + openaitest.Model, "MMCP_LLM_1_API_KEY=wrong-key-3f"})
	code, ready := readyz(t, addr)
	if code != 503 || !strings.Contains(ready.Error.Message, "MMCP_LLM_1_API_KEY") {
		t.Errorf("readyz with a wrong key: %d %+v", code, ready)
	}
	code, _, fail := chatTurn(t, addr, "", "hi")
	if code != 503 || fail.Error.Code != "model_unauthorized" || fail.Error.Retryable || !strings.Contains(fail.Error.Message, "API key") {
		t.Errorf("chat with a wrong key: %d %+v", code, fail)
	}
	if strings.Contains(logs.String(), "wrong-key-3f") {
		t.Error("the key is in the log")
	}

	// A model the server does not have.
	addr, _, _ = startDaemon(t, []string{"MMCP_LLM_BACKENDS=openai=" + fake.URL + "#no-such-model", "MMCP_LLM_1_API_KEY=" + openAIKey})
	code, ready = readyz(t, addr)
	if code != 503 || ready.Error.Code != "model_missing" || !strings.Contains(ready.Error.Message, openaitest.Model) {
		t.Errorf("readyz with an unknown model: %d %+v", code, ready)
	}
	code, _, fail = chatTurn(t, addr, "", "hi")
	if code != 503 || fail.Error.Code != "model_missing" {
		t.Errorf("chat with an unknown model: %d %+v", code, fail)
	}
}

// An Ollama and an OpenAI-compatible server: the session's server dies
// between two turns, the next turn moves and says so, the dead one is
// probed back; with both dead, a chat names each one's problem.
func TestServeTwoBackendsFailover(t *testing.T) {
	final := func(text string) string {
		return `{"thought":"t","action":"final_response","args":{"answer":"` + text + `"}}`
	}
	ol := ollamatest.New(t)
	ol.Handle(func(api.ChatRequest) ollamatest.Reply { return ollamatest.Reply{Content: final("from ollama")} })
	oa := openaitest.New(t)
	oa.Handle(func(openaitest.Request) openaitest.Reply { return openaitest.Reply{Content: final("from openai")} })
	olEntry := "ollama=" + ol.URL + "#qwen2.5:7b-instruct"
	oaEntry := "openai=" + oa.URL + "#" + openaitest.Model
	addr, logs, _ := startDaemon(t, []string{"MMCP_LLM_BACKENDS=" + olEntry + "," + oaEntry})
	if !waitFor(10*time.Second, func() bool { code, _ := apiGet(t, addr, "/readyz"); return code == 200 }) {
		t.Fatalf("never ready:\n%s", logs)
	}

	code, first, fail := chatTurn(t, addr, "", "hi")
	if code != 200 {
		t.Fatalf("first turn: %d %+v", code, fail)
	}
	// The first server is preferred when both are idle.
	if st := first.Steps[0]; first.Answer != "from ollama" || st.Backend != olEntry || st.Model != "qwen2.5:7b-instruct" {
		t.Fatalf("first turn: %+v", first)
	}
	code, second, _ := chatTurn(t, addr, first.SessionID, "and again")
	if code != 200 || second.Answer != "from ollama" {
		t.Fatalf("the session left its server: %+v", second)
	}

	olAddr := strings.TrimPrefix(ol.URL, "http://")
	ol.Close()
	code, moved, fail := chatTurn(t, addr, first.SessionID, "still there?")
	if code != 200 {
		t.Fatalf("the turn did not fail over: %d %+v\n%s", code, fail, logs)
	}
	st := moved.Steps[0]
	if moved.Answer != "from openai" || st.Backend != oaEntry || st.Model != openaitest.Model || !strings.Contains(st.Failover, "moved from "+olEntry) {
		t.Errorf("moved turn: %+v", moved)
	}
	code, ready := readyz(t, addr)
	if code != 200 || len(ready.Backends) != 2 || ready.Backends[0].State != llm.StateDown || ready.Backends[0].Reason == "" || ready.Backends[1].State != llm.StateUp {
		t.Errorf("readyz with one server down: %d %+v", code, ready)
	}
	metrics := func() string { _, b := apiGet(t, addr, "/metrics"); return string(b) }
	if m := metrics(); !strings.Contains(m, `mmcpd_backend_state{backend="`+olEntry+`",state="down"} 1`) ||
		!strings.Contains(m, `mmcpd_backend_calls_total{backend="`+oaEntry+`",outcome="ok"} 1`) ||
		!strings.Contains(m, `mmcpd_backend_calls_total{backend="`+olEntry+`",outcome="ok"} 2`) {
		t.Errorf("metrics lack the servers' figures:\n%s", grepLines(m, "mmcpd_backend_"))
	}

	// Ollama comes back where it was: the probes find it.
	back := ollamatest.NewAt(t, olAddr)
	back.Handle(func(api.ChatRequest) ollamatest.Reply { return ollamatest.Reply{Content: final("from ollama")} })
	if !waitFor(15*time.Second, func() bool { _, r := readyz(t, addr); return r.Backends[0].State == llm.StateUp }) {
		_, r := readyz(t, addr)
		t.Errorf("the server never came back up: %+v", r.Backends)
	}

	// Both down: 503, each server's reason.
	back.Close()
	oa.Close()
	code, _, fail = chatTurn(t, addr, "", "anyone?")
	if code != 503 || fail.Error.Code != "model_unavailable" || !strings.Contains(fail.Error.Message, olEntry+": ") || !strings.Contains(fail.Error.Message, oaEntry+": ") {
		t.Errorf("all down: %d %+v", code, fail)
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
