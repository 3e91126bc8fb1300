package plugins

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// isolate sets how a plugin process starts. Its own process group keeps a
// terminal's Ctrl-C or a supervisor's group-wide SIGTERM for the daemon, and
// lets the daemon kill the plugin with every child it forked. Pdeathsig makes
// the kernel kill the plugin when the daemon dies, even by SIGKILL.
//
// With pidns the plugin is also the first process of a pid namespace of its
// own: when it dies, by any means, the kernel kills everything it started,
// even a child that left the process group with setsid. Root can make one
// directly; any other user makes it inside a user namespace of its own, where
// the plugin's privileges reach nothing outside.
//
// cred, when not nil, is the user the plugin runs as (the daemon is root).
func isolate(cmd *exec.Cmd, cred *syscall.Credential, pidns bool) {
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: cred}
	if pidns {
		attr.Cloneflags = syscall.CLONE_NEWPID
		if os.Geteuid() != 0 {
			// No uid or gid map: the daemon is non-dumpable, so it could
			// not write the child's /proc/<pid>/uid_map anyway, and none is
			// needed. The plugin keeps its real uid and gid for every
			// access outside; inside it merely reads them as nobody.
			attr.Cloneflags |= syscall.CLONE_NEWUSER
		}
	}
	cmd.SysProcAttr = attr
}

// namespaceRefused reports whether starting a process failed because the
// kernel or a container runtime would not make the namespaces isolate asked
// for: without CAP_SYS_ADMIN, with user namespaces switched off, or past
// their limit.
func namespaceRefused(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS)
}

// killGroup sends SIGKILL to every process in the process group pgid: the
// plugin and whatever it forked that stayed in its group.
func killGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// NotDumpable makes the calling process non-dumpable: another process of the
// same user can then neither ptrace it nor read its /proc files (environ,
// mem, cmdline, fd), and it leaves no core file. The daemon calls it at start
// for its own secrets, and so does every SDK plugin for its settings.
func NotDumpable() error {
	const prSetDumpable = 4 // PR_SET_DUMPABLE, linux/prctl.h
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// fileIdentity names the file at path as it is now (see describeCache), or
// "" when it cannot be read: then nothing is cached for it.
func fileIdentity(path string) string {
	info, err := os.Stat(path) // the binary a symlink points to is what runs
	if err != nil {
		return ""
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("dev=%d ino=%d size=%d mtime=%d ctime=%d", st.Dev, st.Ino, info.Size(),
		info.ModTime().UnixNano(), st.Ctim.Sec*1e9+st.Ctim.Nsec)
}

// ownedByDaemon refuses a file another user owns.
func ownedByDaemon(info os.FileInfo) error {
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("owned by uid %d, not the daemon's user", st.Uid)
	}
	return nil
}

// residentBytes is the resident memory of process pid (VmRSS in
// /proc/<pid>/status), or 0 when it cannot be read.
func residentBytes(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
