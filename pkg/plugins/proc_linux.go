package plugins

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the plugin when the daemon dies, even
// by SIGKILL, so plugins are never orphaned. Its own process group keeps a
// terminal's Ctrl-C or a supervisor's group-wide SIGTERM for the daemon,
// which then stops its plugins in order.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
