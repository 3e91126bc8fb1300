// Package context owns the conversation as messages and the character-budget
// window of it that the model sees.
package context

// Role says who wrote a message.
type Role string

const (
	// System is the daemon's instructions to the model.
	System Role = "system"
	// User is what the person typed.
	User Role = "user"
	// Assistant is one reply of the model: the JSON envelope it produced.
	Assistant Role = "assistant"
	// Observation is the result (or error) of the tool call in the assistant
	// message just before it.
	Observation Role = "observation"
)

// Message is one entry of a conversation.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content"`
	// Tool names the tool an assistant message called, or whose result an
	// observation carries. Empty for a final answer and for user messages.
	Tool string `json:"tool,omitempty"`
}

// Conversation is the whole stored history of a session, oldest first. It only
// grows: the window sent to the model is cut from it, never the other way.
type Conversation struct {
	Messages []Message `json:"messages"`
}

// Append adds messages at the end.
func (c *Conversation) Append(m ...Message) { c.Messages = append(c.Messages, m...) }
