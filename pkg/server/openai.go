package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// OpenAI-compatible serving: GET /v1/models and POST /v1/chat/completions let
// Open WebUI and any OpenAI client talk to mmcpd as if it were a model. Each
// completion is one stateless turn: the request's messages are the whole
// conversation, and nothing is stored, but for a turn that asks for approval
// (see openai_approval.go).

// OpenAIModel is the one model id GET /v1/models lists. Completions accept
// any model id (clients send what they have cached) and echo it back.
const OpenAIModel = "mmcpd"

// modelsCreated is the "created" of the listed model: when the daemon started.
var modelsCreated = time.Now().Unix()

// CompletionRequest is the part of an OpenAI chat completion request mmcpd
// reads. Every other field (temperature, max_tokens, user, n, tools, ...) is
// accepted and ignored.
type CompletionRequest struct {
	Model         string              `json:"model"`
	Messages      []CompletionMessage `json:"messages"`
	Stream        bool                `json:"stream"`
	StreamOptions *StreamOptions      `json:"stream_options"`
}

// StreamOptions is OpenAI's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// CompletionMessage is one message of a request: content is a string, an
// array of content parts, or null.
type CompletionMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Completion is the answer to a non-streaming request.
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"` // "chat.completion"
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   CompletionUsage    `json:"usage"`
}

// CompletionChoice is the one choice of a Completion.
type CompletionChoice struct {
	Index        int             `json:"index"`
	Message      AssistantOutput `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     *struct{}       `json:"logprobs"` // always null
}

// AssistantOutput is the assistant message of a choice.
type AssistantOutput struct {
	Role    string `json:"role"` // "assistant"
	Content string `json:"content"`
}

// CompletionUsage is OpenAI's usage, from the turn's model calls together.
type CompletionUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// CompletionChunk is one event of a streamed completion.
type CompletionChunk struct {
	ID      string           `json:"id"`
	Object  string           `json:"object"` // "chat.completion.chunk"
	Created int64            `json:"created"`
	Model   string           `json:"model"`
	Choices []ChunkChoice    `json:"choices"`         // empty in the usage chunk
	Usage   *CompletionUsage `json:"usage,omitempty"` // only in the usage chunk
}

// ChunkChoice is the one choice of a chunk.
type ChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"` // null but in the last chunk
}

// Delta is what a chunk adds to the assistant message.
type Delta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
	// ReasoningContent is the turn's progress (see reasoning), in the field
	// reasoning models' servers use: Open WebUI shows it as a collapsible
	// reasoning block above the answer, and clients that do not know it
	// ignore it.
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// ModelList is GET /v1/models.
type ModelList struct {
	Object string      `json:"object"` // "list"
	Data   []ModelInfo `json:"data"`
}

// ModelInfo is one listed model.
type ModelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// OpenAIError is every error of the OpenAI routes, in OpenAI's shape.
type OpenAIError struct {
	Error OpenAIErrorDetail `json:"error"`
}

// OpenAIErrorDetail says what went wrong. Code is one of the codes of the
// native API's error table.
type OpenAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"` // invalid_request_error below 500, server_error from 500
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	s.reply(w, http.StatusOK, ModelList{Object: "list", Data: []ModelInfo{
		{ID: OpenAIModel, Object: "model", Created: modelsCreated, OwnedBy: "mmcpd"},
	}})
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if !s.decodeOpenAI(w, r, &req) {
		return
	}
	conv, message, problem := openAIConversation(req.Messages)
	if problem != "" {
		s.failOpenAI(w, r, http.StatusBadRequest, "invalid_request", "messages", problem)
		return
	}
	if n := utf8.RuneCountInString(message); n > s.Limits.MaxMessageChars {
		s.failOpenAI(w, r, http.StatusBadRequest, "message_too_long", "messages",
			fmt.Sprintf("the last user message (with the client's system instructions) has %d characters; at most %d (MMCP_MAX_MESSAGE_CHARS)", n, s.Limits.MaxMessageChars))
		return
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		s.failOpenAI(w, r, http.StatusServiceUnavailable, "too_busy", "",
			fmt.Sprintf("%d turns are running (MMCP_MAX_CONCURRENT_TURNS); try again shortly", s.Limits.MaxConcurrentTurns))
		return
	}
	ctx := r.Context()
	model := req.Model
	if model == "" {
		model = OpenAIModel
	}
	id, created := "chatcmpl-"+trace.ID(ctx), time.Now().Unix()
	base := CompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model}
	if s.Tasks != nil && isTask(req.Messages) {
		s.task(w, r, &req, base)
		return
	}
	if reply, ok := matchApproval(req.Messages); ok && s.answerApproval(w, r, &req, reply, base) {
		return
	}
	s.complete(w, r, &req, base, func(turnCtx context.Context, progress loop.Observer) (string, *loop.Result, error) {
		before := len(conv.Messages)
		res, err := s.Turns.Run(turnCtx, &conv, message, progress)
		err = turnEnd(r, turnCtx, err)
		s.openAITurnDone(ctx, res, err)
		if err != nil {
			return "", res, err
		}
		if res.Pending == nil {
			return res.Answer, res, nil
		}
		q, err := s.pauseOpenAI(r, req.Messages, &conv, before, res)
		return q, res, err
	})
}

// completionTurn runs the turn behind a completion, within turnCtx, handing
// its events to progress (nil when the answer is not streamed), and returns
// the answer's text. Its error is the turn's as the client should get it
// (turnEnd has been applied).
type completionTurn func(turnCtx context.Context, progress loop.Observer) (answer string, res *loop.Result, err error)

// complete answers a completion request with what run gives: one JSON
// completion, or, when the client asked for a stream, the role, the turn's
// progress and the answer as chunks.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, req *CompletionRequest, base CompletionChunk, run completionTurn) {
	ctx := r.Context()
	turnCtx, cancel := s.turnContext(r)
	defer cancel()

	if !req.Stream {
		answer, res, err := run(turnCtx, nil)
		if err != nil {
			if clientLeft(r) {
				s.log().InfoContext(ctx, "turn cancelled by the client", "err", err)
				return
			}
			status, code, msg := s.openAITurnError(r, err)
			s.failOpenAI(w, r, status, code, "", msg)
			return
		}
		s.reply(w, http.StatusOK, Completion{
			ID: base.ID, Object: "chat.completion", Created: base.Created, Model: base.Model,
			Choices: []CompletionChoice{{Message: AssistantOutput{Role: "assistant", Content: answer}, FinishReason: "stop"}},
			Usage:   openAIUsage(res),
		})
		return
	}

	st := &completionStream{sse: newSSEWriter(w, s.Limits.StreamHeartbeat), base: base}
	defer st.sse.stop()
	st.delta(Delta{Role: "assistant"}, nil)
	answer, res, err := run(turnCtx, st.progress)
	if err != nil {
		if clientLeft(r) {
			s.log().InfoContext(ctx, "turn cancelled by the client", "err", err)
			return
		}
		status, code, msg := s.openAITurnError(r, err)
		s.log().WarnContext(ctx, "streamed completion failed", "code", code, "err", err)
		noteFailure(r, code, msg)
		st.send(OpenAIError{Error: OpenAIErrorDetail{Message: msg, Type: openAIErrorType(status), Code: code}})
		st.done()
		return
	}
	st.answer(answer)
	stop := "stop"
	st.delta(Delta{}, &stop)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		c := st.base
		c.Choices = []ChunkChoice{}
		u := openAIUsage(res)
		c.Usage = &u
		st.send(c)
	}
	st.done()
}

// openAITurnDone tells TurnDone how the turn ended, with the outcomes finish
// uses.
func (s *Server) openAITurnDone(ctx context.Context, res *loop.Result, err error) {
	if s.TurnDone == nil {
		return
	}
	switch {
	case err != nil && ctx.Err() != nil:
		s.TurnDone("cancelled")
	case err != nil:
		s.TurnDone("failed")
	case res.Pending != nil:
		s.TurnDone(TypeActionRequest)
	default:
		s.TurnDone(TypeAnswer)
	}
}

func openAIUsage(res *loop.Result) CompletionUsage {
	u := res.Usage
	return CompletionUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
}

// openAIConversation turns a request's messages into the conversation before
// the turn and the turn's user message, or says what is wrong with them.
//
// User messages become user messages; assistant messages become final answers
// in the envelope the loop records, so the model sees the history it would
// have written. System and developer messages are the client's instructions:
// the daemon's system prompt stays the only system message, and their text is
// put before the last user message, marked as the client's. Blank messages are
// left out. The last message must be the user's.
func openAIConversation(msgs []CompletionMessage) (conv convo.Conversation, message, problem string) {
	if len(msgs) == 0 {
		return conv, "", "messages must not be empty"
	}
	if last := msgs[len(msgs)-1].Role; last != "user" {
		return conv, "", fmt.Sprintf("the last message must be the user's (role \"user\"), not %q", last)
	}
	var instructions []string
	for i, m := range msgs {
		field := fmt.Sprintf("messages[%d].content", i)
		text, err := contentText(m.Content)
		if err == nil {
			err = plainText(field, text)
		}
		if err != nil {
			return conv, "", fmt.Sprintf("%s: %v", field, err)
		}
		empty := blank(text)
		switch {
		case i == len(msgs)-1:
			if empty {
				return conv, "", "the last user message must not be empty"
			}
			message = text
		case empty && (m.Role == "system" || m.Role == "developer" || m.Role == "user" || m.Role == "assistant"):
		case m.Role == "system" || m.Role == "developer":
			instructions = append(instructions, text)
		case m.Role == "user":
			conv.Append(convo.Message{Role: convo.User, Content: text})
		case m.Role == "assistant":
			conv.Append(convo.Message{Role: convo.Assistant, Content: answerEnvelope(text)})
		default:
			return conv, "", fmt.Sprintf("messages[%d].role %q is not supported; mmcpd takes system, developer, user and assistant messages", i, m.Role)
		}
	}
	if len(instructions) > 0 {
		message = "Instructions from the client:\n" + strings.Join(instructions, "\n\n") + "\n\nMy message:\n" + message
	}
	return conv, message, ""
}

// answerEnvelope is an earlier answer as the loop records one.
func answerEnvelope(answer string) string {
	b, _ := json.Marshal(schema.Decision{Thought: "", Action: schema.FinalAction, Args: mustJSON(schema.FinalResponse{Answer: answer})})
	return string(b)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are passed
	}
	return b
}

// contentText reads a message's content: a string, null, or content parts of
// which only text is read; other parts become a note that they were left out.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	// encoding/json would quietly make a lone surrogate U+FFFD.
	if esc, ok := loneSurrogate(raw); ok {
		return "", fmt.Errorf("holds a lone UTF-16 surrogate escape (%s); JSON text must be valid Unicode", esc)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or an array of content parts")
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
			continue
		}
		texts = append(texts, "[non-text content left out: mmcpd reads text only]")
	}
	return strings.Join(texts, "\n"), nil
}

// openAITurnError maps a turn's error as turnError does, keeping internal
// details in the log.
func (s *Server) openAITurnError(r *http.Request, err error) (status int, code, msg string) {
	status, code, _ = turnError(err)
	if code == "internal" {
		s.log().ErrorContext(r.Context(), "internal error", "err", err)
		return status, code, internalMessage(r)
	}
	return status, code, err.Error()
}

func internalMessage(r *http.Request) string {
	return "internal error; the log has details under trace id " + trace.ID(r.Context())
}

func openAIErrorType(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

func (s *Server) failOpenAI(w http.ResponseWriter, r *http.Request, status int, code, param, msg string) {
	noteFailure(r, code, msg)
	d := OpenAIErrorDetail{Message: msg, Type: openAIErrorType(status), Code: code}
	if param != "" {
		d.Param = &param
	}
	s.reply(w, status, OpenAIError{Error: d})
}

// decodeOpenAI is decode for the OpenAI routes: unknown fields are accepted,
// since OpenAI requests carry many that mmcpd has no use for, and errors are
// in OpenAI's shape. The 1 MiB limit and the UTF-8 check stay.
func (s *Server) decodeOpenAI(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.failOpenAI(w, r, http.StatusRequestEntityTooLarge, "body_too_large", "", fmt.Sprintf("request body is over %d bytes", MaxBodyBytes))
		return false
	case err != nil:
		s.failOpenAI(w, r, http.StatusBadRequest, "invalid_request", "", "reading request body: "+err.Error())
		return false
	case !utf8.Valid(body):
		s.failOpenAI(w, r, http.StatusBadRequest, "invalid_request", "", "request body is not valid UTF-8")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		s.failOpenAI(w, r, http.StatusBadRequest, "invalid_request", "", "request body is not a valid chat completion request: "+err.Error())
		return false
	}
	if dec.More() {
		s.failOpenAI(w, r, http.StatusBadRequest, "invalid_request", "", "request body holds more than one JSON value")
		return false
	}
	return true
}

// completionStream writes a streamed completion as OpenAI's Server-Sent
// Events: data lines only (and heartbeats), ended by data: [DONE]. Its
// progress runs on the turn's goroutine, the rest after the turn: never
// both at once.
type completionStream struct {
	sse  *sseWriter
	base CompletionChunk
	// thinking: a thought is being streamed into the reasoning, its
	// paragraph still open.
	thinking bool
	// streamed is the answer sent as content since the last retraction;
	// withdrawn says an answer was sent and then retracted.
	streamed  strings.Builder
	withdrawn bool
}

func (c *completionStream) delta(d Delta, finish *string) {
	chunk := c.base
	chunk.Choices = []ChunkChoice{{Delta: d, FinishReason: finish}}
	c.send(chunk)
}

func (c *completionStream) send(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(OpenAIError{Error: OpenAIErrorDetail{Message: err.Error(), Type: "server_error", Code: "internal"}})
	}
	c.sse.write("data: " + string(data) + "\n\n")
}

func (c *completionStream) done() {
	c.sse.write("data: [DONE]\n\n")
}

// progress sends what the turn does as reasoning_content deltas, and the
// answer as content deltas while the model writes it. An OpenAI stream cannot
// take back what it sent: when the loop retracts an attempt, the reasoning
// says so, and so does the content if an answer was in it; the corrected
// answer follows there.
func (c *completionStream) progress(e loop.Event) {
	switch e.Type {
	case loop.EventThoughtDelta:
		text := e.Text
		if !c.thinking {
			c.thinking = true
			text = fmt.Sprintf("Step %d: %s", e.Step, strings.TrimLeft(text, " \t\r\n"))
		}
		if text != "" {
			c.delta(Delta{ReasoningContent: text}, nil)
		}
		return
	case loop.EventAnswerDelta:
		// Reasoning goes before the content, never after it.
		c.endThought()
		c.streamed.WriteString(e.Text)
		c.delta(Delta{Content: e.Text}, nil)
		return
	case loop.EventAnswerRetracted:
		c.retract()
		return
	case loop.EventModelReply:
		if e.Action != "" && c.streamed.Len() > 0 {
			return // the thought's paragraph ended where the answer began
		}
		if c.endThought() {
			return // the thought was streamed: not again
		}
	}
	if text := reasoning(e); text != "" {
		c.delta(Delta{ReasoningContent: text}, nil)
	}
}

// endThought ends the paragraph of a thought being streamed, and reports
// whether there was one.
func (c *completionStream) endThought() bool {
	if !c.thinking {
		return false
	}
	c.thinking = false
	c.delta(Delta{ReasoningContent: "\n\n"}, nil)
	return true
}

// retract says that what was streamed of an attempt does not count.
func (c *completionStream) retract() {
	c.thinking = false
	c.delta(Delta{ReasoningContent: "\n\n(That reply was not valid: what it said is withdrawn.)\n\n"}, nil)
	if c.streamed.Len() > 0 {
		c.streamed.Reset()
		c.withdrawn = true
		c.delta(Delta{Content: "\n\n" + withdrawnNote + "\n\n"}, nil)
	}
}

// withdrawnNote follows, in the content, an answer that was streamed and then
// found invalid: the client keeps what it was sent, so the reader is told.
const withdrawnNote = "*(The answer above was not valid and is withdrawn; the corrected answer follows.)*"

// answer sends the turn's answer as content, unless it went out already as
// the model wrote it.
func (c *completionStream) answer(text string) {
	if c.streamed.Len() > 0 && c.streamed.String() == text {
		return
	}
	if c.streamed.Len() > 0 {
		// Not what was streamed (it should be): say so rather than glue
		// the two together.
		c.delta(Delta{Content: "\n\n" + withdrawnNote + "\n\n"}, nil)
	}
	c.delta(Delta{Content: text}, nil)
}

// resultChars bounds the tool arguments, results and problems shown in the
// reasoning: one line each, the whole being in the turn's steps.
const resultChars = 200

// reasoning is what an event adds to the reasoning shown beside the answer:
// each step's thought, the tool it calls, and one line of what the tool gave
// or why it failed. Each piece is a Markdown paragraph. Text from tools (and
// the validator's problems, which quote the model) goes in code spans: it is
// third-party, and a link or image in it must not be rendered (a browser
// would fetch the image).
func reasoning(e loop.Event) string {
	switch e.Type {
	case loop.EventModelReply:
		if (e.Action == "" && len(e.Calls) == 0) || strings.TrimSpace(e.Thought) == "" {
			return "" // an invalid reply: its validation_error tells
		}
		return fmt.Sprintf("Step %d: %s\n\n", e.Step, strings.TrimSpace(e.Thought))
	case loop.EventValidationError:
		return fmt.Sprintf("Step %d: the reply was not valid, asking again: %s\n\n", e.Step, codeSpan(strings.Join(e.Problems, "; ")))
	case loop.EventToolStart:
		return fmt.Sprintf("Calling %s %s\n\n", codeSpan(e.Action), codeSpan(string(e.Args)))
	case loop.EventToolRetry:
		return fmt.Sprintf("Failed, trying %s again in %s: %s\n\n", codeSpan(e.Action), e.Wait, codeSpan(e.Error))
	case loop.EventToolEnd:
		if e.Error != "" {
			return "Failed: " + codeSpan(e.Error) + "\n\n"
		}
		return "Result: " + codeSpan(e.Observation) + "\n\n"
	}
	return ""
}

// codeSpan is s on one line, cut to resultChars characters, as a Markdown
// code span (backticks inside become quotes, so the span cannot be closed
// early).
func codeSpan(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > resultChars {
		s = string([]rune(s)[:resultChars]) + "…"
	}
	if s == "" {
		return "(empty)"
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}
