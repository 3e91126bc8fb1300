package server_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// tokenByToken makes the fake model write its replies 4 characters at a
// time, quickly, as Ollama streams them.
var tokenByToken = ollamatest.Cost{GenRate: 2000, CharsPerToken: 4}

// badAnswer is a reply whose JSON is whole but carries a field the
// envelope does not have: its answer streams, then it fails validation.
var badAnswer = ollamatest.Reply{Content: `{"thought":"t","action":"final_response","args":{"answer":"   -"},"extra":1}`}

// TestStreamDeltas reads a streamed turn over HTTP: the thought and the
// answer arrive as deltas while the model writes, before model_reply and
// final; the answer deltas make the answer; an attempt shown and then found
// invalid is retracted, and the re-asked reply streams in its place.
func TestStreamDeltas(t *testing.T) {
	const answer = "Dune (2021) is in your library, in 4K."
	tests := []struct {
		name    string
		script  []ollamatest.Reply
		want    []string // a run of one delta kind counted once
		retract int      // answer_retracted events
	}{
		{name: "answer", script: []ollamatest.Reply{final(answer)},
			want: []string{"start", "step_start", "thought_delta", "answer_delta", "model_reply", "final", "done"}},
		{name: "retracted, then asked again", script: []ollamatest.Reply{badAnswer, final(answer)}, retract: 1,
			want: []string{"start", "step_start", "thought_delta", "answer_delta", "answer_retracted", "model_reply", "validation_error",
				"thought_delta", "answer_delta", "model_reply", "final", "done"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, "", tt.script...)
			e.fake.SetCost(tokenByToken)
			resp, events := e.stream(t, "/v1/chat", `{"message":"is Dune there?"}`)
			var names []string
			var streamed strings.Builder
			deltas, retracts := 0, 0
			for _, ev := range events {
				var d struct {
					Text    string `json:"text"`
					TraceID string `json:"trace_id"`
				}
				if err := json.Unmarshal(ev.data, &d); err != nil {
					t.Fatal(err)
				}
				if d.TraceID != resp.Header.Get("X-Trace-Id") {
					t.Errorf("%s: trace id %q", ev.name, d.TraceID)
				}
				switch ev.name {
				case "answer_delta":
					deltas++
					streamed.WriteString(d.Text)
				case "answer_retracted":
					retracts++
					streamed.Reset()
				}
				if n := len(names); n == 0 || names[n-1] != ev.name || !strings.HasSuffix(ev.name, "_delta") {
					names = append(names, ev.name)
				}
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("events = %v\nwant     %v", names, tt.want)
			}
			if streamed.String() != answer || retracts != tt.retract {
				t.Errorf("answer deltas make %q after %d retractions; want %q after %d", streamed.String(), retracts, answer, tt.retract)
			}
			if deltas < 5 {
				t.Errorf("%d answer deltas, want about one a token", deltas)
			}
		})
	}
}

// TestOpenAIStreamsAnswer: through the OpenAI client, the answer arrives in
// many content chunks as it is written, and the thought in reasoning chunks
// before it. A retracted answer cannot be taken back there: the content says
// it is withdrawn, and the corrected answer follows.
func TestOpenAIStreamsAnswer(t *testing.T) {
	const answer = "Dune (2021) is in your library, in 4K."
	tests := []struct {
		name   string
		script []ollamatest.Reply
		want   string // the whole content
	}{
		{name: "answer", script: []ollamatest.Reply{final(answer)}, want: answer},
		{name: "retracted", script: []ollamatest.Reply{badAnswer, final(answer)},
			want: "   -\n\n*(The answer above was not valid and is withdrawn; the corrected answer follows.)*\n\n" + answer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, "", tt.script...)
			e.fake.SetCost(tokenByToken)
			stream := openaiClient(e, "").Chat.Completions.NewStreaming(context.Background(), params(openai.UserMessage("is dune there?")))
			defer stream.Close()
			var content, reasoning strings.Builder
			contentChunks := 0
			for stream.Next() {
				for _, choice := range stream.Current().Choices {
					if choice.Delta.Content != "" {
						contentChunks++
						content.WriteString(choice.Delta.Content)
					}
					if r, ok := choice.Delta.JSON.ExtraFields["reasoning_content"]; ok {
						var s string
						_ = json.Unmarshal([]byte(r.Raw()), &s)
						if contentChunks > 0 && tt.name == "answer" {
							t.Errorf("reasoning %q after the content", s)
						}
						reasoning.WriteString(s)
					}
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if content.String() != tt.want {
				t.Errorf("content = %q\nwant      %q", content.String(), tt.want)
			}
			if contentChunks < 5 {
				t.Errorf("%d content chunks, want the answer as it was written", contentChunks)
			}
			if !strings.HasPrefix(reasoning.String(), "Step 1: t") {
				t.Errorf("reasoning = %q", reasoning.String())
			}
		})
	}
}

// TestSteadyModelNotCut: a model that writes a token every 200 ms for longer
// than MMCP_LLM_TIMEOUT answers, since only its silences are bounded (by
// MMCP_LLM_IDLE_TIMEOUT once it has begun); one silent from the start is cut
// at MMCP_LLM_TIMEOUT, one that stops midway at MMCP_LLM_IDLE_TIMEOUT.
func TestSteadyModelNotCut(t *testing.T) {
	const answer = "ok"
	steady := ollamatest.Cost{GenRate: 4, CharsPerToken: 16} // 5 tokens, a piece every 250 ms
	tests := []struct {
		name       string
		reply      ollamatest.Reply
		idle       time.Duration
		wantStatus int
		wantText   string
	}{
		{name: "steady", reply: final(answer), idle: time.Second, wantStatus: 200},
		{name: "silent", reply: ollamatest.Reply{Content: final(answer).Content, Delay: 5 * time.Second}, idle: time.Second,
			wantStatus: 504, wantText: "did not answer within 1s (MMCP_LLM_TIMEOUT)"},
		{name: "stops midway", reply: final(answer), idle: 100 * time.Millisecond,
			wantStatus: 504, wantText: "sent nothing for 100ms (MMCP_LLM_IDLE_TIMEOUT)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startWith(t, options{model: func(o *llm.Options) { o.Timeout, o.IdleTimeout = time.Second, tt.idle }}, tt.reply)
			e.fake.SetCost(steady)
			began := time.Now()
			resp, body := e.do(t, "POST", "/v1/chat", `{"message":"hi"}`)
			took := time.Since(began)
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(body), tt.wantText) {
				t.Fatalf("%d %s; want %d saying %q", resp.StatusCode, body, tt.wantStatus, tt.wantText)
			}
			if tt.wantStatus == 200 && took < time.Second {
				t.Errorf("took %s, want longer than MMCP_LLM_TIMEOUT", took)
			}
		})
	}
}
