// Package loop owns one ReAct turn: asking the model for a typed decision,
// re-asking with precise errors when the reply is invalid, running the chosen
// tool, and stopping at an answer or a limit.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// Model is the language model: one chat call constrained by a JSON Schema.
type Model interface {
	Chat(ctx context.Context, msgs []convo.Message, format json.RawMessage) (llm.Reply, error)
}

// Streamer is a Model that can also hand over its reply's pieces as they
// arrive (llm.Client is one): the loop then previews the thought and the
// answer as they are written (see preview.go).
type Streamer interface {
	ChatStream(ctx context.Context, msgs []convo.Message, format json.RawMessage, onPiece func(string)) (llm.Reply, error)
}

// Tools is what the model can act with.
type Tools interface {
	// Tools lists every known tool, with why it is disabled where it is.
	Tools() []Tool
	// Call runs one tool. ctx carries the call's deadline.
	Call(ctx context.Context, name string, args json.RawMessage) (string, error)
}

// ContextSource gives live state (the time, what is downloading) for the
// system prompt, once per turn. It must return within its own deadlines.
type ContextSource interface {
	RuntimeContext(ctx context.Context) string
}

// Tool is a tool as the loop and the API list it.
type Tool struct {
	schema.Tool
	// NeedsApproval means each call waits for the user's yes (see Resume).
	NeedsApproval bool `json:"needs_approval,omitempty"`
	// Disabled says why the model cannot use the tool now; empty if it can.
	Disabled string `json:"disabled,omitempty"`
	// Kind is the kind of source the tool comes from ("plugin", "mcp").
	Kind string `json:"kind,omitempty"`
}

// Config holds the loop's limits.
type Config struct {
	MaxSteps        int           // tool decisions per turn before a forced answer
	MaxRetries      int           // re-asks per step after an invalid reply
	MaxContextChars int           // character budget of the window sent to the model
	MaxOutputChars  int           // observation size in the window
	ToolTimeout     time.Duration // per tool call
	MaxToolFailures int           // failures of one tool in one turn before it leaves the turn's union
}

// DefaultConfig is the loop's configuration when the daemon's settings are
// left alone.
var DefaultConfig = Config{
	MaxSteps:        5,
	MaxRetries:      2,
	MaxContextChars: 28000,
	MaxOutputChars:  4000,
	ToolTimeout:     30 * time.Second,
	MaxToolFailures: 3,
}

// Runner runs turns. It is safe for concurrent use by turns of different
// conversations; one conversation must run one turn at a time.
type Runner struct {
	Model   Model
	Tools   Tools         // nil means no tools
	Context ContextSource // nil means no runtime context
	Config  Config
	Log     *slog.Logger // nil means slog.Default()
	// Events, when set, sees every turn's events, besides the observer the
	// turn was given: for what watches all turns (metrics).
	Events Observer

	unions schema.Cache
	seen   seenTools // the tools the system prompt documents (see prompt.go)
}

// Result is what a turn produced.
type Result struct {
	TraceID string    `json:"trace_id"`
	Answer  string    `json:"answer"`
	Steps   []Step    `json:"steps"`
	Usage   llm.Usage `json:"usage"`
	// Forced is set when the step limit was reached and the answer was asked
	// for with FinalResponse as the only choice.
	Forced bool `json:"forced,omitempty"`
	// Pending is set, and Answer empty, when the turn stopped at a tool call
	// that needs the user's approval. The conversation ends with that call;
	// Resume goes on from there.
	Pending *ActionRequest `json:"pending,omitempty"`
}

// ActionRequest is a validated tool call waiting for the user's decision.
type ActionRequest struct {
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args"`
	Thought string          `json:"thought"`
}

// Decision is the user's answer to an ActionRequest.
type Decision struct {
	ActionRequest
	Approved bool
}

// Step is one decision of the model and what came of it.
type Step struct {
	Number      int             `json:"step"`
	Thought     string          `json:"thought"`
	Action      string          `json:"action"`
	Args        json.RawMessage `json:"args"`
	Observation string          `json:"observation,omitempty"`
	Error       string          `json:"error,omitempty"`
	Retries     int             `json:"retries,omitempty"`
	Duration    time.Duration   `json:"duration_ns"`
	// Backend and Model say which model server and model wrote the step's
	// decision; Failover, why the call moved to that server from the one
	// the session was on. A turn whose session moves says so here.
	Backend  string `json:"backend,omitempty"`
	Model    string `json:"model,omitempty"`
	Failover string `json:"failover,omitempty"`
}

// InvalidReplyError is returned when the model kept replying with invalid
// output after every re-ask allowed in a step.
type InvalidReplyError struct {
	Step     int
	Attempts int
	Last     *schema.ReplyError
}

func (e *InvalidReplyError) Error() string {
	return fmt.Sprintf("the model gave no valid reply in %d attempts at step %d; last problems: %s",
		e.Attempts, e.Step, strings.Join(e.Last.Problems, "; "))
}

// ContextOverflowError is returned when the system prompt (identity, rules,
// the tool catalogue) and the current turn (the user's message, every call
// and result so far, the tail and any correction) do not fit the budget:
// MaxContextChars, or less where the model's context holds less. Nothing
// shorter is sent instead: the window may drop earlier turns, but a prompt
// without this turn's own results would have the model decide blind.
type ContextOverflowError struct {
	Step   int
	System int // characters of the system prompt
	Turn   int // characters of this turn as sent, results at their cut size
	Budget int // characters the prompt may take
	// Limit says what Budget is when it is not MaxContextChars: what fits
	// the model's context (see Budgeted), or 70% of a prompt Ollama refused.
	Limit string
	// Cause is Ollama's refusal (llm.ErrContextTooLong) of a prompt within
	// Budget, already 70% of one it refused before.
	Cause error
}

func (e *ContextOverflowError) Error() string {
	const fix = "raise MMCP_OLLAMA_NUM_CTX, remove tools, or lower MMCP_TOOL_MAX_OUTPUT_CHARS"
	switch {
	case e.Cause != nil:
		return fmt.Sprintf("step %d: Ollama refused the prompt (system %d chars + this turn %d chars) as longer than the model's context, even cut to %d chars: %v; %s",
			e.Step, e.System, e.Turn, e.Budget, e.Cause, fix)
	case e.Limit != "":
		return fmt.Sprintf("step %d: the prompt (system %d chars + this turn %d chars) exceeds %s; %s", e.Step, e.System, e.Turn, e.Limit, fix)
	}
	return fmt.Sprintf("step %d: the prompt (system %d chars + this turn %d chars) exceeds MMCP_LLM_MAX_CONTEXT_CHARS=%d; "+
		"raise it (and MMCP_OLLAMA_NUM_CTX with it), remove tools, or lower MMCP_TOOL_MAX_OUTPUT_CHARS",
		e.Step, e.System, e.Turn, e.Budget)
}

func (e *ContextOverflowError) Unwrap() error { return e.Cause }

// Run runs one turn: message is the user's, conv the conversation so far. conv
// grows by the user message, each step's decision and observation, and the
// answer. Re-asked invalid replies never enter it. On error, conv keeps what
// happened before the error, since tools may have acted.
func (r *Runner) Run(ctx context.Context, conv *convo.Conversation, message string, obs Observer) (*Result, error) {
	ctx, t := r.newTurn(ctx, conv, obs)
	conv.Append(convo.Message{Role: convo.User, Content: message})
	return t.run(ctx, 1)
}

// Resume continues a turn that stopped at an ActionRequest: conv must end
// with that call. Approved, the tool runs; declined, the model is told the
// user said no. Either way the result is the call's observation, and the
// loop goes on to an answer with the steps the turn has left (the approved
// call counts as the first).
func (r *Runner) Resume(ctx context.Context, conv *convo.Conversation, d Decision, obs Observer) (*Result, error) {
	ctx, t := r.newTurn(ctx, conv, obs)
	start := time.Now()
	st := Step{Number: 1, Thought: d.Thought, Action: d.Tool, Args: d.Args}
	var content string
	if d.Approved {
		t.emit(Event{Type: EventToolStart, Step: 1, Action: d.Tool, Args: d.Args})
		out, err := t.call(ctx, d.Tool, d.Args)
		if ctx.Err() != nil {
			return t.result(fmt.Errorf("approved call: %w", context.Cause(ctx)))
		}
		content, st.Observation, st.Error = observation(d.Tool, out, err)
		t.emit(Event{Type: EventToolEnd, Step: 1, Action: d.Tool, Observation: st.Observation, Error: st.Error, Duration: time.Since(start)})
	} else {
		st.Error = "the user declined this call"
		content = d.Tool + " was not run: the user declined it. Do not call it again for this request; answer without it."
	}
	conv.Append(convo.Message{Role: convo.Observation, Content: content, Tool: d.Tool})
	st.Duration = time.Since(start)
	t.res.Steps = append(t.res.Steps, st)
	return t.run(ctx, 2)
}

func (r *Runner) newTurn(ctx context.Context, conv *convo.Conversation, obs Observer) (context.Context, *turn) {
	id := trace.ID(ctx)
	if id == "" {
		id = trace.New()
		ctx = trace.With(ctx, id)
	}
	t := &turn{
		Runner:  r,
		conv:    conv,
		obs:     obs,
		log:     r.Log,
		res:     &Result{TraceID: id},
		strikes: map[string]int{},
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	if r.Context != nil {
		t.runtime = r.Context.RuntimeContext(ctx)
	}
	return ctx, t
}

// run takes steps from first to the limit, then forces an answer.
func (t *turn) run(ctx context.Context, first int) (*Result, error) {
	for step := first; step <= t.Config.MaxSteps; step++ {
		done, err := t.step(ctx, step, false)
		if err != nil || done {
			return t.result(err)
		}
	}
	t.res.Forced = true
	_, err := t.step(ctx, t.Config.MaxSteps+1, true)
	return t.result(err)
}

// observation is what the model reads after a call, and the step's record.
func observation(tool, out string, err error) (content, result, errText string) {
	if err != nil {
		return tool + " failed: " + err.Error(), "", err.Error()
	}
	return "Result of " + tool + ":\n" + out, out, ""
}

// turn is the state of one Run.
type turn struct {
	*Runner
	conv     *convo.Conversation
	obs      Observer
	log      *slog.Logger
	res      *Result
	strikes  map[string]int  // tool failures in this turn
	runtime  string          // live state from the context providers
	approval map[string]bool // tools of this step that need the user's yes
}

func (t *turn) result(err error) (*Result, error) {
	if err != nil {
		t.emit(Event{Type: EventError, Error: err.Error()})
		return nil, err
	}
	return t.res, nil
}

// step asks the model for one decision and acts on it. final restricts the
// union to FinalResponse. It reports whether the turn is over.
func (t *turn) step(ctx context.Context, n int, final bool) (bool, error) {
	start := time.Now()
	t.emit(Event{Type: EventStepStart, Step: n})
	p, err := t.prompt(ctx, final)
	if err != nil {
		return false, fmt.Errorf("step %d: %w", n, err)
	}
	d, retries, modelTime, who, err := t.decide(ctx, n, p)
	if err != nil {
		return false, err
	}
	st := Step{Number: n, Thought: d.Thought, Action: d.Action, Args: d.Args, Retries: retries,
		Backend: who.Backend, Model: who.Model, Failover: who.Failover}
	reply, _ := json.Marshal(d)

	if d.Final() {
		t.conv.Append(convo.Message{Role: convo.Assistant, Content: string(reply)})
		t.res.Answer = d.Answer()
		st.Duration = time.Since(start)
		t.res.Steps = append(t.res.Steps, st)
		t.emit(Event{Type: EventFinal, Step: n, Thought: d.Thought, Answer: t.res.Answer})
		t.logStep(ctx, st, modelTime, 0)
		return true, nil
	}

	if t.approval[d.Action] {
		// Stop here: the call is validated and recorded; Resume runs it once
		// the user says yes.
		t.conv.Append(convo.Message{Role: convo.Assistant, Content: string(reply), Tool: d.Action})
		st.Duration = time.Since(start)
		t.res.Steps = append(t.res.Steps, st)
		t.res.Pending = &ActionRequest{Tool: d.Action, Args: d.Args, Thought: d.Thought}
		t.emit(Event{Type: EventActionRequest, Step: n, Action: d.Action, Args: d.Args, Thought: d.Thought})
		t.logStep(ctx, st, modelTime, 0)
		return true, nil
	}

	t.emit(Event{Type: EventToolStart, Step: n, Action: d.Action, Args: d.Args})
	callStart := time.Now()
	out, callErr := t.call(ctx, d.Action, d.Args)
	callTime := time.Since(callStart)
	if ctx.Err() != nil {
		return false, fmt.Errorf("step %d: %w", n, context.Cause(ctx))
	}
	var content string
	content, st.Observation, st.Error = observation(d.Action, out, callErr)
	if callErr != nil {
		t.strikes[d.Action]++
	}
	t.conv.Append(
		convo.Message{Role: convo.Assistant, Content: string(reply), Tool: d.Action},
		convo.Message{Role: convo.Observation, Content: content, Tool: d.Action},
	)
	st.Duration = time.Since(start)
	t.res.Steps = append(t.res.Steps, st)
	t.emit(Event{Type: EventToolEnd, Step: n, Action: d.Action, Observation: st.Observation, Error: st.Error, Duration: callTime})
	t.logStep(ctx, st, modelTime, callTime)
	return false, nil
}

// decide calls the model until it gives a valid decision, re-asking with the
// exact problems at most MaxRetries times. The failed attempts and the
// corrections live only here: once the model gets it right they are gone.
func (t *turn) decide(ctx context.Context, n int, p *prompt) (schema.Decision, int, time.Duration, answeredBy, error) {
	var extra []convo.Message // this step's failed attempts and corrections
	var modelTime time.Duration
	var who answeredBy
	for attempt := 0; ; attempt++ {
		callStart := time.Now()
		pv := t.preview(n, attempt)
		reply, err := t.ask(ctx, n, p, extra, pv.piece)
		modelTime += time.Since(callStart)
		if err != nil {
			pv.end(false)
			return schema.Decision{}, attempt, modelTime, who, err
		}
		t.res.Usage.Add(reply.Usage)
		who.add(reply)
		took := time.Since(callStart)

		// Decoded before the event, so that the event says what the model
		// decided (nothing, when the reply is invalid).
		d, err := decodeSafely(p.union, reply.Content)
		pv.end(err == nil)
		t.emit(Event{Type: EventModelReply, Step: n, Attempt: attempt, Thought: d.Thought, Action: d.Action, Args: d.Args, Duration: took, Usage: &reply.Usage})
		if err == nil {
			return d, attempt, modelTime, who, nil
		}
		var re *schema.ReplyError
		if !errors.As(err, &re) {
			return schema.Decision{}, attempt, modelTime, who, fmt.Errorf("step %d: decoding reply: %w", n, err)
		}
		if reply.Truncated {
			// The context ended the reply, not the model: told only that
			// its JSON is incomplete, it would write as much again.
			cut := fmt.Sprintf("reply: cut off at the end of the model's context after %d tokens; send a shorter reply", reply.Usage.CompletionTokens)
			re = &schema.ReplyError{Problems: append([]string{cut}, re.Problems...)}
		}
		t.emit(Event{Type: EventValidationError, Step: n, Attempt: attempt, Problems: re.Problems})
		if attempt >= t.Config.MaxRetries {
			return schema.Decision{}, attempt, modelTime, who, &InvalidReplyError{Step: n, Attempts: attempt + 1, Last: re}
		}
		extra = append(extra,
			convo.Message{Role: convo.Assistant, Content: convo.Cut(reply.Content, maxEcho)},
			convo.Message{Role: convo.User, Content: correction(re)},
		)
	}
}

// answeredBy is which server and model wrote a step's replies, and why a
// call moved, over every attempt of the step.
type answeredBy struct{ Backend, Model, Failover string }

func (a *answeredBy) add(r llm.Reply) {
	a.Backend, a.Model = r.Backend, r.Model
	if r.Failover != "" {
		a.Failover = r.Failover
	}
}

// ask sends the step's prompt with extra after it, handing the reply's
// pieces to onPiece as they come when the model streams. The window counts
// characters and Ollama tokens: when Ollama refuses the prompt as longer than
// the model's context, the budget becomes shrinkPercent of what was sent, for
// the rest of the step, and the call is made once more.
func (t *turn) ask(ctx context.Context, n int, p *prompt, extra []convo.Message, onPiece func(string)) (llm.Reply, error) {
	for {
		msgs, err := t.window(p, extra)
		var oe *convo.OverflowError
		switch {
		case errors.As(err, &oe):
			return llm.Reply{}, t.overflow(ctx, &ContextOverflowError{Step: n, System: oe.System, Turn: oe.Turn, Budget: oe.Budget, Limit: p.limit})
		case err != nil:
			return llm.Reply{}, fmt.Errorf("step %d: building the prompt: %w", n, err)
		}
		reply, err := t.chat(ctx, msgs, p.union.Format(), onPiece)
		switch {
		case err == nil:
			return reply, nil
		case !errors.Is(err, llm.ErrContextTooLong):
			return llm.Reply{}, fmt.Errorf("step %d: model call: %w", n, err)
		case p.refused != nil:
			system, turn := p.sizes(msgs, extra)
			return llm.Reply{}, t.overflow(ctx, &ContextOverflowError{Step: n, System: system, Turn: turn, Budget: p.budget, Cause: err})
		}
		sent := p.shrink(msgs, err)
		t.log.LogAttrs(ctx, slog.LevelWarn, "context_too_long",
			slog.Int("step", n),
			slog.Int("sent_chars", sent),
			slog.Int("budget_chars", p.budget),
			slog.String("error", err.Error()),
		)
	}
}

// chat calls the model, streamed when it can be.
func (t *turn) chat(ctx context.Context, msgs []convo.Message, format json.RawMessage, onPiece func(string)) (llm.Reply, error) {
	if s, ok := t.Model.(Streamer); ok && onPiece != nil {
		return s.ChatStream(ctx, msgs, format, onPiece)
	}
	return t.Model.Chat(ctx, msgs, format)
}

// overflow says, in the log and in an event, that the turn cannot go on
// within the budget, and returns e, the turn's error.
func (t *turn) overflow(ctx context.Context, e *ContextOverflowError) error {
	t.log.LogAttrs(ctx, slog.LevelWarn, "context_overflow",
		slog.Int("step", e.Step),
		slog.Int("system_chars", e.System),
		slog.Int("turn_chars", e.Turn),
		slog.Int("budget_chars", e.Budget),
	)
	t.emit(Event{Type: EventContextOverflow, Step: e.Step, SystemChars: e.System, TurnChars: e.Turn, BudgetChars: e.Budget})
	return e
}

// maxEcho bounds how much of an invalid reply is shown back to the model.
const maxEcho = 2000

// decodeSafely is Decode with a guarantee: no model output can crash a turn.
func decodeSafely(u *schema.Union, reply string) (d schema.Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decoder panic on model output: %v", p)
		}
	}()
	return u.Decode(reply)
}

// call runs a tool under the turn's deadline and turns a panic into an error.
func (t *turn) call(ctx context.Context, name string, args json.RawMessage) (out string, err error) {
	if t.Tools == nil {
		return "", fmt.Errorf("no tool named %s", name)
	}
	cctx, cancel := context.WithTimeout(ctx, t.Config.ToolTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tool %s crashed: %v", name, p)
		}
	}()
	out, err = t.Tools.Call(cctx, name, args)
	// A tool that only says its context ended gets a sentence that says
	// which deadline; a tool that explained itself keeps its own words.
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return "", fmt.Errorf("tool %s did not finish within %s", name, t.Config.ToolTimeout)
	}
	return out, err
}

func (t *turn) emit(e Event) {
	if t.obs == nil && t.Events == nil {
		return
	}
	e.TraceID = t.res.TraceID
	if t.Events != nil {
		t.Events(e)
	}
	if t.obs != nil {
		t.obs(e)
	}
}

func (t *turn) logStep(ctx context.Context, st Step, modelTime, toolTime time.Duration) {
	t.log.LogAttrs(ctx, slog.LevelInfo, "step",
		slog.Int("step", st.Number),
		slog.String("action", st.Action),
		slog.Int("validation_errors", st.Retries),
		slog.Duration("model", modelTime),
		slog.Duration("tool", toolTime),
		slog.Duration("total", st.Duration),
		slog.Bool("tool_error", st.Error != ""),
	)
}

// Catalog lists every known tool, with why each disabled one is disabled.
func (r *Runner) Catalog() []Tool {
	if r.Tools == nil {
		return []Tool{}
	}
	return r.Tools.Tools()
}

// Union returns the reply schema a turn starting now would use.
func (r *Runner) Union() (*schema.Union, error) {
	var tools []schema.Tool
	for _, t := range r.Catalog() {
		if t.Disabled == "" {
			tools = append(tools, t.Tool)
		}
	}
	return r.unions.Union(tools)
}
