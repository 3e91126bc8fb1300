package loop

import (
	"fmt"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/schema"
)

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

// systemPrompt assembles the system message of a step: who the model is, the
// rules of the envelope, the actions it may take with their arguments, and the
// tools it may not use, with why.
func systemPrompt(u *schema.Union, disabled []Tool, approval []string, runtime string, final bool, maxSteps int) string {
	var b strings.Builder
	b.Grow(len(identity) + len(u.Docs()) + len(runtime) + 512)
	b.WriteString(identity)
	fmt.Fprintf(&b, "\n- At most %d tool steps per question.\n\nActions:\n", maxSteps)
	b.WriteString(u.Docs())
	if len(approval) > 0 && !final {
		b.WriteString("\nThese actions ask the user to confirm before they run; call them when the user wants that action: ")
		b.WriteString(strings.Join(approval, ", "))
		b.WriteByte('\n')
	}
	if len(disabled) > 0 && !final {
		b.WriteString("\nUnavailable tools (do not use them; tell the user if the question needs one):\n")
		for _, t := range disabled {
			b.WriteString("- ")
			b.WriteString(t.Name)
			b.WriteString(": ")
			b.WriteString(t.Disabled)
			b.WriteByte('\n')
		}
	}
	if runtime != "" {
		b.WriteString("\nRuntime context (live state when this question was asked):\n")
		b.WriteString(runtime)
		b.WriteByte('\n')
	}
	b.WriteString("\nExample of a final reply:\n")
	b.WriteString(finalExample)
	return b.String()
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
	b.WriteString(`Reply again with one JSON object {"thought": ..., "action": ..., "args": {...}} that fixes these problems, and nothing else.`)
	return b.String()
}
