package context

import (
	"fmt"
	"unicode/utf8"
)

// OverflowError says that the system prompt and the current turn (the newest
// user message and every call and observation after it) do not fit the
// budget. The window would have to cut the turn itself, and the model would
// decide without its own tool results: nothing is sent instead.
type OverflowError struct {
	System int // characters of the system prompt
	Turn   int // characters of the current turn, observations at their cut size
	Budget int // the character budget
}

func (e *OverflowError) Error() string {
	return fmt.Sprintf("the prompt (system %d characters + this turn %d characters) exceeds the budget of %d characters",
		e.System, e.Turn, e.Budget)
}

// Window returns the messages the model sees for conversation msgs: the system
// prompt first, then the newest messages that fit in budget characters, in
// order. Sizes count characters (runes) of message contents, the system prompt
// included.
//
// What always survives: the system prompt and the current turn, the newest
// user message and every message after it; when those alone exceed the
// budget, Window returns an *OverflowError and no messages. What goes first:
// the oldest messages of earlier turns. An assistant tool call and its
// observation are kept or dropped together, so the model never sees a result
// without the call that asked for it. An observation longer than
// maxObservation characters (when > 0) is cut, with a marker that says how
// much; the stored conversation is never changed.
func Window(system string, msgs []Message, budget, maxObservation int) ([]Message, error) {
	// The current turn starts at the newest user message; with none there is
	// no turn to keep whole, only history to trim.
	from := len(msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == User {
			from = i
			break
		}
	}
	sys := utf8.RuneCountInString(system)
	turn := 0
	for _, m := range msgs[from:] {
		turn += sizeOf(m, maxObservation)
	}
	if sys+turn > budget {
		return nil, &OverflowError{System: sys, Turn: turn, Budget: budget}
	}
	left := budget - sys - turn

	// Walk back through earlier turns one unit at a time (a unit is a lone
	// message, or a tool call with its observation) until one does not fit.
	for i := from - 1; i >= 0; {
		start := i
		if msgs[i].Role == Observation && i > 0 && msgs[i-1].Role == Assistant && msgs[i-1].Tool != "" {
			start = i - 1
		}
		size := 0
		for j := start; j <= i; j++ {
			size += sizeOf(msgs[j], maxObservation)
		}
		if size > left {
			break
		}
		left -= size
		from = start
		i = start - 1
	}

	out := make([]Message, 0, len(msgs)-from+1)
	out = append(out, Message{Role: System, Content: system})
	for _, m := range msgs[from:] {
		if m.Role == Observation {
			m.Content = Cut(m.Content, maxObservation)
		}
		out = append(out, m)
	}
	return out, nil
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
