package main

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/internal/mcptest"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// TestMCPServers runs the real daemon with MCP servers next to a go-plugin
// plugin: the reference server from npm, a small Go server for crashes and
// hangs, and one that is not installed. The model (the fake Ollama) calls
// their tools, and the observations reach its next prompt.
func TestMCPServers(t *testing.T) {
	node, everything := mcptest.Everything(t)
	dir := pluginsFolder(t, "works")
	srv, err := os.ReadFile(mcptest.GoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	// In the plugins folder, where the plugins user can run it.
	if err := os.WriteFile(filepath.Join(dir, "mcpserver"), srv, 0o755); err != nil {
		t.Fatal(err)
	}
	manifests := map[string]any{
		"everything": map[string]any{"command": node, "args": []string{everything}, "env": map[string]string{"API_KEY": "${MMCP_PLUGIN_EVERYTHING_KEY}"}},
		"srv":        map[string]any{"command": "./mcpserver"},
		"absent":     map[string]any{"command": "no-such-mcp-server-mmcp", "args": []string{"--stdio"}},
	}
	for name, m := range manifests {
		b, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dir, name+".mcp.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fake := ollamatest.New(t)
	addr, logs, daemon := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir,
		"MMCP_TOOL_TIMEOUT=1s",
		"MMCP_PLUGIN_EVERYTHING_KEY=everything-own-key", "MMCP_PLUGIN_WORKS_SECRET=canary-works-secret"})
	waitReady(t, addr, logs)

	tools := listTools(t, addr)
	for _, name := range []string{"everything_echo", "everything_get_env", "srv_echo", "srv_hang", "srv_crash"} {
		if tl, ok := tools[name]; !ok || tl.Kind != plugins.KindMCP || tl.Disabled != "" {
			t.Errorf("/v1/tools %s: %+v (listed %v)", name, tl, ok)
		}
	}
	if tl := tools["srv_write_note"]; !tl.NeedsApproval {
		t.Errorf("srv_write_note is not read-only, yet needs no approval")
	}
	ps, body := listPlugins(t, addr)
	if p := ps["everything"]; p.Kind != plugins.KindMCP || p.Status != plugins.StatusReady {
		t.Errorf("everything: %+v", p)
	}
	if p := ps["absent"]; p.Status != plugins.StatusStandby || !strings.Contains(p.Reason, `command "no-such-mcp-server-mmcp" is not installed`) {
		t.Errorf("absent: %+v", p)
	}
	if strings.Contains(string(body), "everything-own-key") {
		t.Errorf("/v1/plugins shows a secret: %s", body)
	}
	re := regexp.MustCompile(`"msg":"plugin started","plugin":"(\w+)".*?"took":(\d+)`)
	took := map[string]time.Duration{}
	for _, m := range re.FindAllStringSubmatch(logs.String(), -1) {
		d, _ := time.ParseDuration(m[2] + "ns")
		took[m[1]] = d
	}
	t.Logf("%d tools from MCP servers (everything %d, srv %d); start: everything (node) %s, srv (Go) %s, go-plugin works %s",
		countKind(tools, plugins.KindMCP), len(ps["everything"].Tools), len(ps["srv"].Tools), took["everything"], took["srv"], took["works"])

	chat := client{base: "http://" + addr, token: canary, http: &http.Client{Timeout: time.Minute}}
	turn := func(tool, args string) string {
		t.Helper()
		fake.Push(decision(tool, args), answer("done"))
		if _, err := chat.chat(server.ChatRequest{Message: "use " + tool}); err != nil {
			t.Fatalf("chat: %v\n%s", err, logs)
		}
		reqs := fake.Requests()
		return lastUserMessage(reqs[len(reqs)-1])
	}

	t.Run("round trip", func(t *testing.T) {
		start := time.Now()
		told := turn("everything_echo", `{"message":"round trip"}`)
		if !strings.HasPrefix(told, "Result of everything_echo:\n") || !strings.Contains(told, "round trip") {
			t.Errorf("the model was told %q", told)
		}
		t.Logf("a turn with one MCP call (two model calls): %s", time.Since(start))
	})
	t.Run("env isolation", func(t *testing.T) {
		told := turn("everything_get_env", `{}`)
		for _, secret := range []string{canary, "canary-works-secret", "MMCP_PLUGIN_", "MMCP_API_TOKEN"} {
			if strings.Contains(told, secret) {
				t.Errorf("the server sees %q:\n%s", secret, told)
			}
		}
		if !strings.Contains(told, "everything-own-key") {
			t.Errorf("the server lacks its own setting:\n%s", told)
		}
	})
	t.Run("hang", func(t *testing.T) {
		told := turn("srv_hang", `{}`)
		if !strings.HasPrefix(told, "srv_hang failed:") || !strings.Contains(told, "did not finish within") {
			t.Errorf("the model was told %q", told)
		}
		// The server was told to cancel, and it did.
		if told := turn("srv_last_cancel", `{}`); !strings.Contains(told, "cancelled") {
			t.Errorf("after the hang, the model was told %q", told)
		}
	})
	t.Run("crash", func(t *testing.T) {
		told := turn("srv_crash", `{}`)
		if !strings.HasPrefix(told, "srv_crash failed:") || !strings.Contains(told, "exited during the call") {
			t.Errorf("the model was told %q", told)
		}
		if told := turn("srv_echo", `{"text":"again"}`); !strings.Contains(told, "echo: again") {
			t.Errorf("after the crash, the model was told %q", told)
		}
		ps, _ := listPlugins(t, addr)
		if p := ps["srv"]; p.Restarts != 1 || p.Status != plugins.StatusReady {
			t.Errorf("srv after its crash: %+v", p)
		}
	})
	// A daemon killed outright takes its MCP servers with it.
	running := pluginProcs(dir)
	if !slices.Contains(slices.Collect(maps.Values(running)), "mcpserver") {
		t.Fatalf("the Go MCP server is not running: %v", running)
	}
	_ = daemon.Process.Kill()
	_ = daemon.Wait()
	if !waitFor(5*time.Second, func() bool { return len(pluginProcs(dir)) == 0 }) {
		t.Errorf("MCP server processes outlived the daemon: %v", pluginProcs(dir))
	}
}

func countKind(tools map[string]loop.Tool, kind string) int {
	n := 0
	for _, tl := range tools {
		if tl.Kind == kind {
			n++
		}
	}
	return n
}
