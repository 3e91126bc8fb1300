package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/internal/mcptest"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// The tests run the real binary, as a user would.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mmcpd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Run as root, the daemon starts plugins as nobody (MMCP_PLUGINS_USER),
	// who must reach them.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "mmcpd")
	if out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building mmcpd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	mcptest.Cleanup()
	os.RemoveAll(dir)
	os.Exit(code)
}

const canary = "canary-token-5f0c2a9e"

// command runs mmcpd with only the given environment (and PATH/HOME).
func command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	// Each run gets its own data folder unless the test names one (later
	// entries win).
	data, err := os.MkdirTemp(filepath.Dir(binary), "data")
	if err != nil {
		panic(err)
	}
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "MMCP_DATA_DIR=" + data}, env...)
	return cmd
}

// pluginUserDir is a fresh folder the plugin user can read and enter (mode
// 0755, as is its parent), or also write to (0777) when writable.
func pluginUserDir(t *testing.T, writable bool) string {
	t.Helper()
	dir := t.TempDir()
	mode := os.FileMode(0o755)
	if writable {
		mode = 0o777
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestVersionAndHelp(t *testing.T) {
	out, err := command(nil, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "mmcpd ") {
		t.Errorf("version: %q, %v", out, err)
	}
	out, err = command(nil, "nonsense").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), `unknown command "nonsense"`) {
		t.Errorf("unknown command: exit %d, %s", code, out)
	}
	// Asking for help is no mistake: exit 0, whatever the command.
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}, {"chat", "--help"}, {"respond", "-h"}, {"serve", "--help"}, {"config", "--help"}, {"schema", "-help"}} {
		out, err := command(nil, args...).CombinedOutput()
		if code := exitCode(err); code != 0 || !strings.Contains(string(out), "Usage") && !strings.Contains(string(out), "usage") {
			t.Errorf("mmcpd %s: exit %d, %s", strings.Join(args, " "), code, out)
		}
	}
	out, err = command(nil, "chat", "--bogus").CombinedOutput()
	if code := exitCode(err); code != 2 {
		t.Errorf("chat --bogus: exit %d, %s", code, out)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestConfigMasksSecrets(t *testing.T) {
	dir := pluginsFolder(t, "works", "needs")
	out, err := command([]string{"MMCP_API_TOKEN=" + canary, "MMCP_LOOP_MAX_STEPS=7", "MMCP_PLUGINS_DIR=" + dir,
		"MMCP_PLUGIN_WORKS_SECRET=canary-secret-1", "MMCP_PLUGIN_WORKS_NOTE=http://me:canary-pw@nas/?apikey=canary-key&lang=fr"}, "config").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := string(out)
	if strings.Contains(s, "canary") {
		t.Fatalf("config printed a secret:\n%s", s)
	}
	for _, want := range []string{"MMCP_API_TOKEN=**********", "MMCP_LOOP_MAX_STEPS=7", "MMCP_LISTEN_ADDR", "127.0.0.1:8787", "MMCP_TOOL_TIMEOUT",
		// Each plugin's own settings, as it describes them.
		"# Plugin works: ready", "MMCP_PLUGIN_WORKS_SECRET=**********  # secret", "MMCP_PLUGIN_WORKS_NOTE=http://me:***@nas/?apikey=***&lang=fr",
		"# Plugin needs: standby (MMCP_PLUGIN_NEEDS_TOKEN is required)", "MMCP_PLUGIN_NEEDS_TOKEN=  # required, secret, not set"} {
		if !strings.Contains(s, want) {
			t.Errorf("config output lacks %q:\n%s", want, s)
		}
	}
}

func TestInvalidConfigStopsTheDaemon(t *testing.T) {
	for _, env := range []string{"MMCP_LOOP_MAX_STEPS=0", "MMCP_LLM_TIMEOUT=soon", "MMCP_LOG_FORMAT=xml"} {
		out, err := command([]string{env}).CombinedOutput()
		name := strings.SplitN(env, "=", 2)[0]
		if code := exitCode(err); code != 2 || !strings.Contains(string(out), name) || strings.Contains(string(out), "goroutine") {
			t.Errorf("%s: exit %d, output:\n%s", env, code, out)
		}
	}
}

func TestSchemaCommand(t *testing.T) {
	out, err := command(nil, "schema").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil || !strings.Contains(string(out), `"const": "final_response"`) {
		t.Errorf("schema output: %v\n%s", err, out)
	}
}

// syncBuffer collects a child's output while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDaemon starts the daemon and waits until it answers /healthz.
func startDaemon(t *testing.T, env []string) (addr string, logs *syncBuffer, cmd *exec.Cmd) {
	t.Helper()
	logs = &syncBuffer{}
	// Port 0: the daemon takes a free port itself and logs it. A port
	// picked here and freed for the daemon could be taken meanwhile by any
	// other test's server, which would then answer in its place.
	cmd = command(append(env, "MMCP_LISTEN_ADDR=127.0.0.1:0", "MMCP_LOG_FORMAT=json"), "serve")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	listening := regexp.MustCompile(`"msg":"mmcpd listening","addr":"([^"]+)"`)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m := listening.FindStringSubmatch(logs.String()); m != nil && addr == "" {
			addr = m[1]
		}
		if addr != "" {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && strings.Contains(string(body), `"status":"ok"`) {
					return addr, logs, cmd
				}
			}
		}
		if time.Now().After(deadline) || strings.Contains(logs.String(), "mmcpd serve: ") {
			t.Fatalf("daemon did not come up:\n%s", logs)
		}
	}
}

func TestServeChatAndStop(t *testing.T) {
	fake := ollamatest.New(t, ollamatest.Reply{Content: `{"thought":"easy","action":"final_response","args":{"answer":"Hello from mmcpd"}}`})
	env := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary}
	addr, logs, daemon := startDaemon(t, env)

	out, err := command(append(env, "MMCP_LISTEN_ADDR="+addr), "chat", "--steps", "hello?").CombinedOutput()
	if err != nil {
		t.Fatalf("chat: %v\n%s\nlogs:\n%s", err, out, logs)
	}
	if !strings.Contains(string(out), "Hello from mmcpd") || !strings.Contains(string(out), "step 1: final_response") {
		t.Errorf("chat output:\n%s", out)
	}
	// Without the token, the daemon refuses, and chat says so.
	out, err = command([]string{"MMCP_LISTEN_ADDR=" + addr}, "chat", "hello?").CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "unauthorized") {
		t.Errorf("chat without token: %v\n%s", err, out)
	}

	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := daemon.Wait(); err != nil {
		t.Errorf("daemon exit after SIGTERM: %v\n%s", err, logs)
	}
	l := logs.String()
	if !strings.Contains(l, `"msg":"stopped"`) || !strings.Contains(l, `"msg":"step"`) {
		t.Errorf("logs lack the step or the clean stop:\n%s", l)
	}
	if strings.Contains(l, canary) {
		t.Error("the token reached the log")
	}
}

func TestServeWithoutOllama(t *testing.T) {
	down := freeAddr(t) // nothing listens there
	addr, logs, _ := startDaemon(t, []string{"MMCP_OLLAMA_HOST=http://" + down})
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("readyz = %d", resp.StatusCode)
	}
	l := logs.String()
	if !strings.Contains(l, "cannot reach Ollama at http://"+down) || !strings.Contains(l, "ollama serve") || strings.Contains(l, "goroutine") {
		t.Errorf("start-up log does not explain:\n%s", l)
	}
	out, _ := command([]string{"MMCP_LISTEN_ADDR=" + addr}, "chat", "hi").CombinedOutput()
	if !strings.Contains(string(out), "cannot reach Ollama") || !strings.Contains(string(out), "model_unavailable") {
		t.Errorf("chat output:\n%s", out)
	}
}
