package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

func openaiClient(e *env, token string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(e.url+"/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0))
	return &c
}

func params(msgs ...openai.ChatCompletionMessageParamUnion) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: msgs}
}

// noSessions checks that completions left nothing in the store.
func noSessions(t *testing.T, e *env, token string) {
	t.Helper()
	_, body := e.do(t, "GET", "/v1/sessions", "", "Authorization", "Bearer "+token)
	if !strings.Contains(string(body), `"sessions":[]`) {
		t.Errorf("completions created sessions: %s", body)
	}
}

func TestOpenAICompletion(t *testing.T) {
	reply := final("Hello from mmcpd!")
	reply.PromptTokens, reply.CompletionTokens = 120, 30
	e := start(t, "tok", reply)
	c := openaiClient(e, "tok")
	var raw *http.Response
	got, err := c.Chat.Completions.New(context.Background(), params(openai.UserMessage("hi")), option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Choices) != 1 || got.Choices[0].Message.Content != "Hello from mmcpd!" || got.Choices[0].Message.Role != "assistant" || got.Choices[0].FinishReason != "stop" {
		t.Errorf("choices = %+v", got.Choices)
	}
	if got.ID != "chatcmpl-"+raw.Header.Get("X-Trace-Id") || got.Object != "chat.completion" || got.Model != "gpt-4o" || got.Created == 0 {
		t.Errorf("id %q object %q model %q created %d", got.ID, got.Object, got.Model, got.Created)
	}
	if u := got.Usage; u.PromptTokens != 120 || u.CompletionTokens != 30 || u.TotalTokens != 150 {
		t.Errorf("usage = %+v", u)
	}
	if msgs := e.fake.Requests()[0].Messages; len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Content != "hi" {
		t.Errorf("model saw %+v", msgs)
	}
	noSessions(t, e, "tok")
}

func TestOpenAIStreaming(t *testing.T) {
	const answer = "Dune (2021) is in your library."
	reply := final(answer)
	reply.PromptTokens, reply.CompletionTokens = 50, 7
	e := start(t, "tok", reply)
	c := openaiClient(e, "tok")
	p := params(openai.UserMessage("is dune there?"))
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(context.Background(), p)
	defer stream.Close()
	var content strings.Builder
	var chunks []openai.ChatCompletionChunk
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		ch := stream.Current()
		chunks = append(chunks, ch)
		acc.AddChunk(ch)
		for _, choice := range ch.Choices {
			content.WriteString(choice.Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if content.String() != answer || acc.Choices[0].Message.Content != answer {
		t.Errorf("streamed %q, accumulated %q", content.String(), acc.Choices[0].Message.Content)
	}
	if len(chunks) < 3 || chunks[0].Choices[0].Delta.Role != "assistant" {
		t.Fatalf("chunks = %+v", chunks)
	}
	for _, ch := range chunks {
		if ch.Object != "chat.completion.chunk" || ch.ID != chunks[0].ID || !strings.HasPrefix(ch.ID, "chatcmpl-") || ch.Model != "gpt-4o" {
			t.Errorf("chunk %+v", ch)
		}
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage.PromptTokens != 50 || last.Usage.CompletionTokens != 7 || last.Usage.TotalTokens != 57 {
		t.Errorf("usage chunk = %s", last.RawJSON())
	}
	if fin := chunks[len(chunks)-2]; len(fin.Choices) != 1 || fin.Choices[0].FinishReason != "stop" {
		t.Errorf("finish chunk = %s", fin.RawJSON())
	}
	noSessions(t, e, "tok")
}

func TestOpenAIStreamRaw(t *testing.T) {
	e := start(t, "", final("ok"))
	resp, body := e.do(t, "POST", "/v1/chat/completions", `{"model":"mmcpd","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := string(body)
	if !strings.HasPrefix(s, `data: {"id":"chatcmpl-`) || !strings.Contains(s, `{"reasoning_content":"Step 1: t"}`) || !strings.Contains(s, `{"reasoning_content":"\n\n"}`) || !strings.Contains(s, `{"content":"ok"}`) || !strings.HasSuffix(s, "data: [DONE]\n\n") || strings.Contains(s, `"usage"`) {
		t.Errorf("stream:\n%s", s)
	}
}

func TestOpenAIHistory(t *testing.T) {
	e := start(t, "", final("Two."))
	c := openaiClient(e, "")
	_, err := c.Chat.Completions.New(context.Background(), params(
		openai.SystemMessage("Answer in French."),
		openai.UserMessage("hi"),
		openai.AssistantMessage(`Hello! "Quotes" & <b>`),
		openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("how many?"),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.com/a.png"}),
		}),
	))
	if err != nil {
		t.Fatal(err)
	}
	msgs := e.fake.Requests()[0].Messages
	if len(msgs) != 4 {
		t.Fatalf("model saw %d messages: %+v", len(msgs), msgs)
	}
	if msgs[0].Role != "system" || strings.Contains(msgs[0].Content, "French") {
		t.Errorf("system prompt = %q", msgs[0].Content)
	}
	if msgs[1].Role != "user" || msgs[1].Content != "hi" {
		t.Errorf("first user message = %+v", msgs[1])
	}
	var env schema.Decision
	if msgs[2].Role != "assistant" || json.Unmarshal([]byte(msgs[2].Content), &env) != nil {
		t.Fatalf("assistant message = %+v", msgs[2])
	}
	if env.Thought != "" || env.Action != "final_response" || env.Answer() != `Hello! "Quotes" & <b>` || !strings.HasPrefix(msgs[2].Content, `{"thought":"","action":"final_response","args":{"answer":`) {
		t.Errorf("assistant envelope = %s", msgs[2].Content)
	}
	want := "Instructions from the client:\nAnswer in French.\n\nMy message:\nhow many?\n[non-text content left out: mmcpd reads text only]"
	if msgs[3].Role != "user" || msgs[3].Content != want {
		t.Errorf("last user message = %q, want %q", msgs[3].Content, want)
	}
}

func TestOpenAIErrors(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		script  []ollamatest.Reply
		status  int
		typ     string
		code    string
		message string
	}{
		{"ends with assistant", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}`, nil, 400, "invalid_request_error", "invalid_request", `must be the user's`},
		{"no messages", `{"model":"m","messages":[]}`, nil, 400, "invalid_request_error", "invalid_request", "must not be empty"},
		{"blank last", `{"model":"m","messages":[{"role":"user","content":"  "}]}`, nil, 400, "invalid_request_error", "invalid_request", "must not be empty"},
		{"tool role", `{"model":"m","messages":[{"role":"tool","content":"x","tool_call_id":"a"},{"role":"user","content":"hi"}]}`, nil, 400, "invalid_request_error", "invalid_request", `role "tool" is not supported`},
		{"bad content", `{"model":"m","messages":[{"role":"user","content":42}]}`, nil, 400, "invalid_request_error", "invalid_request", "messages[0].content"},
		{"invalid JSON", `{"model":`, nil, 400, "invalid_request_error", "invalid_request", "not a valid chat completion request"},
		{"invalid UTF-8", "{\"model\":\"\xff\"}", nil, 400, "invalid_request_error", "invalid_request", "not valid UTF-8"},
		{"too large", `{"model":"` + strings.Repeat("a", server.MaxBodyBytes) + `"}`, nil, 413, "invalid_request_error", "body_too_large", "over 1048576 bytes"},
		{"too long", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 8001) + `"}]}`, nil, 400, "invalid_request_error", "message_too_long", "8001 characters"},
		{"model down", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, []ollamatest.Reply{{Status: 503, Error: "busy"}, {Status: 503, Error: "busy"}}, 503, "server_error", "model_unavailable", "overloaded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, "", tt.script...)
			resp, body := e.do(t, "POST", "/v1/chat/completions", tt.body)
			var got server.OpenAIError
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("not OpenAI's error shape: %s", body)
			}
			if resp.StatusCode != tt.status || got.Error.Type != tt.typ || got.Error.Code != tt.code || !strings.Contains(got.Error.Message, tt.message) {
				t.Errorf("got %d %s, want %d %s %s containing %q", resp.StatusCode, body, tt.status, tt.typ, tt.code, tt.message)
			}
		})
	}
}

func TestOpenAIClientErrors(t *testing.T) {
	e := start(t, "tok", final("never"))
	var apiErr *openai.Error

	_, err := openaiClient(e, "wrong").Chat.Completions.New(context.Background(), params(openai.UserMessage("hi")))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "unauthorized" {
		t.Errorf("wrong token: %v", err)
	}
	if _, err := openaiClient(e, "wrong").Models.List(context.Background()); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Errorf("wrong token, models: %v", err)
	}

	c := openaiClient(e, "tok")
	_, err = c.Chat.Completions.New(context.Background(), params(openai.UserMessage("hi"), openai.AssistantMessage("hello")))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" || apiErr.Param != "messages" || !strings.Contains(apiErr.Message, "user") {
		t.Errorf("ending with assistant: %v", err)
	}
	stream := c.Chat.Completions.NewStreaming(context.Background(), params(openai.UserMessage("hi"), openai.AssistantMessage("hello")))
	if stream.Next() || !errors.As(stream.Err(), &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("streaming, ending with assistant: %v", stream.Err())
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Errorf("%d model calls for refused requests", n)
	}
}

func TestOpenAIStreamError(t *testing.T) {
	e := start(t, "", ollamatest.Reply{Content: "?"}, ollamatest.Reply{Content: "?"}, ollamatest.Reply{Content: "?"})
	stream := openaiClient(e, "").Chat.Completions.NewStreaming(context.Background(), params(openai.UserMessage("hi")))
	defer stream.Close()
	// The role, then the progress of the re-asks, then the error: never
	// content.
	n := 0
	for stream.Next() {
		n++
		if c := stream.Current().Choices; len(c) != 1 || c[0].Delta.Content != "" {
			t.Errorf("chunk before the error: %s", stream.Current().RawJSON())
		}
	}
	if n == 0 || stream.Err() == nil || !strings.Contains(stream.Err().Error(), "invalid_model_reply") {
		t.Errorf("%d chunks, then %v", n, stream.Err())
	}
	resp, body := e.do(t, "POST", "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `data: {"error":{"message":`) || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

func TestOpenAIModels(t *testing.T) {
	e := start(t, "tok")
	page, err := openaiClient(e, "tok").Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "mmcpd" || page.Data[0].Object != "model" || page.Data[0].OwnedBy != "mmcpd" || page.Data[0].Created == 0 {
		t.Errorf("models = %s", page.RawJSON())
	}
	_, body := e.do(t, "GET", "/v1/models", "", "Authorization", "Bearer tok")
	if !strings.HasPrefix(string(body), `{"object":"list","data":[{"id":"mmcpd","object":"model","created":`) {
		t.Errorf("body = %s", body)
	}
}

func TestOpenAIIgnoresExtraFields(t *testing.T) {
	e := start(t, "", final("ok"))
	resp, body := e.do(t, "POST", "/v1/chat/completions", `{"model":"llama3","messages":[{"role":"user","content":"hi","name":"bob"}],
		"temperature":0.7,"max_tokens":100,"top_p":1,"n":1,"user":"u1","stream":false,"stream_options":{"include_usage":true},
		"tools":[],"frequency_penalty":0,"seed":1,"metadata":{"a":"b"}}`)
	var got server.Completion
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || got.Model != "llama3" || got.Choices[0].Message.Content != "ok" {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

// tools is one plain tool and one that needs approval.
type tools struct {
	mu    sync.Mutex
	calls []string
}

func (f *tools) Tools() []loop.Tool {
	obj := json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)
	return []loop.Tool{
		{Tool: schema.Tool{Name: "tmdb_search", Description: "Search TMDB", Schema: obj}},
		{Tool: schema.Tool{Name: "radarr_add", Description: "Add a movie", Schema: obj}, NeedsApproval: true},
	}
}

func (f *tools) Call(ctx context.Context, name string, args json.RawMessage) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	return "Dune (2021), id 438631", nil
}

func startWithTools(t *testing.T, tl loop.Tools, done func(string), script ...ollamatest.Reply) *env {
	t.Helper()
	return startWith(t, options{tools: tl, configure: func(_ *store.Store, _ *loop.Runner, api *server.Server) { api.TurnDone = done }}, script...)
}

func TestOpenAIToolsAndApproval(t *testing.T) {
	tl := &tools{}
	var mu sync.Mutex
	var outcomes []string
	e := startWithTools(t, tl, func(o string) { mu.Lock(); defer mu.Unlock(); outcomes = append(outcomes, o) },
		ollamatest.Reply{Content: `{"thought":"look it up","action":"tmdb_search","args":{"query":"dune"}}`},
		final("Found Dune (2021)."),
		ollamatest.Reply{Content: `{"thought":"add it","action":"radarr_add","args":{ "query" : "dune" }}`},
	)
	resp, body := e.do(t, "POST", "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"find dune"}]}`)
	s := string(body)
	if resp.StatusCode != 200 {
		t.Errorf("stream: %d\n%s", resp.StatusCode, s)
	}
	// Tool text goes to the reasoning, never to the content.
	var content, reasoning strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch server.CompletionChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, c := range ch.Choices {
			content.WriteString(c.Delta.Content)
			reasoning.WriteString(c.Delta.ReasoningContent)
		}
	}
	if content.String() != "Found Dune (2021)." {
		t.Errorf("content = %q", content.String())
	}
	if want := "Step 1: look it up\n\nCalling `tmdb_search` `{\"query\":\"dune\"}`\n\nResult: `Dune (2021), id 438631`\n\nStep 2: t\n\n"; reasoning.String() != want {
		t.Errorf("reasoning = %q\nwant        %q", reasoning.String(), want)
	}

	got, err := openaiClient(e, "").Chat.Completions.New(context.Background(), params(openai.UserMessage("add dune")))
	if err != nil {
		t.Fatal(err)
	}
	want := "I need your yes or no before I run `radarr_add` with:\n- `query`: `\"dune\"`\n"
	if !strings.HasPrefix(got.Choices[0].Message.Content, want) || got.Choices[0].FinishReason != "stop" {
		t.Errorf("content = %q", got.Choices[0].Message.Content)
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.calls) != 1 || tl.calls[0] != "tmdb_search" {
		t.Errorf("calls = %v", tl.calls)
	}
	// The turn that asks is kept, so its approval can be answered; the
	// one that answered is not.
	_, list := e.do(t, "GET", "/v1/sessions", "")
	if n := strings.Count(string(list), `"id"`); n != 1 || !strings.Contains(string(list), `"title":"add dune"`) {
		t.Errorf("sessions = %s", list)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(outcomes, ",") != "answer,action_request" {
		t.Errorf("outcomes = %v", outcomes)
	}
}

func TestOpenAIBusy(t *testing.T) {
	e := start(t, "")
	slow := final("slow")
	slow.Delay = 3 * time.Second
	replies := make([]ollamatest.Reply, server.DefaultLimits.MaxConcurrentTurns)
	for i := range replies {
		replies[i] = slow
	}
	e.fake.Push(replies...)
	var wg sync.WaitGroup
	for range server.DefaultLimits.MaxConcurrentTurns {
		wg.Go(func() {
			resp, err := http.Post(e.url+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	for deadline := time.Now().Add(5 * time.Second); len(e.fake.Requests()) < server.DefaultLimits.MaxConcurrentTurns && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	resp, body := e.do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"code":"too_busy"`) || !strings.Contains(string(body), `"type":"server_error"`) {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	wg.Wait()
}
