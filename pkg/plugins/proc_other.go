//go:build !linux

package plugins

import "os/exec"

// dieWithParent has no portable equivalent outside Linux: plugins there rely
// on the daemon's orderly shutdown.
func dieWithParent(*exec.Cmd) {}
