package plugins_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/internal/mcptest"
	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// testPlugin is the test plugin (testdata/testplugin), built once by TestMain.
var testPlugin string

func TestMain(m *testing.M) {
	if runtime.GOOS != "linux" {
		// The tests find plugin processes through /proc.
		fmt.Println("skipping: the plugin host tests need Linux")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "mmcp-plugins-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testPlugin = filepath.Join(dir, "testplugin")
	if out, err := exec.Command("go", "build", "-o", testPlugin, "./testdata/testplugin").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the test plugin: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	mcptest.Cleanup()
	os.RemoveAll(dir)
	os.Exit(code)
}

// pluginDir makes a plugins folder holding the test plugin under each name,
// mmcp-plugin-<name>. When the test ends it checks that no process started
// from the folder is left (cleanups run last-in first-out: register this
// before anything that stops plugins).
func pluginDir(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		link(t, testPlugin, filepath.Join(dir, plugins.FilePrefix+n))
	}
	t.Cleanup(func() { noProcessLeft(t, dir) })
	return dir
}

// link puts src at dst: a hard link where possible (fast), a copy otherwise.
func link(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.Link(src, dst); err == nil {
		return
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeScript puts an executable shell script in dir.
func writeScript(t testing.TB, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// logBuffer collects a host's log lines; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// baseEnviron is the daemon environment the tests give a host unless they
// say otherwise.
func baseEnviron() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
}

// newHost makes a host over dir with short limits, its log captured. It is
// closed when the test ends.
func newHost(t testing.TB, dir string, opts plugins.Options) (*plugins.Host, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	opts.Dir = dir
	if opts.Environ == nil {
		opts.Environ = baseEnviron()
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 10 * time.Second
	}
	if opts.KillGrace == 0 {
		opts.KillGrace = 300 * time.Millisecond
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h, err := plugins.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, logs
}

// startHost makes a host over a fresh folder holding names, and starts it.
func startHost(t testing.TB, opts plugins.Options, names ...string) (*plugins.Host, *logBuffer, string) {
	t.Helper()
	dir := pluginDir(t, names...)
	h, logs := newHost(t, dir, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.Start(ctx)
	return h, logs, dir
}

// call runs one tool with a deadline.
func call(h *plugins.Host, tool, args string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return h.Call(ctx, tool, []byte(args))
}

// mustCall runs one tool that must succeed.
func mustCall(t testing.TB, h *plugins.Host, tool, args string) string {
	t.Helper()
	out, err := call(h, tool, args, 10*time.Second)
	if err != nil {
		t.Fatalf("%s(%s): %v", tool, args, err)
	}
	return out
}

func info(t testing.TB, h *plugins.Host, name string) plugins.Info {
	t.Helper()
	for _, p := range h.Plugins() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no plugin %s in %+v", name, h.Plugins())
	return plugins.Info{}
}

func toolInfo(t testing.TB, p plugins.Info, tool string) plugins.ToolInfo {
	t.Helper()
	for _, ti := range p.Tools {
		if ti.Name == tool {
			return ti
		}
	}
	t.Fatalf("plugin %s has no tool %s: %+v", p.Name, tool, p.Tools)
	return plugins.ToolInfo{}
}

// disabled returns the tool as Tools() lists it: whether it is there, and why
// it is disabled.
func disabled(h *plugins.Host, tool string) (bool, string) {
	for _, tl := range h.Tools() {
		if tl.Name == tool {
			return true, tl.Disabled
		}
	}
	return false, ""
}

// procs lists the live processes whose executable lies under dir, by pid.
// Zombies have no executable any more, and are not listed: they are dead.
func procs(dir string) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		if strings.HasPrefix(exe, dir+string(filepath.Separator)) {
			out[pid] = strings.TrimSuffix(exe, " (deleted)")
		}
	}
	return out
}

// pidOf returns the pid of the one live process of plugin name in dir.
func pidOf(t testing.TB, dir, name string) int {
	t.Helper()
	want := filepath.Join(dir, plugins.FilePrefix+name)
	var pids []int
	for pid, exe := range procs(dir) {
		if exe == want {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("plugin %s: want one process, found %v", name, pids)
	}
	return pids[0]
}

// alive reports whether pid runs, or is stopped: not gone, not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X' && syscall.Kill(pid, 0) == nil
}

// eventually polls cond until it holds or within passes.
func eventually(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// noProcessLeft fails the test if a process started from dir is still
// alive a few seconds after the test, and kills it so it cannot outlive the
// run.
func noProcessLeft(t testing.TB, dir string) {
	t.Helper()
	if eventually(5*time.Second, func() bool { return len(procs(dir)) == 0 }) {
		return
	}
	left := procs(dir)
	var list []string
	for pid, exe := range left {
		list = append(list, fmt.Sprintf("%d %s", pid, filepath.Base(exe)))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	sort.Strings(list)
	t.Errorf("plugin processes left behind: %s", strings.Join(list, ", "))
}
