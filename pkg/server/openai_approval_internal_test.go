package server

import "testing"

func TestYesOrNo(t *testing.T) {
	for reply, want := range map[string]string{
		"yes": "approve", " Yes! ": "approve", "YES.": "approve", "ok": "approve", "go ahead": "approve", "**yes**": "approve", "Do it": "approve",
		"no": "deny", "No.": "deny", "nope": "deny", "don’t": "deny", "Cancel": "deny", "no thanks": "deny",
		"yes but in 4K": "", "what is the weather?": "", "": "", "maybe": "", "yesno": "", "y e s": "",
	} {
		if got := yesOrNo(reply); got != want {
			t.Errorf("yesOrNo(%q) = %q, want %q", reply, got, want)
		}
	}
}
