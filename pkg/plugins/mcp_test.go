package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mmcpd/mmcpd/internal/mcptest"
	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// writeManifest puts <name>.mcp.json in dir.
func writeManifest(t testing.TB, dir, name string, manifest any) {
	t.Helper()
	b, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".mcp.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// goServerDir is a plugins folder holding the test MCP server as ./mcpserver
// (so that noProcessLeft watches it) and, under each name, a go-plugin
// plugin.
func goServerDir(t testing.TB, names ...string) string {
	t.Helper()
	dir := pluginDir(t, names...)
	link(t, mcptest.GoServer(t), filepath.Join(dir, "mcpserver"))
	return dir
}

func startIn(t testing.TB, dir string, opts plugins.Options) (*plugins.Host, *logBuffer) {
	t.Helper()
	h, logs := newHost(t, dir, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.Start(ctx)
	return h, logs
}

func tool(h *plugins.Host, name string) (found bool, needsApproval bool, kind, why string) {
	for _, tl := range h.Tools() {
		if tl.Name == name {
			return true, tl.NeedsApproval, tl.Kind, tl.Disabled
		}
	}
	return false, false, "", ""
}

var tookRE = regexp.MustCompile(`msg="plugin started" plugin=(\S+) .*took=(\S+)`)

// startTimes reads how long each source took to start from the host's log.
func startTimes(logs string) map[string]string {
	out := map[string]string{}
	for _, m := range tookRE.FindAllStringSubmatch(logs, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestMCPEverything runs the reference server from npm next to a go-plugin
// plugin: both start, its tools join the catalogue with their approval
// set from the annotations, and a call goes through.
func TestMCPEverything(t *testing.T) {
	node, script := mcptest.Everything(t)
	dir := pluginDir(t, "works")
	writeManifest(t, dir, "everything", map[string]any{"command": node, "args": []string{script}})
	h, logs := startIn(t, dir, plugins.Options{})

	p := info(t, h, "everything")
	if p.Kind != plugins.KindMCP || p.Status != plugins.StatusReady || len(p.Tools) < 10 {
		t.Fatalf("everything: %+v\n%s", p, logs)
	}
	for _, ti := range p.Tools {
		if ti.Disabled != "" { // every schema of the reference server joins the union
			t.Errorf("everything: %s: %s", ti.Name, ti.Disabled)
		}
	}
	if info(t, h, "works").Kind != plugins.KindPlugin {
		t.Errorf("works is not kind plugin")
	}
	found, approval, kind, why := tool(h, "everything_echo")
	if !found || approval || kind != plugins.KindMCP || why != "" {
		t.Errorf("everything_echo: found %v, approval %v, kind %q, disabled %q", found, approval, kind, why)
	}
	// get-env becomes get_env.
	if found, _, _, _ := tool(h, "everything_get_env"); !found {
		t.Errorf("everything_get_env not listed: %+v", p.Tools)
	}
	out := mustCall(t, h, "everything_echo", `{"message":"hello there"}`)
	if !strings.Contains(out, "hello there") {
		t.Errorf("echo: %q", out)
	}
	// Structured content: the numbers reach the model.
	out = mustCall(t, h, "everything_get_structured_content", `{"location":"Chicago"}`)
	if !strings.Contains(out, "temperature") {
		t.Errorf("structured: %q", out)
	}
	times := startTimes(logs.String())
	t.Logf("start time: MCP server everything (node) %s, go-plugin plugin works %s; %d MCP tools", times["everything"], times["works"], len(p.Tools))
	start := time.Now()
	const n = 20
	for range n {
		mustCall(t, h, "everything_echo", `{"message":"x"}`)
	}
	t.Logf("call round trip everything_echo: %s", time.Since(start)/n)
}

// TestMCPFilesystem: the filesystem server reads a file in the folder it is
// given, and its write tools need approval.
func TestMCPFilesystem(t *testing.T) {
	node, script := mcptest.Filesystem(t)
	dir := pluginDir(t)
	files := t.TempDir()
	if err := os.WriteFile(filepath.Join(files, "note.txt"), []byte("the film is Dune"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, dir, "fs", map[string]any{"command": node, "args": []string{script, files}, "trusted": []string{"create_directory"}})
	h, logs := startIn(t, dir, plugins.Options{})
	if p := info(t, h, "fs"); p.Status != plugins.StatusReady {
		t.Fatalf("fs: %+v\n%s", p, logs)
	}
	for _, ti := range info(t, h, "fs").Tools {
		if ti.Disabled != "" {
			t.Errorf("fs: %s: %s", ti.Name, ti.Disabled)
		}
	}
	out := mustCall(t, h, "fs_read_text_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(files, "note.txt")))
	if !strings.Contains(out, "the film is Dune") {
		t.Errorf("read: %q", out)
	}
	if _, approval, _, _ := tool(h, "fs_write_file"); !approval {
		t.Errorf("fs_write_file does not need approval")
	}
	if _, approval, _, _ := tool(h, "fs_create_directory"); approval {
		t.Errorf("fs_create_directory is trusted in the manifest, yet needs approval")
	}
}

// TestMCPGoServer covers what the test server shows on demand.
func TestMCPGoServer(t *testing.T) {
	dir := goServerDir(t)
	writeManifest(t, dir, "test-srv", map[string]any{
		"command": "./mcpserver",
		"env":     map[string]string{"GREETING": "hi ${MMCP_PLUGIN_TEST_SRV_TOKEN}"},
		"trusted": []string{"write-note"},
	})
	environ := append(baseEnviron(), "MMCP_PLUGIN_TEST_SRV_TOKEN=own-secret", "MMCP_PLUGIN_OTHER_KEY=other-secret", "MMCP_API_TOKEN=daemon-secret")
	h, logs := startIn(t, dir, plugins.Options{Environ: environ})
	if p := info(t, h, "test-srv"); p.Status != plugins.StatusReady || p.Version != "1.2.3" {
		t.Fatalf("test-srv: %+v\n%s", p, logs)
	}

	t.Run("env", func(t *testing.T) {
		out := mustCall(t, h, "test_srv_env", `{}`)
		if strings.Contains(out, "other-secret") || strings.Contains(out, "daemon-secret") || strings.Contains(out, "MMCP_PLUGIN_") {
			t.Errorf("the server sees more than its own:\n%s", out)
		}
		if !strings.Contains(out, "GREETING=hi own-secret") || !strings.Contains(out, "PATH=") {
			t.Errorf("the server lacks its env:\n%s", out)
		}
		p := info(t, h, "test-srv")
		if len(p.Settings) != 1 || p.Settings[0].Variable != "MMCP_PLUGIN_TEST_SRV_TOKEN" || p.Settings[0].Value != plugins.Mask {
			t.Errorf("settings: %+v", p.Settings)
		}
	})
	t.Run("approval", func(t *testing.T) {
		if _, approval, _, _ := tool(h, "test_srv_write_note"); approval {
			t.Errorf("write-note is trusted, yet needs approval")
		}
		if _, approval, _, _ := tool(h, "test_srv_echo"); approval {
			t.Errorf("echo is read-only, yet needs approval")
		}
	})
	t.Run("content", func(t *testing.T) {
		out := mustCall(t, h, "test_srv_picture", `{}`)
		for _, want := range []string{"a red dot", "[image: image/png, 10 bytes, not shown]", `{"height":1,"width":1}`} {
			if !strings.Contains(out, want) {
				t.Errorf("picture lacks %q:\n%s", want, out)
			}
		}
		_, err := call(h, "test_srv_fail", `{}`, 5*time.Second)
		if err == nil || !plugins.IsToolError(err) || !strings.Contains(err.Error(), "the thing is not there") {
			t.Errorf("fail: %v", err)
		}
	})
	t.Run("hang", func(t *testing.T) {
		start := time.Now()
		_, err := call(h, "test_srv_hang", `{}`, 500*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "did not finish within") || time.Since(start) > 3*time.Second {
			t.Fatalf("hang: %v after %s", err, time.Since(start))
		}
		// The server got the cancellation, and serves on.
		if !eventually(5*time.Second, func() bool {
			out, _ := call(h, "test_srv_last_cancel", `{}`, 5*time.Second)
			return strings.HasPrefix(out, "cancelled")
		}) {
			out, err := call(h, "test_srv_last_cancel", `{}`, 5*time.Second)
			t.Errorf("last_cancel: %q, %v", out, err)
		}
	})
	t.Run("list_changed", func(t *testing.T) {
		if found, _, _, _ := tool(h, "test_srv_late_tool"); found {
			t.Fatal("late_tool before grow")
		}
		mustCall(t, h, "test_srv_grow", `{}`)
		if !eventually(5*time.Second, func() bool { f, _, _, _ := tool(h, "test_srv_late_tool"); return f }) {
			t.Fatalf("late_tool not registered after the list changed:\n%s", logs)
		}
		if out := mustCall(t, h, "test_srv_late_tool", `{}`); out != "late and here" {
			t.Errorf("late_tool: %q", out)
		}
	})
	t.Run("crash", func(t *testing.T) {
		_, err := call(h, "test_srv_crash", `{}`, 5*time.Second)
		if err == nil || !strings.Contains(err.Error(), "exited during the call") {
			t.Fatalf("crash: %v", err)
		}
		if p := info(t, h, "test-srv"); p.Status != plugins.StatusRestarting {
			t.Errorf("after the crash: %s (%s)", p.Status, p.Reason)
		}
		// The next call starts it again.
		if out := mustCall(t, h, "test_srv_echo", `{"text":"back"}`); out != "echo: back" {
			t.Errorf("after restart: %q", out)
		}
		if p := info(t, h, "test-srv"); p.Status != plugins.StatusReady || p.Restarts != 1 {
			t.Errorf("after the restart: %+v", p)
		}
	})
}

// TestMCPNotThere: a server that cannot start waits on standby with the
// reason, and takes nothing else down.
func TestMCPNotThere(t *testing.T) {
	dir := goServerDir(t, "works")
	writeManifest(t, dir, "missing", map[string]any{"command": "no-such-mcp-server-mmcp"})
	writeManifest(t, dir, "unset", map[string]any{"command": "./mcpserver", "env": map[string]string{"K": "${MMCP_PLUGIN_UNSET_KEY}"}})
	writeManifest(t, dir, "foreign", map[string]any{"command": "./mcpserver", "env": map[string]string{"K": "${MMCP_API_TOKEN}"}})
	writeManifest(t, dir, "unreachable", map[string]any{"url": "http://127.0.0.1:1/mcp"})
	if err := os.WriteFile(filepath.Join(dir, "broken.mcp.json"), []byte(`{"command":"x","trusted":"all"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	h, logs := startIn(t, dir, plugins.Options{})
	for name, want := range map[string][2]string{
		"missing":     {plugins.StatusStandby, `command "no-such-mcp-server-mmcp" is not installed`},
		"unset":       {plugins.StatusStandby, "MMCP_PLUGIN_UNSET_KEY is required"},
		"foreign":     {plugins.StatusFailed, "a manifest may only refer to its own variables"},
		"unreachable": {plugins.StatusFailed, "connecting to MCP server unreachable"},
		"broken":      {plugins.StatusFailed, "manifest broken.mcp.json"},
	} {
		p := info(t, h, name)
		if p.Status != want[0] || !strings.Contains(p.Reason, want[1]) || p.Kind != plugins.KindMCP {
			t.Errorf("%s: %s %q, want %s %q", name, p.Status, p.Reason, want[0], want[1])
		}
	}
	if p := info(t, h, "works"); p.Status != plugins.StatusReady {
		t.Errorf("works: %+v\n%s", p, logs)
	}
	if p := info(t, h, "unset"); len(p.Settings) != 1 || p.Settings[0].Set {
		t.Errorf("unset settings: %+v", p.Settings)
	}
}

// TestMCPNames: names that cannot be used or that clash are refused alone,
// with the reason.
func TestMCPNames(t *testing.T) {
	dir := goServerDir(t, "echo")
	// The go-plugin plugin "echo" declares echo_...; a server named "echo"
	// would share its settings prefix: refused whole.
	writeManifest(t, dir, "echo", map[string]any{"command": "./mcpserver"})
	long := "a_server_with_a_name_long_enough_that_its_tools_overflow_sixty"
	writeManifest(t, dir, long, map[string]any{"command": "./mcpserver"})
	h, _ := startIn(t, dir, plugins.Options{})
	var refused int
	for _, p := range h.Plugins() {
		if p.Name == "echo" && p.Status == plugins.StatusFailed && strings.Contains(p.Reason, "settings prefix") {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("two sources named echo: %d refused, want 1: %+v", refused, h.Plugins())
	}
	p := info(t, h, long)
	ti := toolInfo(t, p, long+"_echo")
	if !strings.Contains(ti.Disabled, "not a usable name") {
		t.Errorf("long name: %+v", ti)
	}
	if found, _, _, _ := tool(h, long+"_echo"); found {
		t.Errorf("an over-long name reached the catalogue")
	}
}

// TestMCPHTTP reaches a streamable HTTP server with a header built from the
// server's own setting.
func TestMCPHTTP(t *testing.T) {
	server := sdk.NewServer(&sdk.Implementation{Name: "http-test", Version: "0.1"}, nil)
	sdk.AddTool(server, &sdk.Tool{Name: "whoami", Description: "Who calls", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "caller " + req.Extra.Header.Get("Authorization")}}}, nil, nil
		})
	handler := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-123" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	dir := pluginDir(t)
	writeManifest(t, dir, "remote", map[string]any{"url": srv.URL, "headers": map[string]string{"Authorization": "Bearer ${MMCP_PLUGIN_REMOTE_TOKEN}"}})
	h, logs := startIn(t, dir, plugins.Options{Environ: append(baseEnviron(), "MMCP_PLUGIN_REMOTE_TOKEN=tok-123")})
	if p := info(t, h, "remote"); p.Status != plugins.StatusReady {
		t.Fatalf("remote: %+v\n%s", p, logs)
	}
	if out := mustCall(t, h, "remote_whoami", `{}`); out != "caller Bearer tok-123" {
		t.Errorf("whoami: %q", out)
	}
	if strings.Contains(logs.String(), "tok-123") {
		t.Errorf("the token reached the log")
	}
}

// mcpBenchDir is a plugins folder with the reference MCP server (node), the
// Go test MCP server (srv) and a go-plugin plugin (works).
func mcpBenchDir(b *testing.B) string {
	node, script := mcptest.Everything(b)
	dir := goServerDir(b, "works")
	writeManifest(b, dir, "everything", map[string]any{"command": node, "args": []string{script}})
	writeManifest(b, dir, "srv", map[string]any{"command": "./mcpserver"})
	return dir
}

// BenchmarkMCPStart measures, in one host started all at once, how long the
// reference MCP server (node), the Go test MCP server and a go-plugin plugin
// each take to start and describe their tools.
func BenchmarkMCPStart(b *testing.B) {
	dir := mcpBenchDir(b)
	var starts [3]time.Duration
	var tools int
	for range b.N {
		h, logs := startIn(b, dir, plugins.Options{})
		for i, name := range []string{"everything", "srv", "works"} {
			d, err := time.ParseDuration(startTimes(logs.String())[name])
			if err != nil {
				b.Fatalf("%s: no start time in\n%s", name, logs)
			}
			starts[i] += d
		}
		tools = len(info(b, h, "everything").Tools) + len(info(b, h, "srv").Tools)
		h.Close()
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64((starts[0] / n).Milliseconds()), "everything-node-ms")
	b.ReportMetric(float64((starts[1] / n).Milliseconds()), "go-mcp-ms")
	b.ReportMetric(float64((starts[2] / n).Milliseconds()), "go-plugin-ms")
	b.ReportMetric(float64(tools), "mcp-tools")
}

// BenchmarkMCPCall measures a call round trip through the host to each.
func BenchmarkMCPCall(b *testing.B) {
	h, _ := startIn(b, mcpBenchDir(b), plugins.Options{Log: slog.New(slog.DiscardHandler)})
	for _, c := range []struct{ tool, args string }{
		{"everything_echo", `{"message":"hello"}`},
		{"srv_echo", `{"text":"hello"}`},
		{"works_echo", `{"text":"hello"}`},
	} {
		b.Run(c.tool, func(b *testing.B) {
			durs := make([]time.Duration, 0, b.N)
			for range b.N {
				start := time.Now()
				if _, err := call(h, c.tool, c.args, 10*time.Second); err != nil {
					b.Fatal(err)
				}
				durs = append(durs, time.Since(start))
			}
			reportPercentiles(b, durs)
		})
	}
}

// TestMCPTooLarge: a server that sends one message over the 4 MiB limit, or
// one that never ends, is stopped like a crashed one, the model is told which
// limit it broke, and it restarts on next use; a result under the limit
// arrives and is cut to MaxResultBytes.
func TestMCPTooLarge(t *testing.T) {
	dir := goServerDir(t)
	for _, name := range []string{"one", "two"} {
		writeManifest(t, dir, name, map[string]any{"command": "./mcpserver"})
	}
	h, logs := startIn(t, dir, plugins.Options{})
	out := mustCall(t, h, "one_big", `{"bytes":2097152}`)
	if !strings.HasSuffix(out, "[... cut: result was 2097152 bytes]") {
		t.Fatalf("a 2 MiB result: %d bytes, ending %q", len(out), out[max(0, len(out)-60):])
	}
	for _, c := range []struct{ server, tool, args string }{
		{"one", "one_big", `{"bytes":5242880}`},
		{"two", "two_endless", `{}`},
	} {
		t.Run(c.tool, func(t *testing.T) {
			start := time.Now()
			_, err := call(h, c.tool, c.args, 20*time.Second)
			if err == nil || !strings.Contains(err.Error(), "over the 4 MiB limit") || !strings.Contains(err.Error(), "restarts on next use") {
				t.Fatalf("%s: %v\n%s", c.tool, err, logs)
			}
			t.Logf("%s refused after %s", c.tool, time.Since(start).Round(time.Millisecond))
			if p := info(t, h, c.server); p.Status != plugins.StatusRestarting || !strings.Contains(p.Reason, "4 MiB") {
				t.Errorf("after the message: %s (%s)", p.Status, p.Reason)
			}
			if out := mustCall(t, h, c.server+"_echo", `{"text":"back"}`); out != "echo: back" {
				t.Errorf("after the restart: %q", out)
			}
		})
	}
}

// TestMCPHTTPTooLarge: the same limit holds for a response body of a URL
// server, whether it answers with JSON or with an event stream.
func TestMCPHTTPTooLarge(t *testing.T) {
	server := sdk.NewServer(&sdk.Implementation{Name: "http-big", Version: "0.1"}, nil)
	sdk.AddTool(server, &sdk.Tool{Name: "big", Description: "A text of the given size", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Bytes int `json:"bytes"`
		}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", in.Bytes)}}}, nil, nil
		})
	dir := pluginDir(t)
	for _, jsonResponse := range []bool{true, false} {
		handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, &sdk.StreamableHTTPOptions{JSONResponse: jsonResponse})
		srv := httptest.NewServer(handler)
		t.Cleanup(srv.Close)
		name := "sse"
		if jsonResponse {
			name = "json"
		}
		writeManifest(t, dir, name, map[string]any{"url": srv.URL})
	}
	h, logs := startIn(t, dir, plugins.Options{})
	for _, name := range []string{"json", "sse"} {
		t.Run(name, func(t *testing.T) {
			if out := mustCall(t, h, name+"_big", `{"bytes":2097152}`); !strings.HasSuffix(out, "[... cut: result was 2097152 bytes]") {
				t.Fatalf("a 2 MiB result: %d bytes", len(out))
			}
			_, err := call(h, name+"_big", `{"bytes":5242880}`, 20*time.Second)
			if err == nil || !strings.Contains(err.Error(), "over the 4 MiB limit") {
				t.Fatalf("5 MiB: %v\n%s", err, logs)
			}
			if p := info(t, h, name); p.Status != plugins.StatusRestarting || !strings.Contains(p.Reason, "4 MiB") {
				t.Errorf("after the message: %s (%s)", p.Status, p.Reason)
			}
			if out := mustCall(t, h, name+"_big", `{"bytes":3}`); out != "xxx" {
				t.Errorf("after reconnecting: %q", out)
			}
		})
	}
}
