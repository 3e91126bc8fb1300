package plugins

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the plugin when the daemon dies, even
// by SIGKILL, so plugins are never orphaned.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
