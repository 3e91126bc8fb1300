package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// Open WebUI's default task templates (backend/open_webui/config.py), as it
// sends them: {{MESSAGES:END:n}} filled with the chat so far.
const (
	webuiHistory = "<chat_history>\nUSER: is dune in my library?\nASSISTANT: Yes, Dune (2021) is in your library.\n</chat_history>"

	titleTask = "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history.\n### Guidelines:\n- The title should clearly represent the main theme or subject of the conversation.\n- Use emojis that enhance understanding of the topic, but avoid quotation marks or special formatting.\n- Write the title in the chat's primary language; default to English if multilingual.\n- Prioritize accuracy over excessive creativity; keep it clear and simple.\n- Your entire response must consist solely of the JSON object, without any introductory or concluding text.\n- The output must be a single, raw JSON object, without any markdown code fences or other encapsulating text.\n- Ensure no conversational text, affirmations, or explanations precede or follow the raw JSON output, as this will cause direct parsing failure.\n### Output:\nJSON format: { \"title\": \"your concise title here\" }\n### Examples:\n- { \"title\": \"📉 Stock Market Trends\" },\n- { \"title\": \"🍪 Perfect Chocolate Chip Recipe\" },\n- { \"title\": \"Evolution of Music Streaming\" },\n- { \"title\": \"Remote Work Productivity Tips\" },\n- { \"title\": \"Artificial Intelligence in Healthcare\" },\n- { \"title\": \"🎮 Video Game Development Insights\" }\n### Chat History:\n" + webuiHistory

	tagsTask = "### Task:\nGenerate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 more specific subtopic tags.\n\n### Guidelines:\n- Start with high-level domains (e.g. Science, Technology, Philosophy, Arts, Politics, Business, Health, Sports, Entertainment, Education)\n- Consider including relevant subfields/subdomains if they are strongly represented throughout the conversation\n- If content is too short (less than 3 messages) or too diverse, use only [\"General\"]\n- Use the chat's primary language; default to English if multilingual\n- Prioritize accuracy over specificity\n\n### Output:\nJSON format: { \"tags\": [\"tag1\", \"tag2\", \"tag3\"] }\n\n### Chat History:\n" + webuiHistory

	followUpsTask = "### Task:\nSuggest 3-5 relevant follow-up questions or prompts that the user might naturally ask next in this conversation as a **user**, based on the chat history, to help continue or deepen the discussion.\n### Guidelines:\n- Write all follow-up questions from the user’s point of view, directed to the assistant.\n- Make questions concise, clear, and directly related to the discussed topic(s).\n- Only suggest follow-ups that make sense given the chat content and do not repeat what was already covered.\n- If the conversation is very short or not specific, suggest more general (but relevant) follow-ups the user might ask.\n- Use the conversation's primary language; default to English if multilingual.\n- Response must be a JSON array of strings, no extra text or formatting.\n### Output:\nJSON format: { \"follow_ups\": [\"Question 1?\", \"Question 2?\", \"Question 3?\"] }\n### Chat History:\n" + webuiHistory
)

// startTasks is a server with tools and task requests answered plainly
// (unless off), counting the turns that ended.
func startTasks(t *testing.T, off bool, script ...ollamatest.Reply) (*env, *tools, func() []string) {
	t.Helper()
	tl := &tools{}
	var mu sync.Mutex
	var turns []string
	e := startWith(t, options{tools: tl, configure: func(_ *store.Store, r *loop.Runner, api *server.Server) {
		if !off {
			api.Tasks = r.Model.(server.Completer)
		}
		api.TurnDone = func(o string) { mu.Lock(); defer mu.Unlock(); turns = append(turns, o) }
	}}, script...)
	return e, tl, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), turns...) }
}

// TestOpenAITasks: each task gets one plain model call with the client's
// messages as they are (no schema, no daemon prompt), no tool runs, and the
// model's text comes back as the answer, streamed or not.
func TestOpenAITasks(t *testing.T) {
	tests := []struct {
		name, prompt, reply string
	}{
		{"title", titleTask, `{ "title": "🎬 Dune In The Library" }`},
		{"tags", tagsTask, `{ "tags": ["Entertainment", "Movies", "Media Library"] }`},
		{"follow-ups", followUpsTask, `{ "follow_ups": ["Is Dune Part Two there too?", "What else is by Villeneuve?"] }`},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			name := tt.name
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				e, tl, turns := startTasks(t, false, ollamatest.Reply{Content: tt.reply, PromptTokens: 300, CompletionTokens: 12})
				c := openaiClient(e, "")
				p := params(openai.UserMessage(tt.prompt))
				var got string
				var usage openai.CompletionUsage
				if stream {
					p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
					s := c.Chat.Completions.NewStreaming(context.Background(), p)
					defer s.Close()
					acc := openai.ChatCompletionAccumulator{}
					for s.Next() {
						ch := s.Current()
						acc.AddChunk(ch)
						if strings.Contains(ch.RawJSON(), "reasoning_content") {
							t.Errorf("reasoning in a task: %s", ch.RawJSON())
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					if acc.Choices[0].FinishReason != "stop" || acc.ID == "" || acc.Model != "gpt-4o" {
						t.Errorf("accumulated %+v", acc.ChatCompletion)
					}
					got, usage = acc.Choices[0].Message.Content, acc.Usage
				} else {
					res, err := c.Chat.Completions.New(context.Background(), p)
					if err != nil {
						t.Fatal(err)
					}
					if res.Object != "chat.completion" || res.Choices[0].FinishReason != "stop" || !strings.HasPrefix(res.ID, "chatcmpl-") {
						t.Errorf("completion %+v", res)
					}
					got, usage = res.Choices[0].Message.Content, res.Usage
				}
				if got != tt.reply {
					t.Errorf("answer = %q, want the model's text %q", got, tt.reply)
				}
				if usage.PromptTokens != 300 || usage.CompletionTokens != 12 || usage.TotalTokens != 312 {
					t.Errorf("usage = %+v", usage)
				}
				reqs := e.fake.Requests()
				if len(reqs) != 1 {
					t.Fatalf("%d model calls, want 1", len(reqs))
				}
				if len(reqs[0].Format) != 0 {
					t.Errorf("format = %s, want none", reqs[0].Format)
				}
				if m := reqs[0].Messages; len(m) != 1 || m[0].Role != "user" || m[0].Content != tt.prompt {
					t.Errorf("model saw %+v, want the task prompt alone", m)
				}
				if len(tl.calls) != 0 || len(turns()) != 0 {
					t.Errorf("tools %v, turns %v: want none", tl.calls, turns())
				}
				noSessions(t, e, "")
			})
		}
	}
}

// TestOpenAITaskKeepsClientMessages: a task request's system message (a
// workspace model's prompt in Open WebUI) stays a system message, and the
// daemon's own prompt is not added.
func TestOpenAITaskKeepsClientMessages(t *testing.T) {
	e, _, _ := startTasks(t, false, ollamatest.Reply{Content: `{"title":"Dune"}`})
	c := openaiClient(e, "")
	if _, err := c.Chat.Completions.New(context.Background(), params(openai.SystemMessage("Be brief."), openai.UserMessage(titleTask))); err != nil {
		t.Fatal(err)
	}
	m := e.fake.Requests()[0].Messages
	if len(m) != 2 || m[0].Role != "system" || m[0].Content != "Be brief." || m[1].Content != titleTask {
		t.Errorf("model saw %+v", m)
	}
}

// TestOpenAINotATask: a question, even one that looks a little like a task,
// and a task while tasks are off, run a turn: the union, the daemon's prompt.
func TestOpenAINotATask(t *testing.T) {
	tests := []struct {
		name, message string
		off           bool
	}{
		{"question", "is dune in my library?", false},
		{"task heading without a chat history", "### Task:\nfind dune and add it", false},
		{"chat history not after the heading", "what is <chat_history></chat_history> in ### Task: prompts?", false},
		{"tasks off", titleTask, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, turns := startTasks(t, tt.off, final("An answer."))
			c := openaiClient(e, "")
			res, err := c.Chat.Completions.New(context.Background(), params(openai.UserMessage(tt.message)))
			if err != nil {
				t.Fatal(err)
			}
			if res.Choices[0].Message.Content != "An answer." {
				t.Errorf("answer = %q", res.Choices[0].Message.Content)
			}
			reqs := e.fake.Requests()
			if len(reqs) != 1 || len(reqs[0].Format) == 0 || reqs[0].Messages[0].Role != "system" {
				t.Errorf("not a turn: %d calls, %+v", len(reqs), reqs)
			}
			if got := turns(); len(got) != 1 || got[0] != server.TypeAnswer {
				t.Errorf("turns = %v", got)
			}
		})
	}
}
