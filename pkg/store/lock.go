package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockName is the lock file inside the data folder. Whoever opens the
// database holds it (flock, exclusive) for as long as the database is open,
// with its pid written inside, so that two daemons, or a daemon and
// "mmcpd db recover", never write one database at once.
const LockName = "mmcpd.lock"

// ErrInUse is returned, as an *InUseError, when another process holds the
// data folder.
var ErrInUse = errors.New("data folder in use")

// InUseError names the process that holds the data folder.
type InUseError struct {
	Dir     string
	PID     int    // 0 when the lock file did not say
	Cmdline string // "" when /proc did not say
}

func (e *InUseError) Error() string {
	who := "another mmcpd"
	if e.PID > 0 {
		who += " (pid " + strconv.Itoa(e.PID)
		if e.Cmdline != "" {
			who += ": " + e.Cmdline
		}
		who += ")"
	}
	return fmt.Sprintf("data folder %s is in use by %s: stop it first, or give this one another MMCP_DATA_DIR", e.Dir, who)
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// lockDir takes the data folder's lock without waiting: a second process
// must fail at once with a message naming the first, not queue behind it.
// The lock lasts until the returned file is closed (or the process dies: the
// kernel drops it, so a crash never leaves a stale lock).
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, holder(dir, f)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		unlockDir(f)
		return nil, fmt.Errorf("writing the pid into %s: %w", path, err)
	}
	return f, nil
}

// unlockDir releases the lock. The file stays: removing it would let a
// process that opened it just before lock a file no one else can find.
func unlockDir(f *os.File) {
	_ = f.Truncate(0) // no stale pid for the next holder's rivals to read
	_ = f.Close()
}

// holder reads who holds the lock: the pid it wrote, and that process's
// command line when /proc shows it.
func holder(dir string, f *os.File) *InUseError {
	e := &InUseError{Dir: dir}
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return e // between its lock and its write: the pid is not there yet
	}
	e.PID = pid
	if cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil {
		const max = 200
		c := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		if len(c) > max {
			c = strings.ToValidUTF8(c[:max], "") + "…"
		}
		e.Cmdline = c
	}
	return e
}
