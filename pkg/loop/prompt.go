package loop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/schema"
)

// A step's prompt is built in layers, what changes least first: Ollama reuses
// the longest prefix a prompt shares with the one before and reads the rest
// again, at a few dozen tokens a second on a machine without a GPU.
//
//  1. The system prompt: who the model is, the rules, the catalogue of the
//     tools usable now or at any step before (each with its arguments),
//     which of them ask the user first, the tools never usable yet with why,
//     an example. It is byte-identical while the tool set is: a tool that
//     goes down (a breaker opening, a service unreachable) keeps its entry,
//     and only the tail says it is unavailable now.
//  2. The conversation, whose older turns the window cuts in large steps.
//  3. The tail: one user message, sent last and never stored, holding what
//     changes from turn to turn and step to step: the runtime context, the
//     catalogue's tools unavailable now, and on the forced last step the
//     request for an answer. A re-ask's correction comes after it.
//
// So each prompt starts with the whole previous one but its tail: at each step
// the model reads again only the tail, not the history.

// prompt is what a step sends around the window.
type prompt struct {
	system string
	tail   string        // empty: no tail message
	union  *schema.Union // the reply's schema, sent as format
	budget int           // characters the whole prompt may take
	// limit says what the budget is, for an overflow error; empty means
	// MaxContextChars.
	limit string
	// refused is Ollama's refusal of a prompt of this step as longer than
	// the model's context; budget is then 70% of that prompt.
	refused error
}

// Budgeted is a Model that knows how many characters of prompt its context
// holds (llm.Client, at the characters-per-token ratio it has learned).
type Budgeted interface {
	// PromptBudget returns that number, and words that say where it comes
	// from, for an error that names the setting to change.
	// ctx is the turn's: a pool of servers answers for the server the
	// turn's session is on.
	PromptBudget(ctx context.Context) (chars int, why string)
}

// toolSet is the tool listing of one step, sorted for the prompt's layers.
type toolSet struct {
	usable   []schema.Tool // the union's
	listed   []schema.Tool // the catalogue: usable now or at a step before
	approval []string      // listed tools that ask the user first
	solo     []string      // usable tools that ask the user first: never in a batch
	never    []Tool        // never usable yet, with why: in the system prompt
	down     []Tool        // listed, not usable now, with why: in the tail
}

// seenTools remembers, for a Runner, the tools usable at some step since it
// started: the catalogue. Tools never usable (a plugin on standby, missing
// its settings) stay out of it, so that they cost the prompt a line, not
// their arguments.
type seenTools struct {
	mu    sync.Mutex
	names map[string]bool
}

// sortTools lists the tools for one step. A tool that failed
// MaxToolFailures times in this turn is disabled for the rest of it.
func (t *turn) sortTools() toolSet {
	var ts toolSet
	clear(t.approval)
	if t.Tools == nil {
		return ts
	}
	t.seen.mu.Lock()
	defer t.seen.mu.Unlock()
	if t.seen.names == nil {
		t.seen.names = map[string]bool{}
	}
	if t.approval == nil {
		t.approval = map[string]bool{}
	}
	if t.changes == nil {
		t.changes = map[string]bool{}
	}
	clear(t.changes)
	for _, tl := range t.Tools.Tools() {
		t.approval[tl.Name] = tl.NeedsApproval
		t.changes[tl.Name] = tl.Changes || tl.NeedsApproval
		if tl.Disabled == "" && t.strikes[tl.Name] >= t.Config.MaxToolFailures {
			tl.Disabled = fmt.Sprintf("failed %d times in this turn", t.strikes[tl.Name])
		}
		if tl.Disabled == "" {
			ts.usable = append(ts.usable, tl.Tool)
			t.seen.names[tl.Name] = true
			if tl.NeedsApproval {
				ts.solo = append(ts.solo, tl.Name)
			}
		}
		switch {
		case !t.seen.names[tl.Name]:
			ts.never = append(ts.never, tl)
			continue
		case tl.Disabled != "":
			ts.down = append(ts.down, tl)
		}
		ts.listed = append(ts.listed, tl.Tool)
		if tl.NeedsApproval {
			ts.approval = append(ts.approval, tl.Name)
		}
	}
	return ts
}

// prompt builds a step's system prompt, tail and union. final restricts the
// union to FinalResponse; the system prompt stays the same.
func (t *turn) prompt(ctx context.Context, final bool) (*prompt, error) {
	ts := t.sortTools()
	catalogue, err := t.unions.Union(ts.listed)
	if err != nil {
		return nil, fmt.Errorf("building the tool catalogue: %w", err)
	}
	// Every call failed and nothing is left to try, or the steps are used
	// up: the model answers from what it knows, and says why the tools
	// could not help.
	fallback := t.allFailed() && (final || len(ts.usable) == 0)
	if final {
		ts.usable, ts.down = nil, nil
	}
	u, err := t.unions.BatchUnion(ts.usable, schema.Batch{Max: t.Config.ParallelCalls, Solo: ts.solo})
	if err != nil {
		return nil, fmt.Errorf("building the reply schema: %w", err)
	}
	parallel := t.Config.ParallelCalls
	if len(ts.listed) == len(ts.approval) {
		parallel = 0 // no tool could be in a batch: no word of it
	}
	nudge := ""
	switch {
	case fallback:
		nudge = fallbackNudge(t.failures)
	case final:
		nudge = finalNudge
	}
	p := &prompt{
		system: systemPrompt(catalogue.Docs(), ts.approval, ts.never, t.Config.MaxSteps, parallel),
		tail:   tail(t.runtime, ts.down, nudge),
		union:  u,
		budget: t.Config.MaxContextChars,
	}
	if m, ok := t.Model.(Budgeted); ok {
		if chars, why := m.PromptBudget(ctx); chars < p.budget {
			p.budget, p.limit = chars, why
		}
	}
	return p, nil
}

// window is what a step sends: the system prompt, the conversation as the
// window cuts it, the tail, then extra (this step's failed attempts and
// their corrections), within the prompt's budget.
func (t *turn) window(p *prompt, extra []convo.Message) ([]convo.Message, error) {
	after := runes(p.tail)
	for _, m := range extra {
		after += runes(m.Content)
	}
	msgs, err := convo.Window(p.system, t.conv.Messages, after, convo.Limits{Budget: p.budget, MaxObservation: t.Config.MaxOutputChars})
	if err != nil {
		return nil, err
	}
	if p.tail != "" {
		msgs = append(msgs, convo.Message{Role: convo.User, Content: p.tail})
	}
	return append(msgs, extra...), nil
}

// shrinkPercent is how much of a prompt Ollama refused the next one may take:
// the refusal says only that it was too long, not by how much, and the
// budget's ratio was wrong by more than the window's slack for it to happen.
const shrinkPercent = 70

// shrink notes Ollama's refusal of msgs as longer than the model's context:
// the rest of the step gets shrinkPercent of their size. It returns that size.
func (p *prompt) shrink(msgs []convo.Message, refusal error) (sent int) {
	for _, m := range msgs {
		sent += runes(m.Content)
	}
	p.refused = refusal
	p.budget = sent * shrinkPercent / 100
	p.limit = fmt.Sprintf("%d characters, %d%% of a prompt Ollama refused as longer than the model's context", p.budget, shrinkPercent)
	return sent
}

// sizes splits msgs, a window with the tail and extra after it, into the
// system prompt and this turn: from the window's newest user message on.
func (p *prompt) sizes(msgs, extra []convo.Message) (system, turn int) {
	from := len(msgs) - len(extra)
	if p.tail != "" {
		from--
	}
	for i := from - 1; i > 0; i-- {
		if msgs[i].Role == convo.User {
			from = i
			break
		}
	}
	for _, m := range msgs[from:] {
		turn += runes(m.Content)
	}
	return runes(msgs[0].Content), turn
}

func runes(s string) int { return utf8.RuneCountInString(s) }

const identity = `You are mmcpd, the assistant of a home media server (movies, TV shows, downloads, the media library).
You act in steps. Each reply is exactly one JSON object and nothing else, with three fields in this order:
  "thought": why you take this step, in one or two sentences;
  "action": the name of one action listed below;
  "args": an object with that action's arguments.
Rules:
- Use a tool when the answer depends on the user's media, services or downloads, or on current facts. Never invent a tool's result.
- A tool's result arrives in a message that starts with "Result of <tool>:" (or "<tool> failed:"). Read it, then take the next step.
- When you have what you need, or no tool can help, reply with the action final_response and the answer for the user.
- If a tool fails, do not repeat the same call unchanged; try another way or explain the problem in your answer.`

const finalNudge = `You have used every step this turn allows. Reply now with the action final_response: give the best answer you can from what you already know, and say what you could not finish.`

// fallbackNudge asks for the answer when every tool call of the turn failed:
// from the model's own knowledge, saying which tools failed and why.
func fallbackNudge(failures []failure) string {
	var b strings.Builder
	b.WriteString("Every tool call in this turn failed:\n")
	seen := map[failure]bool{}
	for _, f := range failures {
		f.err = convo.Cut(strings.Join(strings.Fields(f.err), " "), maxFailureChars)
		if seen[f] {
			continue
		}
		seen[f] = true
		fmt.Fprintf(&b, "- %s: %s\n", f.tool, f.err)
	}
	b.WriteString(`Reply now with the action final_response: answer from your own knowledge as well as you can, and tell the user that the tools failed and why.`)
	return b.String()
}

// maxFailureChars bounds each failure in the fallback's request: the whole
// error is in the conversation already.
const maxFailureChars = 300

// parallelRule tells the model about the batch branch, when there is one.
const parallelRule = "\n- To run up to %d independent tool calls at once, reply {\"thought\": ..., \"calls\": [{\"action\": ..., \"args\": {...}}, ...]} instead of action and args; each result comes back in its own message. Call alone the actions that ask the user first."

// systemPrompt assembles the system message: who the model is, the rules of
// the envelope, the catalogue's actions with their arguments (docs), which
// ask first, and the tools never usable yet, with why. Nothing in it changes
// from step to step or turn to turn while the tool set stays.
func systemPrompt(docs string, approval []string, never []Tool, maxSteps, parallel int) string {
	var b strings.Builder
	b.Grow(len(identity) + len(docs) + 512)
	b.WriteString(identity)
	if parallel > 1 {
		fmt.Fprintf(&b, parallelRule, parallel)
	}
	fmt.Fprintf(&b, "\n- At most %d tool steps per question.\n\nActions:\n", maxSteps)
	b.WriteString(docs)
	if len(approval) > 0 {
		b.WriteString("\nThese actions ask the user to confirm before they run; call them when the user wants that action: ")
		b.WriteString(strings.Join(approval, ", "))
		b.WriteByte('\n')
	}
	if len(never) > 0 {
		b.WriteString("\nUnavailable tools (do not use them; tell the user if the question needs one):\n")
		writeTools(&b, never)
	}
	b.WriteString("\nExample of a final reply:\n")
	b.WriteString(finalExample)
	return b.String()
}

// tail assembles what changes between calls: the live state of this turn,
// the catalogue's tools unavailable now, and the request for an answer
// (nudge) on the forced last step or when every tool call failed. Empty when
// there is none of these.
func tail(runtime string, down []Tool, nudge string) string {
	var parts []string
	if runtime != "" {
		parts = append(parts, "Runtime context (live state when this question was asked):\n"+strings.TrimRight(runtime, "\n"))
	}
	if len(down) > 0 {
		var b strings.Builder
		b.WriteString("Unavailable now (do not use them until they are back; tell the user if the question needs one):\n")
		writeTools(&b, down)
		parts = append(parts, strings.TrimRight(b.String(), "\n"))
	}
	if nudge != "" {
		parts = append(parts, nudge)
	}
	return strings.Join(parts, "\n\n")
}

func writeTools(b *strings.Builder, tools []Tool) {
	for _, t := range tools {
		b.WriteString("- ")
		b.WriteString(t.Name)
		b.WriteString(": ")
		b.WriteString(t.Disabled)
		b.WriteByte('\n')
	}
}

var finalExample = schema.Example(schema.FinalAction, map[string]string{"answer": "Dune: Part Two (2024) is already in your library."})

// correction is the message that sends an invalid reply back to the model:
// every problem on its own line, named by its place in the reply.
func correction(e *schema.ReplyError) string {
	var b strings.Builder
	b.WriteString("Your last reply was not valid:\n")
	for _, p := range e.Problems {
		b.WriteString("- ")
		b.WriteString(p)
		b.WriteByte('\n')
	}
	if slices.ContainsFunc(e.Problems, func(p string) bool { return strings.HasPrefix(p, "calls") }) {
		b.WriteString(`Reply again with one JSON object {"thought": ..., "calls": [{"action": ..., "args": {...}}, ...]} (or {"thought": ..., "action": ..., "args": {...}} for one call) that fixes these problems, and nothing else.`)
		return b.String()
	}
	b.WriteString(`Reply again with one JSON object {"thought": ..., "action": ..., "args": {...}} that fixes these problems, and nothing else.`)
	return b.String()
}
