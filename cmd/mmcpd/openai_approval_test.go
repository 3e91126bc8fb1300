package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// TestOpenAIApprovalThroughDaemon: from an OpenAI client (as Open WebUI is),
// a film is added to Radarr with a two-message conversation: the answer asks,
// the next message says yes. Real daemon, real radarr plugin, fake Radarr.
func TestOpenAIApprovalThroughDaemon(t *testing.T) {
	s := startMediaStack(t)
	c := openai.NewClient(option.WithBaseURL("http://"+s.addr+"/v1/"), option.WithAPIKey(canary), option.WithMaxRetries(0))
	ask := func(stream bool, msgs ...openai.ChatCompletionMessageParamUnion) string {
		t.Helper()
		p := openai.ChatCompletionNewParams{Model: "mmcpd", Messages: msgs}
		if !stream {
			got, err := c.Chat.Completions.New(context.Background(), p)
			if err != nil {
				t.Fatalf("completion: %v\nlogs:\n%s", err, s.logs)
			}
			return got.Choices[0].Message.Content
		}
		st := c.Chat.Completions.NewStreaming(context.Background(), p)
		defer st.Close()
		acc := openai.ChatCompletionAccumulator{}
		for st.Next() {
			acc.AddChunk(st.Current())
		}
		if err := st.Err(); err != nil {
			t.Fatalf("streamed completion: %v\nlogs:\n%s", err, s.logs)
		}
		return acc.Choices[0].Message.Content
	}
	posts := func() int {
		n := 0
		for _, l := range s.radarr.lines() {
			if strings.HasPrefix(l, "POST ") {
				n++
			}
		}
		return n
	}
	addDune := ollamatest.Reply{Content: `{"thought":"Dune is TMDB id 438631; I add it to Radarr.","action":"radarr_add","args":{"tmdb_id":438631}}`}
	link := regexp.MustCompile(`http://` + regexp.QuoteMeta(s.addr) + `/#session=[0-9a-f-]{36}&approval=[0-9a-f-]{36}`)

	for _, stream := range []bool{true, false} {
		s.ollama.Push(addDune, ollamatest.Reply{Content: `{"thought":"Done.","action":"final_response","args":{"answer":"Added Dune (2021) to Radarr."}}`})
		before := posts()
		first := openai.UserMessage("Add Dune (2021) to my films")
		q := ask(stream, first)
		if !strings.Contains(q, "`radarr_add` with:\n- `tmdb_id`: `438631`") || !strings.Contains(q, "Why: Dune is TMDB id 438631; I add it to Radarr.") ||
			!strings.Contains(q, "approval code ") || !link.MatchString(q) {
			t.Fatalf("stream=%v: the question:\n%s", stream, q)
		}
		if posts() != before {
			t.Fatalf("stream=%v: Radarr was called before the yes", stream)
		}
		yes := []openai.ChatCompletionMessageParamUnion{first, openai.AssistantMessage(q), openai.UserMessage("yes")}
		if got := ask(stream, yes...); got != "Added Dune (2021) to Radarr." {
			t.Errorf("stream=%v: answer after yes = %q", stream, got)
		}
		if n := posts() - before; n != 1 {
			t.Errorf("stream=%v: Radarr got %d POSTs, want 1", stream, n)
		}
		if got := ask(stream, yes...); !strings.Contains(got, "already answered") || posts()-before != 1 {
			t.Errorf("stream=%v: replayed yes: %q, Radarr POSTs %d", stream, got, posts()-before)
		}
		// The same question and yes after another history run nothing.
		s.ollama.Push(ollamatest.Reply{Content: `{"thought":"","action":"final_response","args":{"answer":"Hello."}}`})
		other := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Add Alien (1979)"), openai.AssistantMessage(q), openai.UserMessage("yes")}
		if got := ask(stream, other...); got != "Hello." || posts()-before != 1 {
			t.Errorf("stream=%v: a yes in another conversation: %q, Radarr POSTs %d", stream, got, posts()-before)
		}
	}

	// No: nothing reaches Radarr.
	s.ollama.Push(addDune, ollamatest.Reply{Content: `{"thought":"","action":"final_response","args":{"answer":"Not added."}}`})
	before := posts()
	first := openai.UserMessage("Add Dune (2021) again")
	q := ask(false, first)
	if got := ask(false, first, openai.AssistantMessage(q), openai.UserMessage("No.")); got != "Not added." || posts() != before {
		t.Errorf("no: %q, Radarr POSTs %d", got, posts()-before)
	}
	if strings.Contains(s.logs.String(), canary) {
		t.Error("the token reached the log")
	}
}
