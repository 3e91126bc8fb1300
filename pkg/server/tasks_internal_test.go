package server

import (
	"encoding/json"
	"testing"
)

func TestIsTask(t *testing.T) {
	tests := []struct {
		name string
		last string // the last message's content, as JSON
		want bool
	}{
		{"title template", `"### Task:\nGenerate a concise title.\n### Chat History:\n<chat_history>\nUSER: hi\n</chat_history>"`, true},
		{"leading blank lines", `"\n\n### Task:\nx\n<chat_history>\n</chat_history>"`, true},
		{"autocomplete template", `"### Task:\nYou are an autocompletion system.\n<chat_history>\n</chat_history>\n<type>General</type>\n<text>Dune</text>"`, true},
		{"content parts", `[{"type":"text","text":"### Task:\nx\n<chat_history>\n</chat_history>"}]`, true},
		{"a question", `"is dune in my library?"`, false},
		{"heading only", `"### Task:\nadd dune to radarr"`, false},
		{"history not closed", `"### Task:\nx <chat_history> y"`, false},
		{"closing tag before opening", `"### Task:\n</chat_history> <chat_history>"`, false},
		{"heading not first", `"Explain this:\n### Task:\n<chat_history></chat_history>"`, false},
		{"lower case", `"### task:\n<chat_history></chat_history>"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := []CompletionMessage{{Role: "user", Content: json.RawMessage(tt.last)}}
			if got := isTask(msgs); got != tt.want {
				t.Errorf("isTask = %v, want %v", got, tt.want)
			}
		})
	}
	if isTask(nil) {
		t.Error("isTask(nil) = true")
	}
}
