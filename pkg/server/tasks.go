package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
)

// Open WebUI asks the chat's model for background tasks (a chat's title, its
// tags, follow-up questions, search queries, autocompletion) through the same
// /v1/chat/completions. Run as turns, they would take the union schema, tools
// and several calls of a slow model, and come back as a tool call or an
// envelope where a title belongs. They are answered by one plain model call
// instead.

// Completer makes one plain model call; *llm.Client is one.
type Completer interface {
	ChatStream(ctx context.Context, msgs []convo.Message, format json.RawMessage, onPiece func(string)) (llm.Reply, error)
}

// isTask reports whether a request is one of Open WebUI's task prompts. Its
// default templates all begin with "### Task:" and quote the chat between
// <chat_history> tags, and the request carries nothing else that marks it
// (the task's name stays in Open WebUI's own metadata). Both are asked of
// the last user message, so a person's question is never taken for one;
// a custom template without them runs as a turn, as before.
func isTask(msgs []CompletionMessage) bool {
	if len(msgs) == 0 {
		return false
	}
	text, err := contentText(msgs[len(msgs)-1].Content)
	if err != nil {
		return false
	}
	text = strings.TrimLeft(text, " \t\r\n")
	open := strings.Index(text, "<chat_history>")
	return strings.HasPrefix(text, "### Task:") && open >= 0 &&
		strings.Contains(text[open:], "</chat_history>")
}

// taskMessages are the client's messages as they are, roles kept, for a
// model call of their own: the daemon's prompt is not added, since the task
// prompt says all the model needs. Blank ones are left out. openAIConversation
// has checked the request already.
func taskMessages(msgs []CompletionMessage) []convo.Message {
	out := make([]convo.Message, 0, len(msgs))
	for _, m := range msgs {
		text, _ := contentText(m.Content)
		if blank(text) {
			continue
		}
		role := convo.User
		switch m.Role {
		case "system", "developer":
			role = convo.System
		case "assistant":
			role = convo.Assistant
		}
		out = append(out, convo.Message{Role: role, Content: text})
	}
	return out
}

// task answers a task request with one model call: no schema, no tools, no
// loop, streamed or not as the client asked. Nothing is stored, and it is
// not counted as a turn.
func (s *Server) task(w http.ResponseWriter, r *http.Request, req *CompletionRequest, base CompletionChunk) {
	ctx := r.Context()
	turnCtx, cancel := s.turnContext(r)
	defer cancel()
	msgs := taskMessages(req.Messages)
	s.log().InfoContext(ctx, "task request answered by one model call", "messages", len(msgs))

	fail := func(err error) (status int, code, msg string) {
		err = turnEnd(r, turnCtx, err)
		return s.openAITurnError(r, err)
	}
	if !req.Stream {
		reply, err := s.Tasks.ChatStream(turnCtx, msgs, nil, nil)
		if err != nil {
			if clientLeft(r) {
				return
			}
			status, code, msg := fail(err)
			s.failOpenAI(w, r, status, code, "", msg)
			return
		}
		s.reply(w, http.StatusOK, Completion{
			ID: base.ID, Object: "chat.completion", Created: base.Created, Model: base.Model,
			Choices: []CompletionChoice{{Message: AssistantOutput{Role: "assistant", Content: reply.Content}, FinishReason: finishReason(reply)}},
			Usage:   taskUsage(reply),
		})
		return
	}

	st := &completionStream{sse: newSSEWriter(w, s.Limits.StreamHeartbeat), base: base}
	defer st.sse.stop()
	st.delta(Delta{Role: "assistant"}, nil)
	reply, err := s.Tasks.ChatStream(turnCtx, msgs, nil, func(piece string) {
		if piece != "" {
			st.delta(Delta{Content: piece}, nil)
		}
	})
	if err != nil {
		if clientLeft(r) {
			return
		}
		status, code, msg := fail(err)
		noteFailure(r, code, msg)
		st.send(OpenAIError{Error: OpenAIErrorDetail{Message: msg, Type: openAIErrorType(status), Code: code}})
		st.done()
		return
	}
	finish := finishReason(reply)
	st.delta(Delta{}, &finish)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		c := st.base
		c.Choices = []ChunkChoice{}
		u := taskUsage(reply)
		c.Usage = &u
		st.send(c)
	}
	st.done()
}

// finishReason is "length" for a reply cut at the end of the model's
// context, as OpenAI says of one cut at max_tokens.
func finishReason(reply llm.Reply) string {
	if reply.Truncated {
		return "length"
	}
	return "stop"
}

func taskUsage(reply llm.Reply) CompletionUsage {
	u := reply.Usage
	return CompletionUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
}
