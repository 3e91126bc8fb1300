package context

import (
	"fmt"
	"unicode/utf8"
)

// Window returns the messages the model sees for conversation msgs: the system
// prompt first, then the newest messages that fit in budget characters, in
// order. Sizes count characters (runes) of message contents, the system prompt
// included.
//
// What always survives: the system prompt and the newest user message, even
// if together they exceed the budget. What goes first: the oldest messages. An
// assistant tool call and its observation are kept or dropped together, so the
// model never sees a result without the call that asked for it. An observation
// longer than maxObservation characters (when > 0) is cut, with a marker that
// says how much; the stored conversation is never changed.
func Window(system string, msgs []Message, budget, maxObservation int) []Message {
	newestUser := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == User {
			newestUser = i
			break
		}
	}
	left := budget - utf8.RuneCountInString(system)
	if newestUser >= 0 {
		left -= utf8.RuneCountInString(msgs[newestUser].Content)
	}

	// Walk back from the newest message one unit at a time (a unit is a lone
	// message, or a tool call with its observation) until one does not fit.
	from := len(msgs)
	for i := len(msgs) - 1; i >= 0; {
		start := i
		if msgs[i].Role == Observation && i > 0 && msgs[i-1].Role == Assistant && msgs[i-1].Tool != "" {
			start = i - 1
		}
		if i != newestUser {
			size := 0
			for j := start; j <= i; j++ {
				size += sizeOf(msgs[j], maxObservation)
			}
			if size > left {
				break
			}
			left -= size
		}
		from = start
		i = start - 1
	}

	out := make([]Message, 0, len(msgs)-from+2)
	out = append(out, Message{Role: System, Content: system})
	if newestUser >= 0 && newestUser < from {
		out = append(out, msgs[newestUser])
	}
	for _, m := range msgs[from:] {
		if m.Role == Observation {
			m.Content = Cut(m.Content, maxObservation)
		}
		out = append(out, m)
	}
	return out
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
