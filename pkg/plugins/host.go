package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mmcpd/mmcpd/pkg/breaker"
	"github.com/mmcpd/mmcpd/pkg/loop"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// Options configure a Host.
type Options struct {
	Dir          string        // the plugins folder
	Environ      []string      // the daemon's environment, as os.Environ
	StartTimeout time.Duration // start, handshake and Describe of one plugin
	KillGrace    time.Duration // how long a plugin has to answer after a call's deadline
	Breakers     *breaker.Set
	Context      ContextOptions
	Log          *slog.Logger
	// User is the user plugins run as, by name or uid; empty runs them as
	// the daemon's own user. Switching users needs root.
	User string
	// NoPIDNamespace starts plugins without a pid namespace of their own
	// even where the kernel allows one.
	NoPIDNamespace bool
	Limits         ToolLimits
	// Probe schedules the health probes; zero fields take the defaults.
	Probe ProbeOptions
	// Idle stops a plugin that no call used for this long; it starts again
	// on its next use (see idle.go). Zero keeps every plugin running.
	Idle time.Duration
	// CacheFile keeps the plugins' descriptions between runs (see
	// cache.go); empty describes every plugin at every start.
	CacheFile string
}

// ToolLimits bound what plugins may declare. Every tool's description and
// schema is in every prompt: one oversized tool, or a thousand, would crowd
// the conversation out of the model's view.
type ToolLimits struct {
	Tools            int // usable tools in all; those past it, in plugin name order, are refused
	DescriptionChars int // one tool's description
	SchemaBytes      int // one tool's argument schema, as JSON
}

// DefaultToolLimits leave room for several times the bundled plugins' 21
// tools, whose descriptions stay under 400 characters and schemas under 2 KiB.
var DefaultToolLimits = ToolLimits{Tools: 64, DescriptionChars: 1000, SchemaBytes: 8 << 10}

// Plugin statuses.
const (
	StatusStarting   = "starting"
	StatusReady      = "ready"
	StatusStandby    = "standby"    // running, but a setting is missing or invalid
	StatusFailed     = "failed"     // could not start, or described itself wrongly
	StatusRestarting = "restarting" // exited; started again on next use
	// StatusUnreachable: running, but its health probe says the service
	// behind it does not answer, or refuses its credentials.
	StatusUnreachable = "unreachable"
)

// Host runs the plugins and is the daemon's loop.Tools. Safe for concurrent
// use.
type Host struct {
	opts Options
	log  *slog.Logger

	mu          sync.RWMutex
	plugins     []*managed            // sorted by name
	tools       map[string]*toolEntry // by tool name
	started     chan struct{}         // closed when every plugin has been started once
	registering sync.Mutex            // one registerAll at a time
	startCalled atomic.Bool           // Start was called
	closed      bool

	cache   *describeCache
	cred    *syscall.Credential // the plugin user, nil for the daemon's own
	noPIDNS atomic.Bool         // the kernel refused a pid namespace once

	// Background probes run under ctx; Close cancels it and waits for them.
	ctx     context.Context
	cancel  context.CancelFunc
	probing sync.WaitGroup
}

type toolEntry struct {
	plugin *managed // the first plugin that declares it
	spec   *pluginpb.Tool
	tool   schema.Tool
	// needsApproval is fixed at registration, from every declaration of
	// the name: a plugin restarted with another description cannot lower it.
	needsApproval bool
	clash         []string // the plugins that all declare this name: it runs from none
}

// managed is one tool source, a plugin binary or an MCP server (mcp is set),
// and its current process.
type managed struct {
	name, path string
	env        []string
	mcp        *mcpServer

	mu        sync.Mutex
	proc      *process
	desc      *pluginpb.DescribeResponse
	status    string
	reason    string
	restarts  int
	backoff   time.Duration
	nextStart time.Time
	providers map[string]*provider
	refused   map[string]string // tools refused alone, with why; set by registerAll
	probe     probeState

	flight    *startFlight // the start in progress that callers wait for
	inUse     int          // calls and context providers running now
	lastUse   time.Time
	idleTimer *time.Timer

	// offered is what registerAll registers: a plugin binary's tools from
	// its first start (a plugin restarted with other tools does not change
	// the union under a running daemon), an MCP server's latest list.
	offered  []*pluginpb.Tool
	listedAt bool // offered has been set
}

// New finds the plugins in opts.Dir; Start starts them.
func New(opts Options) (*Host, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Context == (ContextOptions{}) {
		opts.Context = DefaultContextOptions
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = 2 * time.Second
	}
	if opts.Limits == (ToolLimits{}) {
		opts.Limits = DefaultToolLimits
	}
	opts.Probe = opts.Probe.withDefaults()
	if opts.Breakers == nil {
		opts.Breakers = breaker.New(breaker.Settings{Failures: 5, Cooldown: 30 * time.Second}, IsToolError, opts.Log)
	}
	paths, err := Discover(opts.Dir)
	if err != nil {
		return nil, err
	}
	servers, err := discoverMCP(opts.Dir)
	if err != nil {
		return nil, err
	}
	for p := range servers {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool { return sourceName(paths[i]) < sourceName(paths[j]) })
	h := &Host{opts: opts, log: opts.Log, tools: map[string]*toolEntry{}, started: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.noPIDNS.Store(opts.NoPIDNamespace)
	h.cache = openCache(opts.CacheFile, opts.Log)
	if opts.User != "" {
		if h.cred, err = credential(opts.User); err != nil {
			return nil, err
		}
		switch {
		case int(h.cred.Uid) == os.Geteuid():
			h.cred = nil // already that user
		case os.Geteuid() != 0:
			return nil, fmt.Errorf("plugin user %q (MMCP_PLUGINS_USER): only root can start plugins as another user", opts.User)
		}
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = sourceName(p)
	}
	envs := PluginEnv(opts.Environ, names)
	bySlug := map[string]string{}
	for i, p := range paths {
		m := &managed{name: names[i], path: p, env: envs[names[i]], status: StatusStarting, mcp: servers[p]}
		if m.mcp != nil && m.mcp.manifest == nil {
			m.status, m.reason = StatusFailed, m.mcp.invalidManifest
			h.log.Error("MCP server skipped", "plugin", m.name, "path", p, "reason", m.reason)
		}
		// web-search and web_search would read the same variables: the
		// second could see the first one's secrets.
		if other, ok := bySlug[Slug(m.name)]; ok {
			m.status, m.reason, m.env = StatusFailed, fmt.Sprintf("its settings prefix %s is plugin %s's too; rename one of them", EnvPrefix(m.name), other), nil
			h.log.Error("plugin skipped", "plugin", m.name, "path", p, "reason", m.reason)
		}
		bySlug[Slug(m.name)] = m.name
		h.plugins = append(h.plugins, m)
	}
	return h, nil
}

// Start starts every plugin concurrently, probes those that declare a health
// probe, and registers their tools, in name order so that a clash between two
// plugins always resolves the same way. It returns when all have started or
// failed; a plugin that fails is logged and skipped.
func (h *Host) Start(ctx context.Context) {
	h.startCalled.Store(true)
	defer close(h.started)
	if h.isClosed() {
		return
	}
	var wg sync.WaitGroup
	for _, m := range h.plugins {
		if m.status == StatusFailed {
			continue
		}
		wg.Add(1) // plugins and MCP servers alike, all at once
		go func() {
			defer wg.Done()
			if h.fromCache(m) {
				return // started on first use
			}
			if err := h.startPlugin(ctx, m); err != nil {
				h.log.Error("plugin skipped", "plugin", m.name, "path", m.path, "reason", err.Error())
				return
			}
			// Before registration: the first turn should not be offered
			// the tools of a service that is not there.
			h.probe(ctx, m)
		}()
	}
	wg.Wait()
	h.registerAll()
}

// Started is closed once Start has finished.
func (h *Host) Started() <-chan struct{} { return h.started }

// startPlugin starts m's process and reads its description. The caller must
// not hold m.mu.
func (h *Host) startPlugin(ctx context.Context, m *managed) error {
	if m.mcp != nil {
		return h.startMCP(ctx, m)
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.StartTimeout)
	defer cancel()
	start := time.Now()
	// Taken before the start: a binary replaced meanwhile is described
	// again next time rather than cached under the new file's identity.
	identity := fileIdentity(m.path)
	onExit := func(p *process) {
		// Noticed at once, not on the next call: the API and the context
		// providers should not take a dead plugin for a ready one.
		if !h.isClosed() {
			h.crashed(m, p, "exited")
		}
	}
	pidns := !h.noPIDNS.Load()
	proc, err := launch(ctx, m.path, m.env, spawn{cred: h.cred, pidns: pidns}, h.opts.StartTimeout, h.log, onExit)
	if pidns && errors.Is(err, errNamespace) {
		if h.noPIDNS.CompareAndSwap(false, true) {
			h.log.Warn("plugins run without a pid namespace of their own: a child a plugin detaches with setsid can outlive it", "reason", err.Error())
		}
		proc, err = launch(ctx, m.path, m.env, spawn{cred: h.cred}, h.opts.StartTimeout, h.log, onExit)
	}
	if err != nil {
		m.fail(err.Error())
		return err
	}
	desc, err := proc.rpc.Describe(ctx, &pluginpb.DescribeRequest{})
	if err != nil {
		proc.kill()
		err = fmt.Errorf("describe: %s", oneLine(status.Convert(err).Message()))
		m.fail(err.Error())
		return err
	}
	if err := checkDescription(m.name, desc, h.opts.Limits); err != nil {
		proc.kill()
		m.fail(err.Error())
		return err
	}
	m.mu.Lock()
	if h.isClosed() { // Close has run and would never stop this one
		m.mu.Unlock()
		proc.kill()
		return fmt.Errorf("plugin %s: the daemon is shutting down", m.name)
	}
	m.proc, m.desc = proc, desc
	if !m.listedAt {
		m.offered, m.listedAt = desc.Tools, true
	}
	m.status, m.reason = StatusReady, ""
	// A new process: what an earlier one answered no longer holds, and the
	// next listing probes it again.
	m.probe.has, m.probe.at, m.probe.backoff = desc.HasHealth, time.Time{}, 0
	if problems := settingProblems(m.name, desc, m.env); len(problems) > 0 {
		m.status, m.reason = StatusStandby, joinProblems(problems)
	}
	if m.providers == nil {
		m.providers = map[string]*provider{}
		for _, c := range desc.Contexts {
			m.providers[c.Key] = &provider{}
		}
	}
	st, reason := m.status, m.reason
	var exit *process
	switch {
	case h.opts.Idle <= 0:
	case st == StatusStandby:
		// It cannot work until its settings change, which takes a
		// restart: no process meanwhile.
		exit, m.proc = proc, nil
	default:
		m.lastUse = time.Now()
		h.armIdleLocked(m)
	}
	m.mu.Unlock()
	h.cache.put(m.path, identity, m.env, m.name, desc)
	h.log.Info("plugin started", "plugin", m.name, "version", desc.Version, "tools", len(desc.Tools), "status", st, "reason", reason, "took", time.Since(start))
	if exit != nil {
		exit.stop(h.opts.KillGrace)
		h.log.Info("plugin stopped: on standby", "plugin", m.name)
	}
	return nil
}

func joinProblems(problems []string) string { return strings.Join(problems, "; ") }

func (m *managed) fail(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.reason = StatusFailed, reason
}

// checkDescription refuses a plugin that names itself differently from its
// file (its settings would be read under the wrong slug). A tool that could
// not join a union is refused alone, at registration (see unusable).
func checkDescription(name string, d *pluginpb.DescribeResponse, limits ToolLimits) error {
	if d.Name != name {
		return fmt.Errorf("plugin file mmcp-plugin-%s describes itself as %q; the names must match", name, d.Name)
	}
	return nil
}

// unusable says why t cannot be offered to the model, or "": too large, or
// a name or schema no union takes. One such tool never costs its plugin's
// others.
func unusable(t *pluginpb.Tool, limits ToolLimits) string {
	if n := utf8.RuneCountInString(t.Description); n > limits.DescriptionChars {
		return fmt.Sprintf("refused: its description has %d characters, over the limit of %d (MMCP_TOOL_MAX_DESCRIPTION_CHARS)", n, limits.DescriptionChars)
	}
	if n := len(t.ArgsSchema); n > limits.SchemaBytes {
		return fmt.Sprintf("refused: its argument schema has %d bytes, over the limit of %d (MMCP_TOOL_MAX_SCHEMA_BYTES)", n, limits.SchemaBytes)
	}
	if err := schema.CheckTool(schema.Tool{Name: t.Name, Description: t.Description, Schema: t.ArgsSchema}); err != nil {
		return "refused: " + oneLine(err.Error())
	}
	return ""
}

// settingProblems lists what keeps a plugin on standby: required settings
// its environment lacks, and the problems the plugin reported itself.
func settingProblems(name string, d *pluginpb.DescribeResponse, env []string) []string {
	var out []string
	for _, s := range d.Settings {
		if !s.Required {
			continue
		}
		key := EnvPrefix(name) + s.Key
		if v, ok := lookup(env, key); !ok || v == "" {
			out = append(out, key+" is required")
		}
	}
	for _, p := range d.SettingProblems {
		if p = oneLine(p); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func lookup(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// registerAll adds every started plugin's tools. A name that two plugins
// declare is usable from neither: which one is genuine cannot be told from
// here, and letting either win would let a plugin take over another's tool,
// and drop the approval the genuine one asks for.
//
// It runs again when an MCP server's tools change; a name that needed the
// user's approval keeps needing it.
func (h *Host) registerAll() {
	h.registering.Lock()
	defer h.registering.Unlock()
	claims := map[string][]*managed{}
	specs := map[string][]*pluginpb.Tool{}
	var names []string
	for _, m := range h.plugins {
		m.mu.Lock()
		offered, listed := m.offered, m.listedAt
		var invalid map[string]string
		if m.mcp != nil {
			invalid = m.mcp.invalid
		}
		m.mu.Unlock()
		if !listed {
			continue
		}
		refused := map[string]string{}
		for _, t := range offered {
			why := invalid[t.Name]
			if why == "" {
				why = unusable(t, h.opts.Limits)
			}
			if why != "" {
				refused[t.Name] = why
				h.log.Error("tool refused", "tool", t.Name, "plugin", m.name, "reason", why)
				continue
			}
			if slices.Contains(claims[t.Name], m) {
				continue
			}
			if len(claims[t.Name]) == 0 {
				names = append(names, t.Name)
			}
			claims[t.Name] = append(claims[t.Name], m)
			specs[t.Name] = append(specs[t.Name], t)
		}
		m.mu.Lock()
		m.refused = refused
		m.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	previous := h.tools
	h.tools = make(map[string]*toolEntry, len(names))
	usable := 0
	for _, name := range names {
		owners, ts := claims[name], specs[name]
		t := ts[0]
		e := &toolEntry{plugin: owners[0], spec: t, tool: schema.Tool{Name: t.Name, Description: t.Description, Schema: t.ArgsSchema}}
		for _, other := range ts {
			e.needsApproval = e.needsApproval || other.NeedsApproval
		}
		if p := previous[name]; p != nil {
			e.needsApproval = e.needsApproval || p.needsApproval
		}
		if len(owners) > 1 {
			for _, m := range owners {
				e.clash = append(e.clash, m.name)
			}
			h.log.Error("tool refused: more than one plugin declares it", "tool", name, "plugins", strings.Join(e.clash, ","))
		} else if usable++; usable > h.opts.Limits.Tools {
			why := fmt.Sprintf("refused: the daemon already offers %d tools, its limit (MMCP_TOOLS_MAX)", h.opts.Limits.Tools)
			owners[0].mu.Lock()
			owners[0].refused[name] = why
			owners[0].mu.Unlock()
			h.log.Error("tool refused", "tool", name, "plugin", owners[0].name, "reason", why)
			continue
		}
		h.tools[name] = e
	}
}

// Tools implements loop.Tools: every registered tool, with why it cannot be
// used now where it cannot. Listing them probes again, aside, the plugins
// whose last health answer is stale (see ProbeOptions).
func (h *Host) Tools() []loop.Tool {
	h.mu.RLock()
	out := make([]loop.Tool, 0, len(h.tools))
	var listed []*managed
	for _, e := range h.tools {
		kind := KindPlugin
		if e.plugin.mcp != nil {
			kind = KindMCP
		}
		out = append(out, loop.Tool{Tool: e.tool, NeedsApproval: e.needsApproval, Changes: e.spec.GetChanges(), Disabled: h.disabled(e), Kind: kind})
		if len(e.clash) <= 1 && !slices.Contains(listed, e.plugin) {
			listed = append(listed, e.plugin)
		}
	}
	h.mu.RUnlock()
	for _, m := range listed {
		h.probeIfStale(m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// disabled says why a tool cannot be used now, or "".
func (h *Host) disabled(e *toolEntry) string {
	if len(e.clash) > 1 {
		return clashReason(e.tool.Name, e.clash)
	}
	m := e.plugin
	m.mu.Lock()
	st, reason, next := m.status, m.reason, m.nextStart
	m.mu.Unlock()
	switch st {
	case StatusStandby:
		return "plugin " + m.name + " is on standby: " + reason
	case StatusFailed:
		return "plugin " + m.name + " failed: " + reason
	case StatusUnreachable:
		return unreachableReason(m.name, reason)
	}
	if open, why := h.opts.Breakers.Open(e.tool.Name); open {
		return why
	}
	if d := time.Until(next); st == StatusRestarting && d > 0 {
		return fmt.Sprintf("plugin %s crashed and restarts in %s", m.name, d.Round(time.Second))
	}
	return ""
}

// clashReason says why a tool that several plugins declare is refused.
func clashReason(tool string, plugins []string) string {
	list, all := strings.Join(plugins[:len(plugins)-1], ", ")+" and "+plugins[len(plugins)-1], "all"
	if len(plugins) == 2 {
		all = "both"
	}
	return fmt.Sprintf("refused: plugins %s %s declare a tool named %s; remove or rename one of them", list, all, tool)
}

// toolError is an error the tool itself reported: a result, not a failure of
// the plugin, so the breaker does not count it.
type toolError struct {
	msg       string
	transient bool // the plugin says a later call may succeed
}

func (e *toolError) Error() string { return e.msg }

// timeoutError is a call that ran out of its time. It says so with
// Timeout(), as net.Error does, because the plugin honours the deadline it
// was given and may give up a moment before the caller's own context
// notices: the caller cannot tell from its context alone.
type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (e timeoutError) Timeout() bool { return true }

// Transient implements loop.Transient: the loop calls a read-only tool again
// after such an error.
func (e *toolError) Transient() bool { return e.transient }

// IsToolError reports whether err is an error a tool returned on purpose.
func IsToolError(err error) bool {
	var te *toolError
	return errors.As(err, &te)
}

// Call implements loop.Tools. ctx's deadline bounds the call; the tool's own
// shorter timeout applies if it has one.
func (h *Host) Call(ctx context.Context, name string, args json.RawMessage) (string, error) {
	h.mu.RLock()
	e, ok := h.tools[name]
	h.mu.RUnlock()
	if !ok {
		return "", fmt.Errorf("no tool named %s", name)
	}
	// A call still reaches an unreachable plugin (an action the user
	// approved before the probe failed, say): it is the freshest probe there
	// is, and its success makes the plugin ready again.
	if why := h.disabled(e); why != "" && !strings.HasPrefix(why, breaker.ErrOpen.Error()) && !e.plugin.unreachable() {
		return "", fmt.Errorf("tool %s cannot run: %s", name, why)
	}
	return h.opts.Breakers.Execute(name, func() (string, error) {
		return h.call(ctx, e, args)
	})
}

func (h *Host) call(ctx context.Context, e *toolEntry, args json.RawMessage) (string, error) {
	m := e.plugin
	if m.mcp != nil {
		return h.callMCP(ctx, e, args)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	if t := time.Duration(e.spec.TimeoutMs) * time.Millisecond; t > 0 && time.Now().Add(t).Before(deadline) {
		deadline = time.Now().Add(t)
	}
	// A stopped plugin's start counts against the tool's time.
	sctx, scancel := context.WithDeadline(ctx, deadline)
	proc, err := h.running(sctx, m)
	scancel()
	if err != nil {
		return "", err
	}
	defer h.release(m)
	limit := time.Until(deadline)
	// The plugin gets the deadline; the host waits a grace period longer, so
	// that a plugin that honours it answers on its own. One that does not is
	// wedged, and is killed. The caller's cancellation still goes through.
	rpcCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(h.opts.KillGrace))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	defer stop()

	resp, err := proc.rpc.Call(rpcCtx, &pluginpb.CallRequest{
		Tool:           e.tool.Name,
		Args:           args,
		TraceId:        trace.ID(ctx),
		TimeoutMs:      max(limit.Milliseconds(), 1),
		MaxResultBytes: MaxResultBytes,
	})
	if err == nil {
		m.mu.Lock()
		m.backoff = 0 // it serves again: the next crash restarts at once
		m.mu.Unlock()
		if resp.Error != "" {
			// Not proof either way: "not found" came from the service,
			// "cannot reach it" from the plugin alone.
			return "", &toolError{msg: oneLine(resp.Error), transient: resp.GetTransient()}
		}
		h.reachable(m, "call")
		return cutResult(resp.Result), nil
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return "", ctx.Err()
	}
	code := status.Code(err)
	switch {
	case rpcCtx.Err() != nil:
		h.log.Warn("plugin did not answer after its deadline; killing it", "plugin", m.name, "tool", e.tool.Name, "grace", h.opts.KillGrace)
		h.crashed(m, proc, "killed: it did not answer within its deadline plus "+h.opts.KillGrace.String())
		return "", timeoutError(fmt.Sprintf("tool %s did not finish within %s; plugin %s was stopped and restarts on next use", e.tool.Name, limit.Round(time.Millisecond), m.name))
	case code == codes.DeadlineExceeded || code == codes.Canceled:
		return "", timeoutError(fmt.Sprintf("tool %s did not finish within %s", e.tool.Name, limit.Round(time.Millisecond)))
	case code == codes.ResourceExhausted:
		return "", fmt.Errorf("tool %s returned more than %d bytes; the result was dropped", e.tool.Name, MaxMessageBytes)
	case code == codes.Unavailable || proc.exited():
		h.crashed(m, proc, "exited during a call")
		return "", fmt.Errorf("plugin %s exited during the call to %s; it will be restarted", m.name, e.tool.Name)
	}
	return "", fmt.Errorf("tool %s: plugin error: %s", e.tool.Name, oneLine(status.Convert(err).Message()))
}

func (h *Host) isClosed() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.closed
}

// Starting lists the plugins whose tools are not registered yet: all of them
// until Start has finished.
func (h *Host) Starting() []string {
	select {
	case <-h.started:
		return nil
	default:
	}
	names := make([]string, len(h.plugins))
	for i, m := range h.plugins {
		names[i] = m.name
	}
	return names
}

// unreachable reports whether m's last health probe failed.
func (m *managed) unreachable() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status == StatusUnreachable
}

// alive returns m's process if it is running.
func (m *managed) alive() *process {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil && !m.proc.exited() {
		return m.proc
	}
	return nil
}

// crashed records that proc stopped serving and kills what is left of it.
func (h *Host) crashed(m *managed, proc *process, why string) {
	proc.kill()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == proc {
		h.markCrashedLocked(m, why)
	}
}

func (h *Host) markCrashedLocked(m *managed, why string) {
	m.proc = nil
	m.status, m.reason = StatusRestarting, why
	switch {
	case m.backoff == 0:
		m.backoff = time.Second
	case m.backoff < time.Minute:
		m.backoff *= 2
	}
	// The first restart is immediate: one crash is worth one fresh try.
	if m.backoff > time.Second {
		m.nextStart = time.Now().Add(m.backoff / 2)
	}
	h.log.Warn("plugin stopped", "plugin", m.name, "reason", why, "restarts", m.restarts)
}

// cutResult bounds a result to MaxResultBytes, at a character boundary.
func cutResult(b []byte) string {
	if len(b) <= MaxResultBytes {
		return string(b)
	}
	return strings.ToValidUTF8(string(b[:MaxResultBytes]), "") + fmt.Sprintf("\n[... cut: result was %d bytes]", len(b))
}

// Close stops every plugin: politely, then by force.
func (h *Host) Close() {
	if h.startCalled.Load() {
		<-h.started // a plugin still starting would be missed below
	}
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.stopProbes()
	h.stopIdleTimers()
	var wg sync.WaitGroup
	for _, m := range h.plugins {
		m.mu.Lock()
		proc := m.proc
		m.proc = nil
		m.mu.Unlock()
		if proc != nil {
			wg.Add(1)
			go func() { defer wg.Done(); proc.stop(2 * time.Second) }()
		}
	}
	wg.Wait()
}
