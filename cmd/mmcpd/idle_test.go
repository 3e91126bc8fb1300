package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// running lists the plugin names that have a process in dir.
func runningPlugins(dir string) map[string]bool {
	out := map[string]bool{}
	for _, exe := range pluginProcs(dir) {
		out[strings.TrimPrefix(exe, plugins.FilePrefix)] = true
	}
	return out
}

var processesRE = regexp.MustCompile(`(?m)^mmcpd_plugin_processes (\d+)$`)

func processesMetric(t *testing.T, addr string) string {
	t.Helper()
	_, body := apiGet(t, addr, "/metrics")
	m := processesRE.FindSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics lacks mmcpd_plugin_processes:\n%s", body)
	}
	return string(m[1])
}

// copiedPluginsFolder is pluginsFolder with copies, not links, and no
// script: a link made by another test would change the shared file's ctime,
// and so its identity in the describe cache.
func copiedPluginsFolder(t *testing.T, names ...string) string {
	t.Helper()
	return placePlugins(t, false, names...)
}

// TestDaemonIdleStop: through the real daemon, a plugin on standby leaves no
// process; ready ones stop after MMCP_PLUGINS_IDLE and start again for the
// next turn; the next daemon knows them from the describe cache without
// starting any.
func TestDaemonIdleStop(t *testing.T) {
	dir := copiedPluginsFolder(t, "system", "works", "needs")
	data := t.TempDir()
	fake := ollamatest.New(t)
	env := []string{
		"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir,
		"MMCP_PLUGINS_IDLE=1s", "MMCP_DATA_DIR=" + data,
	}
	addr, logs, daemon := startDaemon(t, env)
	t.Cleanup(func() {
		_ = daemon.Process.Kill()
		if !waitFor(5*time.Second, func() bool { return len(pluginProcs(dir)) == 0 }) {
			t.Errorf("plugin processes outlived the daemon: %v", pluginProcs(dir))
		}
	})
	waitReady(t, addr, logs)
	ps, _ := listPlugins(t, addr)
	if p := ps["needs"]; p.State != plugins.StateStandby || p.PID != 0 || len(p.Tools) == 0 {
		t.Errorf("needs: %+v", p)
	}
	if !waitFor(20*time.Second, func() bool { return len(pluginProcs(dir)) == 0 }) {
		t.Fatalf("plugins still run after the idle period: %v\n%s", pluginProcs(dir), logs)
	}
	ps, _ = listPlugins(t, addr)
	for _, name := range []string{"system", "works"} {
		if p := ps[name]; p.State != plugins.StateIdleStopped || p.Status != plugins.StatusReady || p.PID != 0 {
			t.Errorf("%s after the idle period: %+v", name, p)
		}
	}
	if n := processesMetric(t, addr); n != "0" {
		t.Errorf("mmcpd_plugin_processes = %s, want 0", n)
	}
	if tl := listTools(t, addr)["works_echo"]; tl.Disabled != "" {
		t.Errorf("works_echo while stopped: %q", tl.Disabled)
	}

	// The next turn starts what it needs: system for its clock, works for
	// the call.
	chat := client{base: "http://" + addr, token: canary, http: &http.Client{Timeout: time.Minute}}
	fake.Push(decision("works_echo", `{"text":"woken"}`), answer("done"))
	if _, err := chat.chat(server.ChatRequest{Message: "echo"}); err != nil {
		t.Fatalf("chat: %v\n%s", err, logs)
	}
	reqs := fake.Requests()
	if told := lastUserMessage(reqs[len(reqs)-1]); !strings.Contains(told, `"echo":"woken"`) {
		t.Fatalf("the model was told %q\n%s", told, logs)
	}
	ps, _ = listPlugins(t, addr)
	if p := ps["works"]; p.Restarts != 0 || (p.State == plugins.StateRunning) != (p.PID != 0) || (p.PID != 0) != (p.RSSBytes > 0) {
		t.Errorf("works after the call: %+v", p)
	}
	if !strings.Contains(logs.String(), `"msg":"starting plugin on demand","plugin":"works"`) {
		t.Errorf("works was not started on demand:\n%s", logs)
	}
	if !waitFor(20*time.Second, func() bool { return len(pluginProcs(dir)) == 0 }) {
		t.Fatalf("not stopped again: %v", pluginProcs(dir))
	}

	// The next daemon: nothing starts, the tools are there.
	_ = daemon.Process.Kill()
	_ = daemon.Wait()
	if st, err := os.Stat(filepath.Join(data, "plugins-cache.json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", st, err)
	}
	addr, logs, daemon = startDaemon(t, env)
	waitReady(t, addr, logs)
	for _, name := range []string{"system", "works", "needs"} {
		if !strings.Contains(logs.String(), `"msg":"plugin described from cache","plugin":"`+name+`"`) {
			t.Errorf("%s not described from the cache:\n%s", name, logs)
		}
	}
	if got := runningPlugins(dir); len(got) != 0 {
		t.Errorf("processes at start: %v", got)
	}
	if tl, ok := listTools(t, addr)["works_echo"]; !ok || tl.Disabled != "" {
		t.Errorf("works_echo from the cache: %v %q", ok, tl.Disabled)
	}
}

// TestDaemonIdleZero: MMCP_PLUGINS_IDLE=0 keeps every plugin running, as
// before.
func TestDaemonIdleZero(t *testing.T) {
	dir := pluginsFolder(t, "works", "needs")
	fake := ollamatest.New(t)
	addr, logs, daemon := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir, "MMCP_PLUGINS_IDLE=0"})
	t.Cleanup(func() {
		_ = daemon.Process.Kill()
		waitFor(5*time.Second, func() bool { return len(pluginProcs(dir)) == 0 })
	})
	waitReady(t, addr, logs)
	time.Sleep(1500 * time.Millisecond)
	if got := runningPlugins(dir); !got["works"] || !got["needs"] {
		t.Errorf("running: %v", got)
	}
	if n := processesMetric(t, addr); n != "2" {
		t.Errorf("mmcpd_plugin_processes = %s, want 2", n)
	}
}
