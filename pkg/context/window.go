package context

import (
	"fmt"
	"unicode/utf8"
)

// OverflowError says that the system prompt and the current turn (the newest
// user message, every call and observation after it, and what the caller
// sends after them) do not fit the budget. The window would have to cut the
// turn itself, and the model would decide without its own tool results:
// nothing is sent instead.
type OverflowError struct {
	System int // characters of the system prompt
	Turn   int // characters of the current turn, observations at their cut size, and what comes after
	Budget int // the character budget
}

func (e *OverflowError) Error() string {
	return fmt.Sprintf("the prompt (system %d characters + this turn %d characters) exceeds the budget of %d characters",
		e.System, e.Turn, e.Budget)
}

// Limits bound a window.
type Limits struct {
	// Budget is the most characters the prompt may take: the system
	// prompt, the messages, and what the caller sends after them.
	Budget int
	// MaxObservation cuts a longer observation to that many characters,
	// with a marker; 0 or less cuts nothing.
	MaxObservation int
}

// Where the window's start stays put. Ollama reuses the longest prefix a
// prompt shares with the one before; a window that dropped its oldest
// message whenever a new one came would change that prefix at every turn
// once full. Past the high mark (HighWater percent of the budget), whole
// turns go at once until the conversation takes at most KeepShare percent
// of its room (the high mark less the system prompt), and the start then
// stays while the prompt grows back: the prefix moves once every few turns.
// The call after a cut reads again all the conversation it kept, so a cut
// that keeps K of room R, with turns adding g, costs g*K/(R-K) a turn over
// time: keeping half costs one more reading of each turn's new part, where
// keeping 70% of the budget with a 9,000-character tool catalogue in a
// 28,000-character budget cost 1.9 (measured: BenchmarkPrefixReuseLong).
// HighWater also leaves room for what the caller sends after the window.
const (
	HighWater = 90
	KeepShare = 50
)

// Marks returns the high and low marks, in characters of the whole prompt,
// for a system prompt of sys characters and a budget: past high, turns go
// until the prompt is at most low.
func Marks(sys, budget int) (high, low int) {
	high = budget * HighWater / 100
	return high, sys + max(high-sys, 0)*KeepShare/100
}

// Window returns the messages the model sees for conversation msgs: the system
// prompt first, then the conversation from the start of some turn on, in
// order. after is the size of what the caller sends after them (the live
// context, corrections), which counts against the budget with the current
// turn. Sizes count characters (runes) of message contents.
//
// What always survives: the system prompt and the current turn, the newest
// user message and every message after it; when those and after alone exceed
// the budget, Window returns an *OverflowError and no messages. What goes
// first: the oldest turns, whole, in large steps (see Marks) at points
// that depend on the conversation alone, so the same conversation is always
// cut the same way. An observation longer than MaxObservation is cut, with a
// marker that says how much; the stored conversation is never changed.
func Window(system string, msgs []Message, after int, l Limits) ([]Message, error) {
	sys := utf8.RuneCountInString(system)
	// at[i] is the size of msgs[:i], observations at their cut size.
	at := make([]int, len(msgs)+1)
	for i, m := range msgs {
		at[i+1] = at[i] + sizeOf(m, l.MaxObservation)
	}
	end := len(msgs)
	cur := turnStart(msgs, end)
	turn := at[end] - at[cur] + after
	if sys+turn > l.Budget {
		return nil, &OverflowError{System: sys, Turn: turn, Budget: l.Budget}
	}
	from := stableStart(msgs, at, sys, l.Budget)
	// What this call sends after the window may not fit where the stable
	// start leaves room: more turns go, for this call only.
	for sys+at[end]-at[from]+after > l.Budget {
		from = nextTurn(msgs, from, cur)
	}

	out := make([]Message, 0, end-from+1)
	out = append(out, Message{Role: System, Content: system})
	for _, m := range msgs[from:] {
		if m.Role == Observation {
			m.Content = Cut(m.Content, l.MaxObservation)
		}
		out = append(out, m)
	}
	return out, nil
}

// stableStart is where the history starts for the whole conversation. It
// replays the model calls the conversation has seen, one after each user
// message and each observation, and the one for the whole of it: at each,
// when the prompt from the start so far passes the high mark, turns go,
// oldest first, until it is down to the low mark or only that call's turn is
// left. Each call's start is thus the previous call's unless that one's
// passed the high mark.
func stableStart(msgs []Message, at []int, sys, budget int) int {
	high, low := Marks(sys, budget)
	high, low = high-sys, low-sys
	from, newest := 0, -1
	for end := 1; end <= len(msgs); end++ {
		role := msgs[end-1].Role
		if role == User {
			newest = end - 1
		}
		if end < len(msgs) && role != User && role != Observation {
			continue // no call was made here: the model's own message
		}
		cur := end // with no user message yet, everything is history
		if newest >= 0 {
			cur = newest
		}
		if at[end]-at[from] <= high {
			continue
		}
		for from < cur && at[end]-at[from] > low {
			from = nextTurn(msgs, from, cur)
		}
	}
	return from
}

// turnStart is where the turn current at end starts: its newest user message,
// or end when there is none (no turn to keep whole, only history).
func turnStart(msgs []Message, end int) int {
	for i := end - 1; i >= 0; i-- {
		if msgs[i].Role == User {
			return i
		}
	}
	return end
}

// nextTurn is the start of the turn after the one holding from, or limit if
// that comes first: the history is cut at user messages only, so a call and
// its observation, and an answer and its question, go together.
func nextTurn(msgs []Message, from, limit int) int {
	for i := from + 1; i < limit; i++ {
		if msgs[i].Role == User {
			return i
		}
	}
	return limit
}

func sizeOf(m Message, maxObservation int) int {
	n := utf8.RuneCountInString(m.Content)
	if m.Role == Observation && maxObservation > 0 && n > maxObservation {
		return maxObservation + len(marker(n-maxObservation))
	}
	return n
}

// Cut shortens s to max characters (when max > 0), adding a marker that says
// how many were cut.
func Cut(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s // fewer bytes than max means fewer characters too
	}
	n := utf8.RuneCountInString(s)
	if n <= max {
		return s
	}
	end := 0
	for i := 0; i < max; i++ {
		_, size := utf8.DecodeRuneInString(s[end:])
		end += size
	}
	return s[:end] + marker(n-max)
}

func marker(cut int) string {
	return fmt.Sprintf("\n[... %d more characters cut]", cut)
}
