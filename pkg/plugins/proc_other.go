//go:build !linux

package plugins

import (
	"os"
	"os/exec"
	"syscall"
)

// isolate has no portable equivalent outside Linux: plugins there rely on the
// daemon's orderly shutdown, and run as the daemon's user.
func isolate(*exec.Cmd, *syscall.Credential, bool) {}

func namespaceRefused(error) bool { return false }

func killGroup(int) {}

// NotDumpable does nothing outside Linux.
func NotDumpable() error { return nil }

// fileIdentity is "" outside Linux: descriptions are not cached there.
func fileIdentity(string) string { return "" }

func ownedByDaemon(os.FileInfo) error { return nil }

func residentBytes(int) int64 { return 0 }
