package plugins_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/internal/mcptest"
	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// copyDir makes a plugins folder holding a copy (not a link: a new link
// would change the shared file's ctime, and so its identity, under other
// tests) of the test plugin under each name.
func copyDir(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(testPlugin)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, plugins.FilePrefix+n), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { noProcessLeft(t, dir) })
	return dir
}

// idleHost starts a host over dir with the describe cache at cache, and
// closes it when the test ends.
func idleHost(t testing.TB, dir, cache string, opts plugins.Options) (*plugins.Host, *logBuffer) {
	t.Helper()
	opts.CacheFile = cache
	if opts.Idle == 0 {
		opts.Idle = time.Hour
	}
	return startIn(t, dir, opts)
}

// closeNow closes h before the test ends (Close may run twice).
func closeNow(h *plugins.Host) { h.Close() }

// cachedHost is idleHost started from the describe cache: a first host
// describes the plugins into cache and is closed, so that the one returned
// starts with every plugin stopped.
func cachedHost(t testing.TB, dir, cache string, opts plugins.Options) (*plugins.Host, *logBuffer) {
	t.Helper()
	h, _ := idleHost(t, dir, cache, plugins.Options{})
	closeNow(h)
	return idleHost(t, dir, cache, opts)
}

// TestIdleStopAndRestart: a plugin no call used for Idle is stopped, its
// tools still offered; the next call starts it again, and that is no restart.
func TestIdleStopAndRestart(t *testing.T) {
	dir := copyDir(t, "works")
	h, logs := idleHost(t, dir, "", plugins.Options{Idle: 400 * time.Millisecond})
	p := info(t, h, "works")
	if p.State != plugins.StateRunning || p.PID == 0 || p.RSSBytes <= 0 {
		t.Fatalf("after start: %+v", p)
	}
	if !eventually(10*time.Second, func() bool { return len(procs(dir)) == 0 }) {
		t.Fatalf("still running after the idle period: %v\n%s", procs(dir), logs)
	}
	p = info(t, h, "works")
	if p.State != plugins.StateIdleStopped || p.Status != plugins.StatusReady || p.PID != 0 || p.RSSBytes != 0 {
		t.Fatalf("after the idle period: %+v", p)
	}
	if found, why := disabled(h, "works_echo"); !found || why != "" {
		t.Fatalf("works_echo while stopped: found %v, disabled %q", found, why)
	}
	if out := mustCall(t, h, "works_echo", `{"text":"again"}`); !strings.Contains(out, `"echo":"again"`) {
		t.Fatalf("call: %s", out)
	}
	p = info(t, h, "works")
	if p.State != plugins.StateRunning || p.Restarts != 0 || p.PID != pidOf(t, dir, "works") {
		t.Fatalf("after the call: %+v", p)
	}
	// A call in progress keeps it running past the idle period.
	dir2 := copyDir(t, "slow")
	h2, _ := idleHost(t, dir2, "", plugins.Options{Idle: 200 * time.Millisecond})
	if out := mustCall(t, h2, "slow_sleep", `{"ms":700}`); !strings.Contains(out, "slept") {
		t.Fatalf("slow_sleep: %s", out)
	}
	if !eventually(10*time.Second, func() bool { return len(procs(dir2)) == 0 }) {
		t.Fatalf("not stopped again: %v", procs(dir2))
	}
}

// TestConcurrentFirstCallsStartOnce: calls that find their plugin stopped
// wait for one start, not one each.
func TestConcurrentFirstCallsStartOnce(t *testing.T) {
	dir := copyDir(t, "works")
	cache := filepath.Join(t.TempDir(), "cache.json")
	h, logs := cachedHost(t, dir, cache, plugins.Options{})
	if n := len(procs(dir)); n != 0 {
		t.Fatalf("described from the cache, yet %d processes run", n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := call(h, "works_echo", `{"text":"x"}`, 20*time.Second)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("call: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "starting plugin on demand"); n != 1 {
		t.Errorf("started %d times:\n%s", n, logs)
	}
	if n := len(procs(dir)); n != 1 {
		t.Errorf("%d processes", n)
	}
	// A caller whose time runs out while the plugin starts gives up alone;
	// the start goes on for the others.
	closeNow(h)
	h, logs = idleHost(t, dir, cache, plugins.Options{})
	if _, err := call(h, "works_echo", `{"text":"x"}`, time.Millisecond); err == nil || !strings.Contains(err.Error(), "still starting") {
		t.Errorf("impatient call: %v", err)
	}
	if !eventually(10*time.Second, func() bool { return info(t, h, "works").State == plugins.StateRunning }) {
		t.Errorf("the start was abandoned: %+v\n%s", info(t, h, "works"), logs)
	}
}

// TestDescribeCache: a described plugin is not started again at the next
// start; a changed binary or setting is described again; a cache file that
// is corrupt or that others may write is ignored.
func TestDescribeCache(t *testing.T) {
	dir := copyDir(t, "works", "guard")
	cache := filepath.Join(t.TempDir(), "plugins-cache.json")
	restart := func(environ []string) (*plugins.Host, string) {
		t.Helper()
		if environ == nil {
			environ = baseEnviron()
		}
		h, logs := idleHost(t, dir, cache, plugins.Options{Environ: environ})
		t.Cleanup(h.Close)
		l := logs.String()
		closeNow(h)
		return h, l
	}
	fromCache := func(logs, name string) bool {
		return strings.Contains(logs, `msg="plugin described from cache" plugin=`+name+" ")
	}
	h, logs := restart(nil)
	if fromCache(logs, "works") || fromCache(logs, "guard") {
		t.Fatalf("first start used a cache:\n%s", logs)
	}
	st, err := os.Stat(cache)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", st, err)
	}
	b, _ := os.ReadFile(cache)
	if strings.Contains(string(b), "canary") {
		t.Fatal("the cache holds a setting in clear")
	}

	h, second := idleHost(t, dir, cache, plugins.Options{})
	if !fromCache(second.String(), "works") || !fromCache(second.String(), "guard") || len(procs(dir)) != 0 {
		t.Fatalf("second start: processes %v\n%s", procs(dir), second)
	}
	// The union and the approvals are known without a process.
	found, approval, _, why := tool(h, "guard_remove")
	if !found || !approval || why != "" {
		t.Fatalf("guard_remove from the cache: found %v approval %v disabled %q", found, approval, why)
	}
	if p := info(t, h, "works"); p.State != plugins.StateIdleStopped || len(p.Tools) == 0 || p.Version == "" {
		t.Fatalf("works from the cache: %+v", p)
	}
	closeNow(h)

	// A changed modification time, even to an older one.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, plugins.FilePrefix+"works"), old, old); err != nil {
		t.Fatal(err)
	}
	_, l := restart(nil)
	if fromCache(l, "works") || !fromCache(l, "guard") {
		t.Fatalf("after touching works:\n%s", l)
	}
	// A changed setting of its own, and of another plugin's.
	_, l = restart(append(baseEnviron(), "MMCP_PLUGIN_WORKS_NOTE=canary-note"))
	if fromCache(l, "works") || !fromCache(l, "guard") {
		t.Fatalf("after setting works's NOTE:\n%s", l)
	}
	_, l = restart(append(baseEnviron(), "MMCP_PLUGIN_WORKS_NOTE=canary-note"))
	if !fromCache(l, "works") {
		t.Fatalf("the same setting again:\n%s", l)
	}
	// Others may write it: ignored, then replaced by the daemon's own.
	if err := os.Chmod(cache, 0o666); err != nil {
		t.Fatal(err)
	}
	_, l = restart(nil)
	if fromCache(l, "works") || fromCache(l, "guard") || !strings.Contains(l, "plugin describe cache ignored") {
		t.Fatalf("a world-writable cache was used:\n%s", l)
	}
	if st, _ := os.Stat(cache); st.Mode().Perm() != 0o600 {
		t.Fatalf("cache not replaced: %v", st.Mode())
	}
	// Corrupt.
	if err := os.WriteFile(cache, []byte(`{"version":1,"salt":"x","entries":{`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, l = restart(nil)
	if fromCache(l, "works") || !strings.Contains(l, "plugin describe cache ignored") {
		t.Fatalf("a corrupt cache was used:\n%s", l)
	}
	// Valid, with 9 MiB of padding: over the size limit, so not read at all,
	// and replaced.
	if _, l := restart(nil); !fromCache(l, "works") {
		t.Fatalf("the replaced cache is not used:\n%s", l)
	}
	b, err = os.ReadFile(cache)
	if err != nil {
		t.Fatal(err)
	}
	padded := `{"pad":"` + strings.Repeat("p", 9<<20) + `",` + string(b[1:])
	if err := os.WriteFile(cache, []byte(padded), 0o600); err != nil {
		t.Fatal(err)
	}
	_, l = restart(nil)
	if fromCache(l, "works") || !strings.Contains(l, "plugin describe cache ignored") || !strings.Contains(l, "over the") {
		t.Fatalf("an oversized cache was used:\n%s", l)
	}
	if st, err := os.Stat(cache); err != nil || st.Size() > 1<<20 {
		t.Fatalf("oversized cache not replaced: %v %v", st.Size(), err)
	}
}

// TestStandbyLeavesNoProcess: a plugin that lacks a required setting exits
// once it has described itself; its tools stay listed, with why.
func TestStandbyLeavesNoProcess(t *testing.T) {
	dir := copyDir(t, "needs", "works")
	h, logs := idleHost(t, dir, "", plugins.Options{})
	p := info(t, h, "needs")
	if p.Status != plugins.StatusStandby || p.State != plugins.StateStandby || p.PID != 0 || len(p.Tools) == 0 {
		t.Fatalf("needs: %+v\n%s", p, logs)
	}
	if !eventually(5*time.Second, func() bool { _, ok := pids(dir)["needs"]; return !ok }) {
		t.Fatalf("needs still runs: %v", procs(dir))
	}
	if _, ok := pids(dir)["works"]; !ok {
		t.Fatalf("works does not run: %v", procs(dir))
	}
	found, why := disabled(h, "needs_echo")
	if !found || !strings.Contains(why, "on standby") || !strings.Contains(why, "MMCP_PLUGIN_NEEDS_TOKEN is required") {
		t.Fatalf("needs_echo: found %v, %q", found, why)
	}
	if _, err := call(h, "needs_echo", `{"text":"x"}`, 5*time.Second); err == nil || !strings.Contains(err.Error(), "on standby") {
		t.Fatalf("call on standby: %v", err)
	}
	if _, ok := pids(dir)["needs"]; ok {
		t.Fatal("a call started a plugin on standby")
	}
}

// pids lists the plugin processes of dir by plugin name.
func pids(dir string) map[string]int {
	out := map[string]int{}
	for pid, exe := range procs(dir) {
		out[strings.TrimPrefix(filepath.Base(exe), plugins.FilePrefix)] = pid
	}
	return out
}

// TestIdleZeroKeepsEveryPlugin: with Idle 0, every plugin starts at Start and
// keeps running, standby ones included, and nothing is read from a cache.
func TestIdleZeroKeepsEveryPlugin(t *testing.T) {
	dir := copyDir(t, "needs", "works")
	cache := filepath.Join(t.TempDir(), "cache.json")
	h, _ := startIn(t, dir, plugins.Options{CacheFile: cache})
	closeNow(h)
	h, logs := startIn(t, dir, plugins.Options{CacheFile: cache})
	if strings.Contains(logs.String(), "described from cache") {
		t.Fatalf("Idle 0 used the cache:\n%s", logs)
	}
	time.Sleep(500 * time.Millisecond)
	if got := pids(dir); len(got) != 2 {
		t.Fatalf("processes: %v", got)
	}
	if p := info(t, h, "needs"); p.State != plugins.StateStandby || p.PID == 0 {
		t.Fatalf("needs: %+v", p)
	}
}

// TestOnDemandStartFails: a plugin that cannot start when a call needs it
// gives the call a clear error and shows as failed.
func TestOnDemandStartFails(t *testing.T) {
	dir := copyDir(t, "works")
	cache := filepath.Join(t.TempDir(), "cache.json")
	h, logs := cachedHost(t, dir, cache, plugins.Options{})
	if !strings.Contains(logs.String(), "described from cache") {
		t.Fatalf("not from the cache:\n%s", logs)
	}
	// Broken after the daemon started: the next call finds it so.
	bin := filepath.Join(dir, plugins.FilePrefix+"works")
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	writeScript(t, dir, plugins.FilePrefix+"works", "#!/bin/sh\necho broken >&2\nexit 1\n")
	_, err := call(h, "works_echo", `{"text":"x"}`, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "plugin works could not be started") {
		t.Fatalf("call: %v", err)
	}
	if p := info(t, h, "works"); p.State != plugins.StateFailed || !strings.Contains(p.Reason, "could not be started") {
		t.Fatalf("works: %+v", p)
	}
}

// TestMCPServerIdle: an MCP server stops when idle and starts again on the
// next call.
func TestMCPServerIdle(t *testing.T) {
	dir := t.TempDir()
	link(t, mcptest.GoServer(t), filepath.Join(dir, "mcpserver"))
	t.Cleanup(func() { noProcessLeft(t, dir) })
	writeManifest(t, dir, "test-srv", map[string]any{"command": "./mcpserver"})
	h, logs := idleHost(t, dir, "", plugins.Options{Idle: 400 * time.Millisecond})
	if p := info(t, h, "test-srv"); p.State != plugins.StateRunning || p.PID == 0 {
		t.Fatalf("after start: %+v\n%s", p, logs)
	}
	if !eventually(10*time.Second, func() bool { return len(procs(dir)) == 0 }) {
		t.Fatalf("still running after the idle period: %v\n%s", procs(dir), logs)
	}
	if p := info(t, h, "test-srv"); p.State != plugins.StateIdleStopped || p.Status != plugins.StatusReady {
		t.Fatalf("after the idle period: %+v", p)
	}
	if out := mustCall(t, h, "test_srv_echo", `{"text":"back"}`); !strings.Contains(out, "back") {
		t.Fatalf("call: %s", out)
	}
	if p := info(t, h, "test-srv"); p.State != plugins.StateRunning || p.Restarts != 0 || len(procs(dir)) != 1 {
		t.Fatalf("after the call: %+v %v", p, procs(dir))
	}
	if !eventually(10*time.Second, func() bool { return len(procs(dir)) == 0 }) {
		t.Fatalf("not stopped again: %v", procs(dir))
	}
}

// TestContextProviderStartsPlugin: the first turn that needs a stopped
// plugin's context starts it.
func TestContextProviderStartsPlugin(t *testing.T) {
	dir := copyDir(t, "works")
	cache := filepath.Join(t.TempDir(), "cache.json")
	h, _ := cachedHost(t, dir, cache, plugins.Options{Context: plugins.ContextOptions{PerProvider: 5 * time.Second, Overall: 10 * time.Second, MaxChars: 1000, FailureLimit: 3, SkipFor: time.Minute}})
	if len(procs(dir)) != 0 {
		t.Fatal("started at Start")
	}
	if got := h.RuntimeContext(context.Background()); got != "works.info: works is fine" {
		t.Fatalf("context: %q", got)
	}
	if h.Running() != 1 {
		t.Fatalf("running: %d", h.Running())
	}
}
