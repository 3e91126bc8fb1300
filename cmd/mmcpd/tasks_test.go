package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// TestOpenWebUITaskRequests: through the daemon, an Open WebUI title request
// is one plain model call (no schema), unless MMCP_OPENAI_TASKS=turn.
func TestOpenWebUITaskRequests(t *testing.T) {
	const title = "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history.\n### Output:\nJSON format: { \"title\": \"your concise title here\" }\n### Chat History:\n<chat_history>\nUSER: what is downloading?\nASSISTANT: Nothing right now.\n</chat_history>"
	body, _ := json.Marshal(map[string]any{"model": "mmcpd", "messages": []map[string]string{{"role": "user", "content": title}}})
	for _, tc := range []struct {
		setting    string
		wantFormat bool
	}{{"plain", false}, {"turn", true}} {
		t.Run(tc.setting, func(t *testing.T) {
			fake := ollamatest.New(t)
			reply := `{"title": "📥 Downloads"}`
			if tc.wantFormat {
				reply = `{"thought":"a title","action":"final_response","args":{"answer":"{\"title\": \"📥 Downloads\"}"}}`
			}
			fake.Push(ollamatest.Reply{Content: reply})
			addr, logs, _ := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_OPENAI_TASKS=" + tc.setting})
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(string(body)))
			req.Header.Set("Authorization", "Bearer "+canary)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out struct {
				Choices []struct {
					Message struct{ Content string } `json:"message"`
				} `json:"choices"`
			}
			if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil || len(out.Choices) != 1 || out.Choices[0].Message.Content != `{"title": "📥 Downloads"}` {
				t.Fatalf("%d %+v\n%s", resp.StatusCode, out, logs)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 || (len(reqs[0].Format) > 0) != tc.wantFormat {
				t.Errorf("%d model calls, format %q", len(reqs), reqs[0].Format)
			}
		})
	}
}
