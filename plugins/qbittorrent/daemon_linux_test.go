package main

import (
	"os/exec"
	"syscall"
)

// dieWithTest kills the daemon if the test binary dies before its cleanup
// (a panic, a go test timeout).
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
