package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/mmcpd/mmcpd/pkg/plugins"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// TestProcess builds the bundled system plugin and talks to it as the host
// does: a real process, the go-plugin handshake, gRPC over AutoMTLS.
func TestProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build the plugin with")
	}
	bin := filepath.Join(t.TempDir(), "mmcp-plugin-system")
	build := exec.Command(goTool, "build", "-o", bin, "github.com/mmcpd/mmcpd/plugins/system")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	cmd := exec.Command(bin)
	cmd.Env = []string{"TZ=UTC", "MMCP_DAEMON_VERSION=9.9.9"}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  plugins.Handshake,
		Plugins:          plugin.PluginSet{plugins.PluginName: &plugins.GRPCPlugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		StartTimeout:     30 * time.Second,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: "host", Output: os.Stderr, Level: hclog.Warn}),
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rpc.Dispense(plugins.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	pc := raw.(pluginpb.PluginClient)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	d, err := pc.Describe(ctx, &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "system" || d.Version != "1.0.0" || len(d.Tools) != 1 || d.Tools[0].Name != "system_time" ||
		len(d.Settings) != 0 || len(d.SettingProblems) != 0 {
		t.Errorf("describe: %v", d)
	}

	r, err := pc.Call(ctx, &pluginpb.CallRequest{Tool: "system_time", Args: []byte(`{"timezone":"Asia/Tokyo"}`), TimeoutMs: 5000})
	if err != nil || r.Error != "" {
		t.Fatalf("call: %v, %v", r, err)
	}
	var got struct {
		Timezone  string `json:"timezone"`
		UTCOffset string `json:"utc_offset"`
		Unix      int64  `json:"unix"`
	}
	if err := json.Unmarshal(r.Result, &got); err != nil || got.Timezone != "Asia/Tokyo" || got.UTCOffset != "+09:00" ||
		time.Since(time.Unix(got.Unix, 0)).Abs() > time.Minute {
		t.Errorf("system_time: %s (%v)", r.Result, err)
	}
	r, err = pc.Call(ctx, &pluginpb.CallRequest{Tool: "system_time", Args: []byte(`{"timezone":"Mars/Olympus"}`)})
	if err != nil || !strings.Contains(r.Error, `unknown time zone "Mars/Olympus"`) {
		t.Errorf("unknown zone: %v, %v", r, err)
	}

	c, err := pc.Context(ctx, &pluginpb.ContextRequest{Key: "now"})
	if err != nil || !strings.HasPrefix(c.Text, "Current time: ") || !strings.Contains(c.Text, "UTC (UTC+00:00); mmcpd version 9.9.9") {
		t.Errorf("now: %v, %v", c, err)
	}

	client.Kill()
	if !client.Exited() {
		t.Error("the plugin is still running after Kill")
	}
}

// TestServeFailsLoudly runs itself again as a plugin with a declaration
// mistake: Serve must print it and exit 1 before any handshake.
func TestServeFailsLoudly(t *testing.T) {
	if os.Getenv("SDK_TEST_BAD_PLUGIN") == "1" {
		p := New("bad", "1.0.0")
		Tool(p, "bad_tool", "Arguments that are not a struct", func(context.Context, string) (string, error) { return "", nil })
		p.Serve()
		return // not reached
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeFailsLoudly$")
	cmd.Env = append(os.Environ(), "SDK_TEST_BAD_PLUGIN=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit: %v", err)
	}
	if !strings.Contains(stderr.String(), `mmcp-plugin-bad: plugin "bad": tool "bad_tool": reflect schema: string is not a struct`) {
		t.Errorf("stderr: %s", stderr.String())
	}
}
