package main

import (
	"encoding/json"
	"fmt"
	"github.com/mmcpd/mmcpd/internal/s2g"
	"io"
	"net/http"
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

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// pluginBuild holds the plugin binaries, built once next to the daemon's (so
// TestMain removes them).
var pluginBuild struct {
	once         sync.Once
	test, system string
	err          error
	output       []byte
}

func buildPlugins(t *testing.T) (testPlugin, system string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("finds plugin processes through /proc")
	}
	pluginBuild.once.Do(func() {
		dir := filepath.Join(filepath.Dir(binary), "plugin-bin")
		if pluginBuild.err = os.MkdirAll(dir, 0o755); pluginBuild.err != nil {
			return
		}
		pluginBuild.test = filepath.Join(dir, "testplugin")
		pluginBuild.system = filepath.Join(dir, "system")
		for out, pkg := range map[string]string{pluginBuild.test: "../../pkg/plugins/testdata/testplugin", pluginBuild.system: "../../plugins/system"} {
			if o, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
				pluginBuild.err, pluginBuild.output = fmt.Errorf("building %s: %w", pkg, err), o
				return
			}
		}
	})
	if pluginBuild.err != nil {
		t.Fatalf("%v\n%s", pluginBuild.err, pluginBuild.output)
	}
	return pluginBuild.test, pluginBuild.system
}

// pluginsFolder makes a plugins folder with the named plugins ("system" is
// the bundled one, the others modes of the test plugin) and a script that is
// no plugin at all.
func pluginsFolder(t *testing.T, names ...string) string {
	t.Helper()
	dir := placePlugins(t, true, names...)
	if err := os.WriteFile(filepath.Join(dir, "mmcp-plugin-notaplugin"), []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// placePlugins makes a plugins folder with the named plugins ("system" is
// the bundled one, the others modes of the test plugin), linked where link
// and the file system allow, else copied.
func placePlugins(t *testing.T, link bool, names ...string) string {
	t.Helper()
	testPlugin, system := buildPlugins(t)
	dir := pluginUserDir(t, false)
	for _, n := range names {
		src := testPlugin
		if n == "system" {
			src = system
		}
		dst := filepath.Join(dir, plugins.FilePrefix+n)
		if link && os.Link(src, dst) == nil {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// pluginProcs lists the live processes whose executable lies in dir.
func pluginProcs(dir string) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && strings.HasPrefix(exe, dir+"/") {
			out[pid] = filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
		}
	}
	return out
}

func waitFor(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(25 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// apiGet calls the daemon with the token and returns the status and body.
func apiGet(t *testing.T, addr, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+canary)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func listTools(t *testing.T, addr string) map[string]loop.Tool {
	t.Helper()
	code, body := apiGet(t, addr, "/v1/tools")
	var v struct {
		Tools []loop.Tool `json:"tools"`
	}
	if code != 200 || json.Unmarshal(body, &v) != nil {
		t.Fatalf("GET /v1/tools: %d %s", code, body)
	}
	out := map[string]loop.Tool{}
	for _, tl := range v.Tools {
		out[tl.Name] = tl
	}
	return out
}

func listPlugins(t *testing.T, addr string) (map[string]plugins.Info, []byte) {
	t.Helper()
	code, body := apiGet(t, addr, "/v1/plugins")
	var v struct {
		Plugins []plugins.Info `json:"plugins"`
	}
	if code != 200 || json.Unmarshal(body, &v) != nil {
		t.Fatalf("GET /v1/plugins: %d %s", code, body)
	}
	out := map[string]plugins.Info{}
	for _, p := range v.Plugins {
		out[p.Name] = p
	}
	return out, body
}

// decision is a model reply choosing action with args.
func decision(action, args string) ollamatest.Reply {
	return ollamatest.Reply{Content: fmt.Sprintf(`{"thought":"testing","action":%q,"args":%s}`, action, args)}
}

func answer(text string) ollamatest.Reply {
	return ollamatest.Reply{Content: fmt.Sprintf(`{"thought":"done","action":"final_response","args":{"answer":%q}}`, text)}
}

// lastUserMessage is the last user-role message of a model request: the
// observation, when the model called a tool.
func lastUserMessage(req api.ChatRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == "user" && !isTail(m.Content) {
			return m.Content
		}
	}
	return ""
}

// isTail reports whether a user message is the volatile tail the loop sends
// last and never stores: the runtime context, the tools down now, the
// request for a final answer.
func isTail(content string) bool {
	for _, p := range []string{"Runtime context (", "Unavailable now (", "You have used every step"} {
		if strings.HasPrefix(content, p) {
			return true
		}
	}
	return false
}

// tailOf returns the tail of a model request, or "".
func tailOf(req api.ChatRequest) string {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "user" && isTail(req.Messages[n-1].Content) {
		return req.Messages[n-1].Content
	}
	return ""
}

func TestDaemonRunsPlugins(t *testing.T) {
	const secret = "plugin-secret-4c2e91d0"
	dir := pluginsFolder(t, "system", "works", "needs", "exit", "panic", "slow", "ignore", "wedge", "huge", "envdump", "ctxslow", "ctxfail", "badschema")
	fake := ollamatest.New(t)
	env := []string{
		"MMCP_OLLAMA_HOST=" + fake.URL,
		"MMCP_API_TOKEN=" + canary,
		"MMCP_PLUGINS_DIR=" + dir,
		"MMCP_PLUGIN_WORKS_SECRET=" + secret,
		"MMCP_PLUGIN_WORKS_NOTE=visible note",
		"MMCP_PLUGIN_ENVDUMP_COLOR=blue",
		"MMCP_PLUGIN_CTXFAIL_LOG=" + filepath.Join(pluginUserDir(t, true), "ctxfail.log"),
		"HOSTILE_VAR=hostile",
		"MMCP_TOOL_TIMEOUT=1s",
		"MMCP_PLUGINS_KILL_GRACE=300ms",
	}
	addr, logs, daemon := startDaemon(t, env)
	t.Cleanup(func() {
		// Whatever happened, the plugins go with the daemon.
		_ = daemon.Process.Kill()
		if !waitFor(5*time.Second, func() bool { return len(pluginProcs(dir)) == 0 }) {
			t.Errorf("plugin processes outlived the daemon: %v", pluginProcs(dir))
			for pid := range pluginProcs(dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})

	if !waitFor(30*time.Second, func() bool { code, _ := apiGet(t, addr, "/readyz"); return code == 200 }) {
		_, body := apiGet(t, addr, "/readyz")
		t.Fatalf("/readyz never 200: %s\nlogs:\n%s", body, logs)
	}
	if !waitFor(5*time.Second, func() bool { _, ok := listTools(t, addr)["works_echo"]; return ok }) {
		t.Fatalf("works_echo never listed:\n%s", logs)
	}

	// What the API shows.
	tools := listTools(t, addr)
	for _, name := range []string{"system_time", "works_echo", "exit_die", "panic_boom", "slow_sleep", "envdump_env"} {
		if tl, ok := tools[name]; !ok || tl.Disabled != "" {
			t.Errorf("%s: listed %v, disabled %q", name, ok, tl.Disabled)
		}
	}
	if tl := tools["needs_echo"]; !strings.Contains(tl.Disabled, "MMCP_PLUGIN_NEEDS_TOKEN is required") || !strings.Contains(tl.Disabled, "standby") {
		t.Errorf("needs_echo disabled = %q", tl.Disabled)
	}
	ps, body := listPlugins(t, addr)
	if strings.Contains(string(body), secret) || strings.Contains(string(body), canary) {
		t.Errorf("GET /v1/plugins shows a secret: %s", body)
	}
	settings := map[string]plugins.SettingInfo{}
	for _, s := range ps["works"].Settings {
		settings[s.Variable] = s
	}
	if s := settings["MMCP_PLUGIN_WORKS_SECRET"]; s.Value != "**********" || !s.Secret {
		t.Errorf("secret setting: %+v", s)
	}
	if s := settings["MMCP_PLUGIN_WORKS_NOTE"]; s.Value != "visible note" {
		t.Errorf("plain setting: %+v", s)
	}
	if p := ps["notaplugin"]; p.Status != plugins.StatusFailed {
		t.Errorf("notaplugin: %+v", p)
	}
	if p := ps["needs"]; p.Status != plugins.StatusStandby || p.Reason != "MMCP_PLUGIN_NEEDS_TOKEN is required" {
		t.Errorf("needs: %+v", p)
	}
	// One refused tool never costs its plugin's others.
	if p := ps["badschema"]; p.Status != plugins.StatusReady {
		t.Errorf("badschema: %+v", p)
	}
	if tl := tools["badschema_text"]; !strings.HasPrefix(tl.Disabled, `refused: tool "badschema_text"`) {
		t.Errorf("badschema_text: %+v", tl)
	}
	if tl, ok := tools["badschema_echo"]; !ok || tl.Disabled != "" {
		t.Errorf("badschema_echo: %+v", tl)
	}
	for _, name := range []string{"system", "works", "exit", "panic", "slow", "ignore", "wedge", "huge", "envdump", "ctxslow", "ctxfail"} {
		if p := ps[name]; p.Status != plugins.StatusReady {
			t.Errorf("%s: %+v", name, p)
		}
	}

	chat := client{base: "http://" + addr, token: canary, http: &http.Client{Timeout: time.Minute}}
	// turn has the model call tool with args, then answer; it returns the
	// step and what the model was told.
	turn := func(tool, args string) (loop.Step, string) {
		t.Helper()
		fake.Push(decision(tool, args), answer("answered after "+tool))
		before := len(fake.Requests())
		res, err := chat.chat(server.ChatRequest{Message: "please use " + tool})
		if err != nil {
			t.Fatalf("chat calling %s: %v\nlogs:\n%s", tool, err, logs)
		}
		if res.Answer != "answered after "+tool || len(res.Steps) != 2 || res.Steps[0].Action != tool {
			t.Errorf("chat calling %s: %+v", tool, res)
		}
		reqs := fake.Requests()
		if len(reqs) != before+2 {
			t.Fatalf("the model was asked %d times, want 2", len(reqs)-before)
		}
		// The daemon keeps serving.
		if resp, err := http.Get("http://" + addr + "/healthz"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz after %s: %v", tool, err)
		} else {
			resp.Body.Close()
		}
		if len(res.Steps) == 0 {
			return loop.Step{}, lastUserMessage(reqs[len(reqs)-1])
		}
		return res.Steps[0], lastUserMessage(reqs[len(reqs)-1])
	}

	step, told := turn("works_echo", `{"text":"ping-42"}`)
	if want := "Result of works_echo:\n{\"echo\":\"ping-42\",\"plugin\":\"works\"}"; told != want || step.Error != "" {
		t.Errorf("works_echo: the model was told %q, want %q (step %+v)", told, want, step)
	}
	// The runtime context reached the prompt's tail: the healthy
	// providers, not the slow or failing ones.
	first := tailOf(fake.Requests()[0])
	if !strings.Contains(first, "works.info: works is fine") || !strings.Contains(first, "system.now: Current time: ") ||
		strings.Contains(first, "ctxslow.slow") || strings.Contains(first, "ctxfail.broken") {
		t.Errorf("the prompt's tail:\n%s", first)
	}

	step, told = turn("exit_die", `{}`)
	if want := "exit_die failed: plugin exit exited during the call to exit_die; it will be restarted"; told != want || !strings.Contains(step.Error, "exited during the call") {
		t.Errorf("exit_die: the model was told %q, want %q", told, want)
	}
	if p, _ := listPlugins(t, addr); p["exit"].Status != plugins.StatusRestarting {
		t.Errorf("exit after the crash: %+v", p["exit"])
	}
	if _, told = turn("exit_echo", `{"text":"back"}`); !strings.Contains(told, `"echo":"back"`) {
		t.Errorf("exit_echo after the crash: %q", told)
	}
	if p, _ := listPlugins(t, addr); p["exit"].Status != plugins.StatusReady || p["exit"].Restarts != 1 {
		t.Errorf("exit after the restart: %+v", p["exit"])
	}

	if _, told = turn("panic_boom", `{}`); told != "panic_boom failed: tool panic_boom panicked: boom" {
		t.Errorf("panic_boom: the model was told %q", told)
	}

	start := time.Now()
	if _, told = turn("slow_sleep", `{"ms":60000}`); !strings.HasPrefix(told, "slow_sleep failed: tool slow_sleep did not finish within ") {
		t.Errorf("slow_sleep: the model was told %q", told)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the slow turn took %s with a 1s tool timeout", d)
	}
	if _, told = turn("ignore_hang", `{}`); !strings.HasPrefix(told, "ignore_hang failed: tool ignore_hang did not finish within ") {
		t.Errorf("ignore_hang: the model was told %q", told)
	}
	// The plugin cannot stop itself as the first process of its pid
	// namespace: it is stopped from outside, as a debugger would.
	for pid, name := range pluginProcs(dir) {
		if name == plugins.FilePrefix+"wedge" {
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, told = turn("wedge_freeze", `{}`); !strings.HasPrefix(told, "wedge_freeze failed: tool wedge_freeze did not finish within ") {
		t.Errorf("wedge_freeze: the model was told %q", told)
	}
	if _, told = turn("wedge_echo", `{"text":"thawed"}`); !strings.Contains(told, `"echo":"thawed"`) {
		t.Errorf("wedge_echo after the kill: %q", told)
	}
	if p, _ := listPlugins(t, addr); p["wedge"].Restarts != 1 || p["ignore"].Restarts != 0 || p["slow"].Restarts != 0 {
		t.Errorf("restarts: wedge %d (want 1), ignore %d, slow %d (want 0)", p["wedge"].Restarts, p["ignore"].Restarts, p["slow"].Restarts)
	}

	// 8 MiB is past every cut (1 MiB) and quick to make even under -race
	// on a busy machine, where 50 MiB sometimes took longer than the
	// test's 1 s tool timeout.
	step, told = turn("huge_blob", `{"mb":8}`)
	if !strings.HasPrefix(told, "Result of huge_blob:\n") || len(told) > 64<<10 || len(step.Observation) > plugins.MaxResultBytes ||
		!strings.HasSuffix(step.Observation, "[... cut: result was 8388608 bytes]") {
		t.Errorf("huge_blob: the model was told %d bytes, the API shows %d bytes ending %q", len(told), len(step.Observation), step.Observation[max(0, len(step.Observation)-50):])
	}

	step, told = turn("envdump_env", `{}`)
	penv := strings.Split(step.Observation, "\n")
	for _, want := range []string{"MMCP_PLUGIN_ENVDUMP_COLOR=blue", "MMCP_PLUGIN_MAGIC_COOKIE=mmcpd-tool-plugin-v1", "PATH=" + os.Getenv("PATH")} {
		if !contains(penv, want) {
			t.Errorf("the plugin's environment lacks %s:\n%s", want, step.Observation)
		}
	}
	if !strings.Contains(step.Observation, "MMCP_DAEMON_VERSION=") {
		t.Errorf("the plugin's environment lacks the daemon's version:\n%s", step.Observation)
	}
	for _, leak := range []string{canary, secret, "HOSTILE_VAR", "MMCP_API_TOKEN", "MMCP_PLUGIN_WORKS_", "MMCP_OLLAMA_HOST", "MMCP_PLUGINS_DIR"} {
		if strings.Contains(step.Observation, leak) || strings.Contains(told, leak) {
			t.Errorf("the plugin sees %s", leak)
		}
	}

	// The model is told which tools it may not use, and why.
	last := fake.Requests()[len(fake.Requests())-1].Messages[0].Content
	if !strings.Contains(last, "needs_echo: plugin needs is on standby: MMCP_PLUGIN_NEEDS_TOKEN is required") {
		t.Errorf("the system prompt does not tell the model about needs_echo:\n%s", last)
	}
	if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), canary) {
		t.Error("a secret reached the daemon's log")
	}

	// SIGKILL gives the daemon no chance to stop its plugins: the kernel
	// must (Pdeathsig).
	running := pluginProcs(dir)
	if len(running) < 11 {
		t.Errorf("want a process for each of the 11 running plugins, found %v", running)
	}
	if err := daemon.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = daemon.Wait()
	if !waitFor(5*time.Second, func() bool { return len(pluginProcs(dir)) == 0 }) {
		var left []string
		for pid, name := range pluginProcs(dir) {
			left = append(left, fmt.Sprintf("%s(%d)", name, pid))
		}
		sort.Strings(left)
		t.Errorf("plugins outlived the SIGKILLed daemon: %s", strings.Join(left, " "))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestDaemonStopsPluginsOnSIGTERM(t *testing.T) {
	dir := pluginsFolder(t, "system", "works", "ignore")
	fake := ollamatest.New(t)
	addr, logs, daemon := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir})
	if !waitFor(30*time.Second, func() bool { code, _ := apiGet(t, addr, "/readyz"); return code == 200 }) {
		t.Fatalf("/readyz never 200:\n%s", logs)
	}
	if n := len(pluginProcs(dir)); n != 3 {
		t.Errorf("%d plugin processes, want 3", n)
	}
	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := daemon.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, logs)
	}
	if !waitFor(5*time.Second, func() bool { return len(pluginProcs(dir)) == 0 }) {
		t.Errorf("plugins left after the daemon stopped: %v", pluginProcs(dir))
	}
}

func TestSchemaCommandWithPlugins(t *testing.T) {
	dir := pluginsFolder(t, "system", "works", "needs", "badschema")
	out, err := command([]string{"MMCP_PLUGINS_DIR=" + dir}, "schema").Output()
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if !strings.Contains(s, `"const": "works_echo"`) || !strings.Contains(s, `"const": "system_time"`) || !strings.Contains(s, `"const": "badschema_any"`) ||
		strings.Contains(s, "needs_echo") || strings.Contains(s, "badschema_text") {
		t.Errorf("schema:\n%s", s)
	}
	s2g.Build(t).Accepts(t, "mmcpd schema", out)
	if !waitFor(5*time.Second, func() bool { return len(pluginProcs(dir)) == 0 }) {
		t.Errorf("plugins left after mmcpd schema: %v", pluginProcs(dir))
	}
}
