package loop_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
)

// TestPreview streams replies token by token (4 characters a token) and
// checks the deltas: the thought of every reply, the answer of a final one,
// in order before the reply's model_reply; put together they are what the
// final event says; an attempt shown and then found invalid is retracted
// before its validation_error, and the re-asked reply streams again.
func TestPreview(t *testing.T) {
	const answer = "Dune (2021), directed by Denis Villeneuve."
	tests := []struct {
		name    string
		replies []ollamatest.Reply
		want    []loop.EventType // deltas of one kind in a row counted once
	}{
		{
			name:    "answer",
			replies: []ollamatest.Reply{final(answer)},
			want: []loop.EventType{loop.EventStepStart, loop.EventThoughtDelta, loop.EventAnswerDelta,
				loop.EventModelReply, loop.EventFinal},
		},
		{
			name:    "tool then answer",
			replies: []ollamatest.Reply{reply("tmdb_search", `{"query":"Dune"}`), final(answer)},
			want: []loop.EventType{loop.EventStepStart, loop.EventThoughtDelta, loop.EventModelReply, loop.EventToolStart, loop.EventToolEnd,
				loop.EventStepStart, loop.EventThoughtDelta, loop.EventAnswerDelta, loop.EventModelReply, loop.EventFinal},
		},
		{
			// Valid JSON to the end, but the answer is blank: shown, then
			// retracted, then asked again.
			name:    "invalid answer retracted",
			replies: []ollamatest.Reply{{Content: `{"thought":"t","action":"final_response","args":{"answer":"  "}}`}, final(answer)},
			want: []loop.EventType{loop.EventStepStart, loop.EventThoughtDelta, loop.EventAnswerDelta, loop.EventAnswerRetracted,
				loop.EventModelReply, loop.EventValidationError, loop.EventThoughtDelta, loop.EventAnswerDelta, loop.EventModelReply, loop.EventFinal},
		},
		{
			name:    "broken JSON retracted",
			replies: []ollamatest.Reply{{Content: `{"thought":"t","action":"final_response","args":{"answer":"Du` + "\x00"}, final(answer)},
			want: []loop.EventType{loop.EventStepStart, loop.EventThoughtDelta, loop.EventAnswerDelta, loop.EventAnswerRetracted,
				loop.EventModelReply, loop.EventValidationError, loop.EventThoughtDelta, loop.EventAnswerDelta, loop.EventModelReply, loop.EventFinal},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := ollamatest.New(t, tt.replies...)
			fake.SetCost(ollamatest.Cost{GenRate: 10000, CharsPerToken: 4})
			var events []loop.Event
			res, err := newRunner(t, fake, newToolbox(t)).Run(context.Background(), &convo.Conversation{}, "hi", func(e loop.Event) {
				events = append(events, e)
			})
			if err != nil {
				t.Fatal(err)
			}
			var types []loop.EventType
			var answerDeltas int
			var streamed strings.Builder
			for _, e := range events {
				if e.TraceID != res.TraceID {
					t.Errorf("%s: trace id %q, want %q", e.Type, e.TraceID, res.TraceID)
				}
				switch e.Type {
				case loop.EventAnswerDelta:
					answerDeltas++
					streamed.WriteString(e.Text)
				case loop.EventAnswerRetracted:
					streamed.Reset()
				}
				if n := len(types); n == 0 || types[n-1] != e.Type || !strings.HasSuffix(string(e.Type), "_delta") {
					types = append(types, e.Type)
				}
			}
			if !slices.Equal(types, tt.want) {
				t.Errorf("events = %v\nwant     %v", types, tt.want)
			}
			if streamed.String() != answer || res.Answer != answer {
				t.Errorf("answer deltas make %q, the answer is %q; want %q", streamed.String(), res.Answer, answer)
			}
			if answerDeltas < 5 {
				t.Errorf("%d answer deltas, want one per token or so", answerDeltas)
			}
		})
	}
}
