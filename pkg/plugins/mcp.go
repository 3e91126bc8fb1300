package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/pkg/mcp"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/pkg/schema"
)

// Go-plugin plugins and MCP servers are two kinds of the same thing to the
// host: each is found in the plugins folder, started concurrently with the
// others, supervised (own process group, parent-death signal, the plugins
// user, restart with backoff), given only its own MMCP_PLUGIN_<SLUG>_*
// settings, and describes tools that join the union through registerAll. This
// file is what differs for an MCP server: its description is its tool list,
// and a call goes through the MCP client in pkg/mcp.

// Kinds of tool source, as /v1/plugins shows them.
const (
	KindPlugin = "plugin"
	KindMCP    = "mcp"
)

// mcpServer is what the host keeps of an MCP server besides what every
// source has. Guarded by its managed's mu.
type mcpServer struct {
	manifest        *mcp.Manifest
	invalidManifest string            // why the manifest could not be read
	names           map[string]string // mmcpd's tool name -> the server's
	invalid         map[string]string // tools refused alone, with why
	server          string            // the name the server gave itself
}

// discoverMCP reads the MCP server manifests in dir. One that cannot be read
// is kept, with why, so that /v1/plugins says so.
func discoverMCP(dir string) (map[string]*mcpServer, error) {
	paths, err := mcp.Discover(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*mcpServer, len(paths))
	for _, p := range paths {
		man, err := mcp.Load(p)
		s := &mcpServer{manifest: man}
		if err != nil {
			s.invalidManifest = oneLine(err.Error())
		}
		out[p] = s
	}
	return out, nil
}

// sourceName is the name of the plugin binary or MCP manifest at path.
func sourceName(path string) string {
	if strings.HasSuffix(path, mcp.Suffix) {
		return mcp.NameOf(path)
	}
	return NameOf(path)
}

// startMCP starts or reaches m's server and lists its tools. A server that
// cannot start for want of a setting or of its command is left on standby,
// with the reason, and nil is returned: it is not broken, only not set up.
func (h *Host) startMCP(ctx context.Context, m *managed) error {
	ctx, cancel := context.WithTimeout(ctx, h.opts.StartTimeout)
	defer cancel()
	start := time.Now()
	m.mu.Lock()
	man := m.mcp.manifest
	m.mu.Unlock()
	vars, headers, err := man.Resolve(EnvPrefix(m.name), func(k string) (string, bool) { return lookup(m.env, k) })
	if err != nil {
		return h.mcpNotStarted(m, err)
	}
	env := serverEnv(m.env, vars)
	var conn *mcp.Conn
	for {
		pidns := !h.noPIDNS.Load()
		var cmd *exec.Cmd
		conn, err = mcp.Connect(ctx, mcp.Options{
			Name: m.name, Manifest: man, Env: env, Headers: headers,
			Dir: filepath.Dir(m.path),
			Prepare: func(c *exec.Cmd) {
				cmd = c
				isolate(c, h.cred, pidns)
			},
			Stderr:       &lineLogger{log: h.log.With("plugin", m.name)},
			Grace:        h.opts.KillGrace,
			ToolsChanged: func() { h.mcpToolsChanged(m) },
			Version:      daemonVersion(m.env),
			Log:          h.log,
		})
		if err != nil && pidns && cmd != nil && cmd.Process == nil && namespaceRefused(err) {
			if h.noPIDNS.CompareAndSwap(false, true) {
				h.log.Warn("plugins run without a pid namespace of their own: a child a plugin detaches with setsid can outlive it", "reason", err.Error())
			}
			continue
		}
		break
	}
	if err != nil {
		return h.mcpNotStarted(m, err)
	}
	tools, err := conn.Tools(ctx)
	if err != nil {
		conn.Close()
		return h.mcpNotStarted(m, err)
	}
	proc := &process{mcp: conn, pid: conn.Pid(), done: make(chan struct{})}
	go func() {
		<-conn.Done()
		killGroup(proc.pid) // whatever it forked into its group goes with it
		close(proc.done)
		if !h.isClosed() {
			why := "exited"
			if conn.TooLarge() {
				why = "stopped: " + mcp.ErrTooLarge.Error()
			}
			h.crashed(m, proc, why)
		}
	}()
	server, version := conn.Server()
	m.mu.Lock()
	if h.isClosed() {
		m.mu.Unlock()
		proc.kill()
		return fmt.Errorf("MCP server %s: the daemon is shutting down", m.name)
	}
	m.proc = proc
	m.mcp.server = server
	m.desc = h.describeMCP(m, version, tools)
	m.offered, m.listedAt = m.desc.Tools, true
	m.status, m.reason = StatusReady, ""
	m.probe.has = false // MCP has no health probe; calls tell
	m.lastUse = time.Now()
	h.armIdleLocked(m)
	n := len(m.desc.Tools)
	m.mu.Unlock()
	h.log.Info("plugin started", "plugin", m.name, "kind", KindMCP, "server", server, "version", version, "tools", n, "status", StatusReady, "took", time.Since(start))
	select {
	case <-h.started: // a restart: its tools may differ from the last run's
		h.registerAll()
	default: // Start registers every source once all have started
	}
	return nil
}

// mcpNotStarted records why m did not start: standby for a missing setting
// or command, failed otherwise.
func (h *Host) mcpNotStarted(m *managed, err error) error {
	var unset *mcp.Unset
	if errors.As(err, &unset) {
		m.mu.Lock()
		m.status, m.reason = StatusStandby, oneLine(unset.Problem)
		m.mu.Unlock()
		h.log.Warn("MCP server on standby", "plugin", m.name, "reason", unset.Problem)
		return nil
	}
	m.fail(oneLine(err.Error()))
	return err
}

// serverEnv is a command server's whole environment: what every plugin gets
// to run (baseEnv: PATH, HOME, locale; not its MMCP_PLUGIN_ variables, which
// reach it only through its manifest's references) and the manifest's env.
func serverEnv(own []string, vars map[string]string) []string {
	var env []string
	for _, kv := range own {
		if !strings.HasPrefix(kv, "MMCP_PLUGIN_") {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k])
	}
	return env
}

func daemonVersion(env []string) string {
	v, _ := lookup(env, "MMCP_DAEMON_VERSION")
	return v
}

// describeMCP turns a server's tool list into a description like a plugin's
// Describe, and records which tools are refused alone: a name that is not
// usable, that two of its tools share once made mmcpd's, or a schema the
// union cannot take. The caller holds m.mu.
func (h *Host) describeMCP(m *managed, version string, tools []mcp.Tool) *pluginpb.DescribeResponse {
	man := m.mcp.manifest
	desc := &pluginpb.DescribeResponse{Name: m.name, Version: version}
	names := map[string]string{}
	invalid := map[string]string{}
	byName := map[string][]string{}
	for _, t := range tools {
		name := mcp.ToolName(m.name, t.Name)
		byName[name] = append(byName[name], t.Name)
		trusted := slices.Contains(man.Trusted, t.Name) || slices.Contains(man.Trusted, name)
		desc.Tools = append(desc.Tools, &pluginpb.Tool{Name: name, Description: t.Description, ArgsSchema: t.Schema, NeedsApproval: !t.ReadOnly && !trusted})
		names[name] = t.Name
		if err := schema.CheckName(name); err != nil {
			invalid[name] = fmt.Sprintf("refused: MCP tool %q becomes %s, not a usable name (%d characters; at most 64, starting with a letter)", t.Name, name, len(name))
			continue
		}
		if len(t.Schema) <= h.opts.Limits.SchemaBytes {
			if err := schema.CheckTool(schema.Tool{Name: name, Description: t.Description, Schema: t.Schema}); err != nil {
				invalid[name] = "refused: " + oneLine(err.Error())
			}
		}
	}
	for name, originals := range byName {
		if len(originals) > 1 {
			invalid[name] = fmt.Sprintf("refused: the server's tools %s all become %s; none of them is offered", strings.Join(originals, ", "), name)
			delete(names, name)
		}
	}
	// One entry per name: the duplicates are listed once, refused.
	desc.Tools = slices.CompactFunc(sortTools(desc.Tools), func(a, b *pluginpb.Tool) bool { return a.Name == b.Name })
	m.mcp.names, m.mcp.invalid = names, invalid
	return desc
}

func sortTools(ts []*pluginpb.Tool) []*pluginpb.Tool {
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	return ts
}

// mcpToolsChanged lists m's tools again after the server said they changed,
// and registers the new list.
func (h *Host) mcpToolsChanged(m *managed) {
	proc := m.alive()
	if proc == nil || proc.mcp == nil || h.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.opts.StartTimeout)
	defer cancel()
	tools, err := proc.mcp.Tools(ctx)
	if err != nil {
		h.log.Warn("MCP server said its tools changed, but listing them failed", "plugin", m.name, "reason", oneLine(err.Error()))
		return
	}
	m.mu.Lock()
	if m.proc != proc {
		m.mu.Unlock()
		return // restarted meanwhile; the new process was listed at start
	}
	m.desc = h.describeMCP(m, m.desc.GetVersion(), tools)
	m.offered, m.listedAt = m.desc.Tools, true
	n := len(m.desc.Tools)
	m.mu.Unlock()
	h.log.Info("MCP server tools changed", "plugin", m.name, "tools", n)
	h.registerAll()
}

// callMCP runs a tool of an MCP server. The deadline goes to the server as
// a cancellation when it passes; a server that then does not even answer a
// ping within the kill grace is wedged, and is killed and restarted on next
// use, as a plugin that ignores its deadline is.
func (h *Host) callMCP(ctx context.Context, e *toolEntry, args json.RawMessage) (string, error) {
	m := e.plugin
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	// A stopped server's start counts against the call's time.
	sctx, scancel := context.WithDeadline(ctx, deadline)
	proc, err := h.running(sctx, m)
	scancel()
	if err != nil {
		return "", err
	}
	defer h.release(m)
	m.mu.Lock()
	tool := m.mcp.names[e.tool.Name]
	m.mu.Unlock()
	if tool == "" {
		return "", fmt.Errorf("tool %s: MCP server %s no longer offers it", e.tool.Name, m.name)
	}
	limit := time.Until(deadline)
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	res, err := proc.mcp.Call(cctx, tool, args)
	switch {
	case err == nil:
		m.mu.Lock()
		m.backoff = 0 // it serves again: the next crash restarts at once
		m.mu.Unlock()
		if res.IsError {
			return "", &toolError{msg: oneLine(res.Text)}
		}
		return cutResult([]byte(res.Text)), nil
	case errors.Is(err, mcp.ErrTooLarge):
		h.crashed(m, proc, "stopped: "+err.Error())
		return "", fmt.Errorf("MCP server %s sent a message over the %d MiB limit during the call to %s; it was stopped and restarts on next use", m.name, mcp.MaxMessageBytes>>20, e.tool.Name)
	case errors.Is(ctx.Err(), context.Canceled):
		return "", ctx.Err()
	case cctx.Err() != nil:
		pctx, pcancel := context.WithTimeout(context.Background(), h.opts.KillGrace)
		perr := proc.mcp.Ping(pctx)
		pcancel()
		if perr != nil && !proc.exited() {
			h.log.Warn("MCP server did not answer a ping after a call's deadline; killing it", "plugin", m.name, "tool", e.tool.Name, "grace", h.opts.KillGrace)
			h.crashed(m, proc, "killed: it did not answer within its deadline plus "+h.opts.KillGrace.String())
			return "", fmt.Errorf("tool %s did not finish within %s; MCP server %s was stopped and restarts on next use", e.tool.Name, limit.Round(time.Millisecond), m.name)
		}
		return "", fmt.Errorf("tool %s did not finish within %s; the MCP server was told to cancel it", e.tool.Name, limit.Round(time.Millisecond))
	case errors.Is(err, mcp.ErrClosed) || proc.exited():
		h.crashed(m, proc, "exited during a call")
		return "", fmt.Errorf("MCP server %s exited during the call to %s; it will be restarted", m.name, e.tool.Name)
	}
	return "", fmt.Errorf("tool %s: MCP server error: %s", e.tool.Name, oneLine(err.Error()))
}

// mcpSettings lists the variables m's manifest refers to. Their values are
// never shown: a manifest puts tokens in headers and env alike.
func mcpSettings(m *managed) []SettingInfo {
	out := []SettingInfo{}
	if m.mcp.manifest == nil {
		return out
	}
	for _, v := range m.mcp.manifest.References() {
		val, ok := lookup(m.env, v)
		si := SettingInfo{Variable: v, Description: "referred to by " + filepath.Base(m.path), Required: true, Secret: true, Set: ok && val != ""}
		if si.Set {
			si.Value = Mask
		}
		out = append(out, si)
	}
	return out
}
