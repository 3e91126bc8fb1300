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
	// Changes means the tool changes something (adds, removes, pauses): a
	// failed call is never tried again on its own, since the first attempt
	// may have acted. Tools that need approval change something too.
	Changes bool `json:"changes,omitempty"`
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

	// ParallelCalls is the most tool calls one reply may ask for at once
	// (the union's batch branch); 1 or less: one call per reply.
	ParallelCalls int
	// ToolRetries is how many more times a read-only tool is called after a
	// transient failure (see Transient) before the model sees it fail.
	ToolRetries int
	// RetryWait is the wait before the first retry; it doubles before each
	// further one.
	RetryWait time.Duration
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
	ParallelCalls:   3,
	ToolRetries:     2,
	RetryWait:       time.Second,
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
	// Fallback is set when the turn called tools and every call failed: the
	// answer comes from the model's own knowledge, and says that the tools
	// failed and why.
	Fallback bool `json:"fallback,omitempty"`
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

// Step is one decision of the model and what came of it. A reply that asked
// for several calls at once is one Step per call, in the order asked, with
// the same Number and Thought, Call its place (from 1) and Batch how many.
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
	Call     int    `json:"call,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	// Attempts lists every call of the tool, when a transient failure made
	// it more than one; the last is the one the model saw.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// Attempt is one call of a tool that was tried more than once.
type Attempt struct {
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
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
		t.record(d.Tool, err)
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
	changes  map[string]bool // tools of this step that change something
	calls    int             // tool calls of this turn, after retries
	failures []failure       // the calls of this turn that failed
}

// failure is a failed call, for the fallback's account of what went wrong.
type failure struct{ tool, err string }

// record counts a finished call (its last attempt) for the fallback.
func (t *turn) record(tool string, err error) {
	t.calls++
	if err != nil {
		t.strikes[tool]++
		t.failures = append(t.failures, failure{tool, err.Error()})
	}
}

// allFailed says the turn called tools and every call failed.
func (t *turn) allFailed() bool { return t.calls > 0 && len(t.failures) == t.calls }

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
		t.res.Fallback = t.allFailed()
		st.Duration = time.Since(start)
		t.res.Steps = append(t.res.Steps, st)
		t.emit(Event{Type: EventFinal, Step: n, Thought: d.Thought, Answer: t.res.Answer, Fallback: t.res.Fallback})
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

	calls, batch := d.Calls, len(d.Calls) > 0
	if !batch {
		calls = []schema.Call{{Action: d.Action, Args: d.Args}}
	}
	outs := t.runCalls(ctx, n, calls, batch)
	if ctx.Err() != nil {
		return false, fmt.Errorf("step %d: %w", n, context.Cause(ctx))
	}
	// The results go into the conversation in the order asked, whatever
	// order they came in: each its own observation, after the one reply.
	msgs := []convo.Message{{Role: convo.Assistant, Content: string(reply), Tool: d.Action}}
	for i, o := range outs {
		s := st
		s.Action, s.Args = calls[i].Action, calls[i].Args
		if batch {
			s.Call, s.Batch = i+1, len(calls)
		}
		var content string
		content, s.Observation, s.Error = observation(o.label, o.out, o.err)
		if len(o.attempts) > 1 {
			s.Attempts = o.attempts
		}
		t.record(s.Action, o.err)
		msgs = append(msgs, convo.Message{Role: convo.Observation, Content: content, Tool: s.Action})
		s.Duration = o.end.Sub(start)
		t.res.Steps = append(t.res.Steps, s)
		t.logStep(ctx, s, modelTime, o.took)
	}
	t.conv.Append(msgs...)
	return false, nil
}

// outcome is what came of one call of a step, retries included.
type outcome struct {
	label    string // the tool, and its place in a batch: "tmdb_search (call 2 of 3)"
	out      string
	err      error
	attempts []Attempt
	took     time.Duration // from the first attempt to the last one's end
	end      time.Time
}

// runCalls runs a step's calls, all at once, each with its own deadline (and
// the tool's breaker, in Tools), and returns their outcomes in the order
// asked. Events are emitted here, on the turn's goroutine: tool_start for
// each call in order, then tool_retry and tool_end as the calls report them.
func (t *turn) runCalls(ctx context.Context, n int, calls []schema.Call, batch bool) []outcome {
	outs := make([]outcome, len(calls))
	place := func(i int) (call, of int) {
		if !batch {
			return 0, 0
		}
		return i + 1, len(calls)
	}
	type report struct {
		i     int
		retry *Event // nil: the call is over
	}
	reports := make(chan report)
	for i, c := range calls {
		call, of := place(i)
		outs[i].label = c.Action
		if batch {
			outs[i].label = fmt.Sprintf("%s (call %d of %d)", c.Action, call, of)
		}
		t.emit(Event{Type: EventToolStart, Step: n, Action: c.Action, Args: c.Args, Call: call, Batch: of})
	}
	for i, c := range calls {
		retry := t.retryable(c.Action)
		go func() {
			o := &outs[i]
			start := time.Now()
			o.out, o.err, o.attempts = t.attempts(ctx, c.Action, c.Args, retry, func(e Event) { reports <- report{i, &e} })
			o.end = time.Now()
			o.took = o.end.Sub(start)
			reports <- report{i: i}
		}()
	}
	for left := len(calls); left > 0; {
		r := <-reports
		call, of := place(r.i)
		if r.retry != nil {
			r.retry.Step, r.retry.Call, r.retry.Batch = n, call, of
			t.emit(*r.retry)
			continue
		}
		left--
		o := outs[r.i]
		_, result, errText := observation(o.label, o.out, o.err)
		t.emit(Event{Type: EventToolEnd, Step: n, Action: calls[r.i].Action, Observation: result, Error: errText, Duration: o.took, Call: call, Batch: of})
	}
	return outs
}

// retryable says whether a transient failure of the tool may be tried again:
// only a tool that changes nothing, since a first attempt that failed may
// still have acted.
func (t *turn) retryable(tool string) bool {
	return t.Config.ToolRetries > 0 && !t.approval[tool] && !t.changes[tool]
}

// Transient is what a tool error implements when trying again later may
// succeed (a service that answered 503, a connection refused): the plugin
// host's errors carry it from the plugin protocol.
type Transient interface{ Transient() bool }

func isTransient(err error) bool {
	var tr Transient
	return errors.As(err, &tr) && tr.Transient()
}

// attempts calls a tool, and again after a transient failure when retry
// allows, at most ToolRetries more times, waiting RetryWait, then twice as
// long each time. A wait that the turn's deadline would cut short is not
// begun, and cancellation ends it. notify gets a tool_retry event before
// each wait. It returns the last attempt's result and, when there was more
// than one, every attempt.
func (t *turn) attempts(ctx context.Context, tool string, args json.RawMessage, retry bool, notify func(Event)) (string, error, []Attempt) {
	var tries []Attempt
	wait := t.Config.RetryWait
	for n := 1; ; n++ {
		start := time.Now()
		out, err := t.call(ctx, tool, args)
		a := Attempt{Duration: time.Since(start)}
		if err != nil {
			a.Error = err.Error()
		}
		tries = append(tries, a)
		if err == nil || !retry || n > t.Config.ToolRetries || !isTransient(err) || ctx.Err() != nil {
			return out, err, tries
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return out, err, tries
		}
		notify(Event{Type: EventToolRetry, Action: tool, Attempt: n, Error: a.Error, Wait: wait})
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return out, err, tries
		case <-timer.C:
		}
		wait *= 2
	}
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
		t.emit(Event{Type: EventModelReply, Step: n, Attempt: attempt, Thought: d.Thought, Action: d.Action, Args: d.Args, Calls: d.Calls, Duration: took, Usage: &reply.Usage})
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
	var solo []string
	for _, t := range r.Catalog() {
		if t.Disabled == "" {
			tools = append(tools, t.Tool)
			if t.NeedsApproval {
				solo = append(solo, t.Name)
			}
		}
	}
	return r.unions.BatchUnion(tools, schema.Batch{Max: r.Config.ParallelCalls, Solo: solo})
}
