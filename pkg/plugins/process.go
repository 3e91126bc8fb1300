package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/mmcpd/mmcpd/pkg/mcp"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// process is one running tool source: a plugin binary over go-plugin
// (client and rpc), or an MCP server (mcp).
type process struct {
	client *plugin.Client
	rpc    pluginpb.PluginClient
	mcp    *mcp.Conn
	pid    int
	done   chan struct{} // closed when the process has exited
}

// spawn says how plugin processes are started.
type spawn struct {
	cred  *syscall.Credential // the plugin user; nil: the daemon's own
	pidns bool                // each plugin in a pid namespace of its own
}

// errNamespace wraps a start that failed because the namespaces could not be
// made.
var errNamespace = errors.New("the kernel refused a pid namespace for the plugin")

// launch starts the binary at path with exactly env, completes the go-plugin
// handshake and returns a client for the Plugin service.
func launch(ctx context.Context, path string, env []string, sp spawn, timeout time.Duration, log *slog.Logger, onExit func(*process)) (*process, error) {
	cmd := exec.Command(path)
	cmd.Env = env
	isolate(cmd, sp.cred, sp.pidns)
	logw := &lineLogger{log: log.With("plugin", NameOf(path))}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          plugin.PluginSet{PluginName: &GRPCPlugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true, // a plugin sees its own settings, never the daemon's or another plugin's
		StartTimeout:     timeout,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:   "go-plugin",
			Level:  hclog.Warn,
			Output: logw,
		}),
		Stderr:          logw,
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes))},
	})
	p := &process{client: client, done: make(chan struct{})}
	// go-plugin's Start blocks on the handshake without a context: run it
	// aside so the caller's context bounds it too.
	type started struct {
		rpc pluginpb.PluginClient
		err error
	}
	ch := make(chan started, 1)
	go func() {
		proto, err := client.Client()
		if err != nil {
			ch <- started{err: err}
			return
		}
		raw, err := proto.Dispense(PluginName)
		if err != nil {
			ch <- started{err: err}
			return
		}
		rpc, ok := raw.(pluginpb.PluginClient)
		if !ok {
			ch <- started{err: fmt.Errorf("plugin served %T, not the Plugin service", raw)}
			return
		}
		ch <- started{rpc: rpc}
	}()
	select {
	case s := <-ch:
		if s.err != nil {
			p.kill()
			if cmd.Process == nil && sp.pidns && namespaceRefused(s.err) {
				return nil, fmt.Errorf("%w: %s", errNamespace, oneLine(s.err.Error()))
			}
			if cmd.Process == nil && sp.cred != nil && errors.Is(s.err, syscall.EACCES) {
				return nil, fmt.Errorf("starting %s as uid %d: %s: the plugin user must be able to read and execute the file and every folder above it (MMCP_PLUGINS_USER)", path, sp.cred.Uid, oneLine(s.err.Error()))
			}
			return nil, fmt.Errorf("starting %s: %s", path, oneLine(s.err.Error()))
		}
		p.rpc = s.rpc
	case <-ctx.Done():
		p.kill()
		return nil, fmt.Errorf("starting %s: %w", path, ctx.Err())
	}
	if cmd.Process != nil {
		p.pid = cmd.Process.Pid
	}
	go func() {
		// Exited polls cheaply; a plugin that dies is noticed within this.
		for !client.Exited() {
			time.Sleep(100 * time.Millisecond)
		}
		// Whatever it forked into its group goes with it.
		killGroup(p.pid)
		close(p.done)
		onExit(p)
	}()
	return p, nil
}

// exited reports whether the process is gone.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process and its process group at once. go-plugin's own Kill
// waits for a graceful exit and blocks forever on a wedged (stopped) process,
// so the group gets SIGKILL first and Kill only cleans up, off the caller's
// path. The plugin leads its group, so its pid is the group's id.
func (p *process) kill() {
	if p.pid > 0 {
		killGroup(p.pid)
	} else if p.client != nil {
		if rc := p.client.ReattachConfig(); rc != nil && rc.Pid > 0 {
			killGroup(rc.Pid)
		}
	}
	if p.mcp != nil {
		go p.mcp.Close()
		return
	}
	go p.client.Kill()
}

// stop asks the process to exit, and kills it if it has not within grace.
// Either way, what it forked into its group is killed with it.
func (p *process) stop(grace time.Duration) {
	done := make(chan struct{})
	go func() {
		if p.mcp != nil {
			p.mcp.Close() // closes its stdin, then signals it after grace
		} else {
			p.client.Kill()
		}
		close(done)
	}()
	select {
	case <-done:
		if p.pid > 0 {
			killGroup(p.pid)
		}
	case <-time.After(grace):
		p.kill()
	}
}

// lineLogger turns a plugin's stderr and go-plugin's own log into log lines.
type lineLogger struct{ log *slog.Logger }

func (l *lineLogger) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			l.log.Info("plugin output", "line", clip(line, 2000))
		}
	}
	return len(b), nil
}

var _ io.Writer = (*lineLogger)(nil)

func oneLine(s string) string {
	return clip(strings.Join(strings.Fields(s), " "), 500)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}
