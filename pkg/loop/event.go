package loop

import (
	"encoding/json"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/schema"
)

// Observer receives a turn's events as they happen, on the turn's goroutine.
// It must not block for long: the turn waits for it.
type Observer func(Event)

// EventType names what happened.
type EventType string

// The events of a turn, in the order they can occur within a step.
const (
	EventStepStart EventType = "step_start"
	// EventThoughtDelta carries the thought's text decoded since the last
	// one (Text), while the model writes its reply; any action.
	EventThoughtDelta EventType = "thought_delta"
	// EventAnswerDelta carries the answer's new text (Text) once the reply
	// is known to be a final_response, while the model writes it.
	EventAnswerDelta EventType = "answer_delta"
	// EventAnswerRetracted says that the thought and answer deltas of this
	// step's attempt (Attempt) are void: the reply turned out invalid, or
	// could not be followed. The model is asked again as usual; only the
	// deltas of a valid reply, and its final event, count.
	EventAnswerRetracted EventType = "answer_retracted"
	EventModelReply      EventType = "model_reply"
	EventValidationError EventType = "validation_error"
	EventToolStart       EventType = "tool_start"
	EventToolRetry       EventType = "tool_retry" // a transient failure (Error) of attempt Attempt; again after Wait
	EventToolEnd         EventType = "tool_end"
	EventActionRequest   EventType = "action_request"
	EventFinal           EventType = "final"
	EventError           EventType = "error"
	// EventContextOverflow comes just before the error event of a turn
	// whose system prompt and own messages do not fit the character budget
	// (see ContextOverflowError), with the sizes.
	EventContextOverflow EventType = "context_overflow"
)

// Event is one thing that happened in a turn. Fields not relevant to the type
// are empty.
type Event struct {
	Type        EventType       `json:"type"`
	TraceID     string          `json:"trace_id"`
	Step        int             `json:"step,omitempty"`
	Attempt     int             `json:"attempt,omitempty"`
	Action      string          `json:"action,omitempty"`
	Thought     string          `json:"thought,omitempty"`
	Args        json.RawMessage `json:"args,omitempty"`
	Observation string          `json:"observation,omitempty"`
	Problems    []string        `json:"problems,omitempty"`
	Answer      string          `json:"answer,omitempty"`
	// Text is the new text of a thought_delta or answer_delta.
	Text     string        `json:"text,omitempty"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"`
	// Usage is the model call's, on model_reply events.
	Usage *llm.Usage `json:"usage,omitempty"`
	// Calls are the calls a valid model_reply asked for at once (Action and
	// Args are then empty). The tool events of such a reply carry the
	// call's place in it (Call, from 1) and how many there are (Batch).
	Calls []schema.Call `json:"calls,omitempty"`
	Call  int           `json:"call,omitempty"`
	Batch int           `json:"batch,omitempty"`
	// Wait is how long a tool_retry waits before the next attempt.
	Wait time.Duration `json:"wait_ns,omitempty"`
	// Fallback marks a final answer given after every tool call of the turn
	// failed (see Result.Fallback).
	Fallback bool `json:"fallback,omitempty"`
	// The prompt's sizes in characters, on context_overflow events: the
	// system prompt, this turn's messages, and the budget they exceed.
	SystemChars int `json:"system_chars,omitempty"`
	TurnChars   int `json:"turn_chars,omitempty"`
	BudgetChars int `json:"budget_chars,omitempty"`
}
