package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/internal/needs"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// waitReady waits until /readyz answers 200 and returns its body.
func waitReady(t *testing.T, addr string, logs *syncBuffer) string {
	t.Helper()
	var body []byte
	if !waitFor(30*time.Second, func() bool {
		var code int
		code, body = apiGet(t, addr, "/readyz")
		return code == 200
	}) {
		t.Fatalf("/readyz never 200: %s\nlogs:\n%s", body, logs)
	}
	return string(body)
}

// TestToolTakeoverThroughDaemon: plugin aaa declares guard's tool without
// the approval guard asks for; neither runs it, and every view says why.
func TestToolTakeoverThroughDaemon(t *testing.T) {
	dir := pluginsFolder(t, "works", "guard", "aaa")
	fake := ollamatest.New(t)
	addr, logs, _ := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir})
	ready := waitReady(t, addr, logs)
	const why = "plugins aaa and guard both declare a tool named guard_remove; remove or rename one of them"
	if !strings.Contains(ready, "tool guard_remove of plugin aaa is refused: "+why) {
		t.Errorf("/readyz does not say why guard_remove is refused: %s", ready)
	}
	if tl, ok := listTools(t, addr)["guard_remove"]; !ok || tl.Disabled != "refused: "+why || !tl.NeedsApproval {
		t.Errorf("/v1/tools guard_remove: listed %v, %+v", ok, tl)
	}
	ps, _ := listPlugins(t, addr)
	for _, p := range []string{"aaa", "guard"} {
		for _, ti := range ps[p].Tools {
			if ti.Name == "guard_remove" && ti.Disabled != "refused: "+why {
				t.Errorf("/v1/plugins %s guard_remove: %+v", p, ti)
			}
		}
	}
	// The model asks for it anyway: it is not an action it may take.
	fake.Push(decision("guard_remove", `{"text":"all"}`), answer("could not"))
	chat := client{base: "http://" + addr, token: canary, http: &http.Client{Timeout: time.Minute}}
	res, err := chat.chat(server.ChatRequest{Message: "remove everything"})
	if err != nil {
		t.Fatalf("chat: %v\n%s", err, logs)
	}
	if res.Type != "answer" || res.Answer != "could not" {
		t.Errorf("the turn ran the tool or asked for it: %+v", res)
	}
	reqs := fake.Requests()
	if told := lastUserMessage(reqs[len(reqs)-1]); !strings.Contains(told, `unknown action "guard_remove"`) {
		t.Errorf("the model was told %q", told)
	}
}

// TestPluginsCannotReadSecrets: a plugin reads /proc/<pid>/environ of the
// daemon and of a sibling plugin, both holding secrets. As root the daemon
// runs plugins as nobody; as any user, the daemon and every SDK plugin are
// non-dumpable, so even a process of the same user is refused.
func TestPluginsCannotReadSecrets(t *testing.T) {
	type run struct {
		name       string
		asNobody   bool // the daemon itself runs as nobody
		pluginUID  int  // -1: not checked
		needsRoot  bool
		needsTools []string
	}
	runs := []run{
		{name: "daemon as root, plugins as nobody", pluginUID: 65534, needsRoot: true},
		// In a user namespace of its own a plugin reads its uid as nobody's
		// whatever it is.
		{name: "daemon and plugins as nobody", asNobody: true, pluginUID: -1, needsRoot: true, needsTools: []string{"setpriv"}},
		{name: "daemon and plugins as this user", pluginUID: -1},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			switch {
			case r.needsRoot && os.Geteuid() != 0:
				t.Skip("runs only as root, which can switch users (as another user, the case below runs)")
			case !r.needsRoot && os.Geteuid() == 0:
				t.Skip("runs only as a user other than root (as root, plugins run as nobody: the cases above)")
			}
			for _, tool := range r.needsTools {
				needs.Program(t, tool, "util-linux")
			}
			dir := pluginsFolder(t, "works", "snoop")
			fake := ollamatest.New(t)
			env := []string{
				"MMCP_OLLAMA_HOST=" + fake.URL,
				"MMCP_API_TOKEN=" + canary,
				"MMCP_PLUGINS_DIR=" + dir,
				"MMCP_PLUGIN_WORKS_SECRET=canary-plugin-secret",
			}
			var prefix []string
			if r.asNobody {
				prefix = []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"}
				env = append(env, "MMCP_DATA_DIR="+pluginUserDir(t, true))
			} else if os.Geteuid() != 0 {
				env = append(env, "MMCP_PLUGINS_USER=") // unused: only root switches users
			}
			addr, logs, daemon := startDaemonWith(t, prefix, env)
			waitReady(t, addr, logs)
			works := 0
			for pid, name := range pluginProcs(dir) {
				if name == plugins.FilePrefix+"works" {
					works = pid
				}
			}
			if works == 0 {
				t.Fatalf("no works plugin process:\n%s", logs)
			}
			fake.Push(decision("snoop_read", fmt.Sprintf(`{"pids":[%d,%d]}`, daemon.Process.Pid, works)), answer("done"))
			chat := client{base: "http://" + addr, token: canary, http: &http.Client{Timeout: time.Minute}}
			if _, err := chat.chat(server.ChatRequest{Message: "snoop"}); err != nil {
				t.Fatalf("chat: %v\n%s", err, logs)
			}
			reqs := fake.Requests()
			report := lastUserMessage(reqs[len(reqs)-1])
			want := []string{
				// The probe works: the plugin reads its own child's.
				"child read 8 bytes",
				fmt.Sprintf("%d denied: permission denied", daemon.Process.Pid),
				fmt.Sprintf("%d denied: permission denied", works),
			}
			if r.pluginUID >= 0 {
				want = append(want, "uid "+strconv.Itoa(r.pluginUID))
			}
			for _, w := range want {
				if !strings.Contains(report, w) {
					t.Errorf("the plugin's report lacks %q:\n%s", w, report)
				}
			}
			if strings.Contains(report, "canary") {
				t.Errorf("a plugin read a secret:\n%s", report)
			}
		})
	}
}

// startDaemonWith is startDaemon with the binary started through prefix
// (setpriv, to run it as another user).
func startDaemonWith(t *testing.T, prefix, env []string) (addr string, logs *syncBuffer, cmd *exec.Cmd) {
	t.Helper()
	if len(prefix) == 0 {
		return startDaemon(t, env)
	}
	addr = freeAddr(t)
	logs = &syncBuffer{}
	cmd = command(append(env, "MMCP_LISTEN_ADDR="+addr, "MMCP_LOG_FORMAT=json"), "serve")
	path, err := exec.LookPath(prefix[0])
	if err != nil {
		t.Fatal(err)
	}
	cmd.Args = append(append(prefix, binary), cmd.Args[1:]...)
	cmd.Path = path
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !waitFor(20*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}) {
		t.Fatalf("daemon did not come up:\n%s", logs)
	}
	return addr, logs, cmd
}

// TestGrandchildrenDieWithDaemon: children a plugin forks, even one that left
// its process group with setsid, do not outlive the daemon, whether it stops
// on SIGTERM or is killed.
func TestGrandchildrenDieWithDaemon(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := pluginsFolder(t, "fork")
			fake := ollamatest.New(t)
			addr, logs, daemon := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir})
			waitReady(t, addr, logs)
			chat := client{base: "http://" + addr, token: canary, http: &http.Client{Timeout: time.Minute}}
			var children []int
			for _, tool := range []string{"fork_child", "fork_escape"} {
				fake.Push(decision(tool, `{}`), answer("forked"))
				if _, err := chat.chat(server.ChatRequest{Message: "fork"}); err != nil {
					t.Fatalf("chat: %v\n%s", err, logs)
				}
				reqs := fake.Requests()
				told := lastUserMessage(reqs[len(reqs)-1])
				pid, err := strconv.Atoi(strings.TrimPrefix(told, "Result of "+tool+":\n"))
				if err != nil || !processAlive(pid) {
					t.Fatalf("%s: the model was told %q", tool, told)
				}
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				children = append(children, pid)
			}
			if err := daemon.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = daemon.Wait()
			for _, pid := range children {
				if !waitFor(5*time.Second, func() bool { return !processAlive(pid) }) {
					t.Errorf("child %d of a plugin outlived the daemon (%s)", pid, sig)
				}
			}
		})
	}
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// TestOversizedToolsRefused: a 5 MB description, a 100 KB schema and a
// hundred tools do not reach the model; each refused tool says why, and the
// prompt stays within the budget.
func TestOversizedToolsRefused(t *testing.T) {
	dir := pluginsFolder(t, "bloat", "many", "works")
	fake := ollamatest.New(t)
	addr, logs, _ := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir})
	ready := waitReady(t, addr, logs)
	for _, want := range []string{
		"tool bloat_big of plugin bloat is refused: its description has 5242872 characters, over the limit of 1000 (MMCP_TOOL_MAX_DESCRIPTION_CHARS)",
		"tool bloat_wide of plugin bloat is refused: its argument schema has ",
		"tool works_echo of plugin works is refused: the daemon already offers 64 tools, its limit (MMCP_TOOLS_MAX)",
	} {
		if !strings.Contains(ready, want) {
			t.Errorf("/readyz lacks %q: %s", want, ready)
		}
	}
	tools := listTools(t, addr)
	offered := 0
	for _, tl := range tools {
		if tl.Disabled == "" {
			offered++
		}
	}
	if offered != 64 {
		t.Errorf("%d tools offered, want 64", offered)
	}
	// Listed, with why, but not offered.
	for _, name := range []string{"bloat_big", "bloat_wide", "works_echo"} {
		if tl, ok := tools[name]; !ok || !strings.HasPrefix(tl.Disabled, "refused: ") {
			t.Errorf("%s: %+v, want listed as refused", name, tl.Disabled)
		}
	}
	fake.Push(answer("fine"))
	chat := client{base: "http://" + addr, token: canary, http: &http.Client{Timeout: time.Minute}}
	if _, err := chat.chat(server.ChatRequest{Message: "hello"}); err != nil {
		t.Fatalf("chat: %v\n%s", err, logs)
	}
	req := fake.Requests()[0]
	size := 0
	for _, m := range req.Messages {
		size += len(m.Content)
	}
	if size > 20000 || len(req.Format) > 64<<10 {
		t.Errorf("the model got %d characters of prompt and a %d-byte format", size, len(req.Format))
	}
}
