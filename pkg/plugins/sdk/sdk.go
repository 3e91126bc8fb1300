// Package sdk is what a plugin author imports. A plugin's main declares its
// settings, tools and context providers, then calls Serve:
//
//	func main() {
//		p := sdk.New("tmdb", "1.0.0")
//		var cfg struct {
//			APIKey string `split_words:"true" required:"true" secret:"true" desc:"TMDB API key"`
//		}
//		p.Settings(&cfg)
//		sdk.Tool(p, "tmdb_search", "Search TMDB for a film or show", search)
//		p.Context("now", "Current time", now)
//		p.Health(ping) // the cheapest call that proves TMDB takes the key
//		p.Serve()
//	}
//
// The SDK reflects each tool's argument schema from its Go type, reads the
// plugin's MMCP_PLUGIN_<SLUG>_* settings with envconfig, validates arguments
// again inside the plugin, bounds every call by its deadline, turns panics
// into tool errors, and serves the contract of pkg/plugins/proto through
// go-plugin. A mistake in the declarations (a bad tool name, a duplicate, an
// argument type that is not a struct) is a developer error: Serve prints it
// and exits 1 before the host sees anything.
package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/mmcpd/mmcpd/pkg/plugins"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/pkg/schema"
)

// Plugin collects what a plugin offers until Serve. Declare everything before
// Serve (or Server); it is not safe for concurrent declarations.
type Plugin struct {
	name, version string
	tools         []*tool
	contexts      []*provider
	health        func(ctx context.Context) error
	settings      settingsState
	errs          []error // declaration mistakes, reported by Serve
	log           hclog.Logger
	srv           *server
}

// tool is one declared tool, its schema compiled once for the plugin's own
// check of every call.
type tool struct {
	name, description string
	schema            json.RawMessage
	compiled          *schema.ArgsSchema
	needsApproval     bool
	changes           bool
	timeout           time.Duration
	run               func(ctx context.Context, args json.RawMessage) ([]byte, error)
}

type provider struct {
	key, description string
	fn               func(ctx context.Context) (string, error)
}

// pluginName is what may follow mmcp-plugin- in a file name: nothing that a
// shell, a path or a log line would treat specially.
var pluginName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// contextKey keeps provider keys as plain as tool names, since the host may
// show them in logs and use them as map keys in its settings.
var contextKey = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// init makes every plugin process non-dumpable before its main runs: a
// sibling plugin of the same user can then not read its settings through
// /proc/<pid>/environ or ptrace it. The kernel resets the flag at each exec,
// so only the process itself can set it, and the earlier the better.
func init() {
	if err := plugins.NotDumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "mmcp plugin: cannot make the process non-dumpable: %v\n", err)
	}
}

// New starts the declaration of a plugin. name must be the <name> of the
// binary's file name mmcp-plugin-<name>: the host matches them, and the
// plugin's settings are named after it.
func New(name, version string) *Plugin {
	p := &Plugin{
		name:    name,
		version: version,
		log: hclog.New(&hclog.LoggerOptions{
			Name: name,
			// The host forwards the plugin's stderr into its own log; warn
			// keeps go-plugin's per-connection chatter out of it.
			Level:      hclog.Warn,
			Output:     os.Stderr,
			JSONFormat: true, // lets the host keep each line's level
		}),
	}
	if !pluginName.MatchString(name) {
		p.fail(fmt.Errorf("plugin name %q must match %s", name, pluginName))
	}
	if version == "" {
		p.fail(fmt.Errorf("plugin %q: version is empty", name))
	}
	return p
}

func (p *Plugin) fail(err error) { p.errs = append(p.errs, err) }

// ToolOption changes how a tool is declared to the host.
type ToolOption func(*tool) error

// NeedsApproval makes the host ask the user before each call: for tools that
// change something outside (add a download, delete a file).
func NeedsApproval() ToolOption {
	return func(t *tool) error { t.needsApproval = true; return nil }
}

// Changes declares that the tool changes something (pauses a torrent, starts
// a search) without asking the user first: the host then never calls it
// again on its own after a transient failure, since the failed call may have
// acted. NeedsApproval implies it.
func Changes() ToolOption {
	return func(t *tool) error { t.changes = true; return nil }
}

// Transient marks err as one that may pass if the call is made again a
// little later (the service was unreachable, timed out, answered 429 or
// 5xx): the host calls a tool that changes nothing up to twice more before
// the model sees the error. Any error that has a Transient() bool method
// returning true counts the same (pkg/plugins/httpapi's do); Transient(nil)
// is nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return transientError{err}
}

type transientError struct{ error }

func (e transientError) Unwrap() error   { return e.error }
func (e transientError) Transient() bool { return true }

// IsTransient reports whether err, or an error it wraps, says it is
// transient.
func IsTransient(err error) bool {
	var t interface{ Transient() bool }
	return errors.As(err, &t) && t.Transient()
}

// Timeout is the tool's own time limit, for tools known to be slower or
// faster than the daemon's default. The host never waits longer than its own
// limit; the plugin also stops the call at d itself.
func Timeout(d time.Duration) ToolOption {
	return func(t *tool) error {
		if d <= 0 {
			return fmt.Errorf("timeout %v must be positive", d)
		}
		t.timeout = d
		return nil
	}
}

// Tool declares a tool whose arguments are the struct A and whose result R is
// sent as JSON (a string R is sent as plain text, a json.RawMessage as is).
// A's JSON Schema is reflected from its fields and their json and jsonschema
// tags, exactly as the daemon puts it in the model's reply schema; fields
// without omitempty are required.
//
// Tool is a function, not a method, because Go methods cannot have type
// parameters.
func Tool[A, R any](p *Plugin, name, description string, fn func(ctx context.Context, args A) (R, error), opts ...ToolOption) {
	var zero A
	s, err := schema.Reflect(zero)
	if err != nil {
		p.fail(fmt.Errorf("tool %q: %w", name, err)) // the error names the type
		return
	}
	if fn == nil {
		p.fail(fmt.Errorf("tool %q: function is nil", name))
		return
	}
	run := func(ctx context.Context, raw json.RawMessage) ([]byte, error) {
		var a A
		dec := json.NewDecoder(bytes.NewReader(raw))
		// The schema already refused unknown fields; this catches a schema
		// and a struct that disagree (a jsonschema tag that widened it).
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			return nil, fmt.Errorf("invalid arguments: %w", err)
		}
		r, err := fn(ctx, a)
		if err != nil {
			return nil, err
		}
		return encodeResult(r)
	}
	p.addTool(name, description, s, run, opts)
}

// encodeResult sends text as text: JSON-quoting a string result would only
// cost the model escaped newlines.
func encodeResult(r any) ([]byte, error) {
	switch v := r.(type) {
	case string:
		return []byte(v), nil
	case json.RawMessage:
		return v, nil
	}
	// Without HTML escaping: the model should read "Law & Order", not
	// "Law \u0026 Order".
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("result cannot be encoded as JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Method adapts a method of a plugin's client into a tool function. A
// service plugin builds its client from its settings once; when they cannot
// work, setupErr is what every call answers (the plugin is on standby too),
// and the method is never called.
func Method[C, A, R any](client C, setupErr error, fn func(C, context.Context, A) (R, error)) func(context.Context, A) (R, error) {
	return func(ctx context.Context, a A) (R, error) {
		if setupErr != nil {
			var zero R
			return zero, setupErr
		}
		return fn(client, ctx, a)
	}
}

// RawTool declares a tool by its JSON Schema, for bridges and generated tools
// that have no Go type for their arguments. fn gets the arguments as sent,
// already valid against argsSchema, and returns JSON or plain text.
func (p *Plugin) RawTool(name, description string, argsSchema json.RawMessage, fn func(ctx context.Context, args json.RawMessage) (json.RawMessage, error), opts ...ToolOption) {
	if fn == nil {
		p.fail(fmt.Errorf("tool %q: function is nil", name))
		return
	}
	run := func(ctx context.Context, raw json.RawMessage) ([]byte, error) {
		return fn(ctx, raw)
	}
	p.addTool(name, description, bytes.Clone(argsSchema), run, opts)
}

func (p *Plugin) addTool(name, description string, s json.RawMessage, run func(context.Context, json.RawMessage) ([]byte, error), opts []ToolOption) {
	// The host holds every tool to these rules; failing here tells the
	// author at build-and-run time instead of as a tool that never appears.
	if err := schema.CheckTool(schema.Tool{Name: name, Description: description, Schema: s}); err != nil {
		p.fail(err)
		return
	}
	for _, t := range p.tools {
		if t.name == name {
			p.fail(fmt.Errorf("tool %q: declared twice", name))
			return
		}
	}
	compiled, err := schema.CompileArgs(schema.Tool{Name: name, Description: description, Schema: s})
	if err != nil {
		p.fail(err)
		return
	}
	t := &tool{name: name, description: description, schema: s, compiled: compiled, run: run}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(t); err != nil {
			p.fail(fmt.Errorf("tool %q: %w", name, err))
			return
		}
	}
	p.tools = append(p.tools, t)
}

// Context declares a context provider: a short piece of live state (the time,
// what is downloading) that the host puts in the model's system prompt each
// turn. Keep it fast and short; the host gives it little time.
func (p *Plugin) Context(key, description string, fn func(ctx context.Context) (string, error)) {
	switch {
	case !contextKey.MatchString(key):
		p.fail(fmt.Errorf("context key %q must match %s", key, contextKey))
		return
	case fn == nil:
		p.fail(fmt.Errorf("context %q: function is nil", key))
		return
	}
	for _, c := range p.contexts {
		if c.key == key {
			p.fail(fmt.Errorf("context %q: declared twice", key))
			return
		}
	}
	p.contexts = append(p.contexts, &provider{key: key, description: description, fn: fn})
}

// Server returns the plugin's implementation of the contract, for tests and
// for hosts that serve it themselves. It panics on a declaration mistake, as
// Serve exits on one: both are developer errors.
func (p *Plugin) Server() pluginpb.PluginServer {
	s, err := p.build()
	if err != nil {
		panic(err)
	}
	return s
}

// build freezes the declarations into the server, once.
func (p *Plugin) build() (*server, error) {
	if len(p.errs) > 0 {
		return nil, fmt.Errorf("plugin %q: %w", p.name, errors.Join(p.errs...))
	}
	if p.srv == nil {
		p.srv = newServer(p)
	}
	return p.srv, nil
}

// Serve serves the plugin to the host that started it and returns when the
// host is done with it. Started by hand (not by mmcpd), it says so and exits.
// A declaration mistake is printed to stderr and exits 1.
func (p *Plugin) Serve() {
	s, err := p.build()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mmcp-plugin-%s: %v\n", p.name, err)
		os.Exit(1)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: plugins.Handshake,
		Plugins:         plugin.PluginSet{plugins.PluginName: &plugins.GRPCPlugin{Impl: s}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			// gRPC's default 4 MiB would refuse a full-size result before
			// the SDK could cut it.
			return plugin.DefaultGRPCServer(append(opts,
				grpc.MaxRecvMsgSize(plugins.MaxMessageBytes),
				grpc.MaxSendMsgSize(plugins.MaxMessageBytes),
			))
		},
		Logger: p.log,
	})
}
