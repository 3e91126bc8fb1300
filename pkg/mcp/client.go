package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// protocolVersion is the version mmcpd asks for. The SDK's default, the
// stateless 2026-07-28 draft, costs a failed server/discover round trip with
// every server published today; the server still negotiates down if it must.
const protocolVersion = "2025-11-25"

// Options say how to start or reach one server.
type Options struct {
	Name     string
	Manifest *Manifest
	// Env is the whole environment of a command server: nothing of the
	// daemon's reaches it but what is listed here.
	Env []string
	// Headers are the resolved headers sent to a URL server.
	Headers map[string]string
	// Dir is where a command runs, and what a relative command path is
	// relative to.
	Dir string
	// Prepare sets how the command's process starts (user, process group,
	// parent-death signal); called before it starts.
	Prepare func(*exec.Cmd)
	Stderr  io.Writer
	// Grace is how long a command has to exit once its stdin is closed.
	Grace time.Duration
	// ToolsChanged is called, on its own goroutine, when the server says
	// its tool list changed.
	ToolsChanged func()
	Version      string // mmcpd's, sent as the client's
	Log          *slog.Logger
}

// Conn is one live session with a server.
type Conn struct {
	session *sdk.ClientSession
	cmd     *exec.Cmd
	wire    *tripwire
	done    chan struct{}
	closing sync.Once
}

// Connect starts the server (command) or reaches it (url) and completes the
// MCP handshake; ctx bounds both.
func Connect(ctx context.Context, o Options) (*Conn, error) {
	m := o.Manifest
	var transport sdk.Transport
	var cmd *exec.Cmd
	wire := newTripwire()
	if m.Command != "" {
		path, err := command(m.Command, o.Dir, o.Env)
		if err != nil {
			return nil, err
		}
		cmd = exec.Command(path, m.Args...)
		cmd.Env, cmd.Dir, cmd.Stderr = o.Env, o.Dir, o.Stderr
		if o.Prepare != nil {
			o.Prepare(cmd)
		}
		transport = &commandTransport{cmd: cmd, grace: o.Grace, wire: wire}
	} else {
		transport = &sdk.StreamableClientTransport{
			Endpoint:   m.URL,
			HTTPClient: &http.Client{Transport: &withHeaders{headers: o.Headers, next: &limitedBodies{wire: wire, next: http.DefaultTransport}}},
			MaxRetries: 2,
			// Ours, in limitedBodies, is lower and says why.
			MaxEventSize: -1,
		}
	}
	var changed func(context.Context, *sdk.ToolListChangedRequest)
	if o.ToolsChanged != nil {
		changed = func(context.Context, *sdk.ToolListChangedRequest) { go o.ToolsChanged() }
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "mmcpd", Version: o.Version}, &sdk.ClientOptions{
		ToolListChangedHandler: changed,
		Logger:                 log.With("mcp_server", o.Name),
	})
	session, err := client.Connect(ctx, transport, &sdk.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Kill()
			go func() { _ = cmd.Wait() }() // reap it; the SDK may have already
		}
		if wire.isTripped() {
			err = ErrTooLarge
		}
		return nil, fmt.Errorf("connecting to MCP server %s: %w", o.Name, err)
	}
	c := &Conn{session: session, cmd: cmd, wire: wire, done: make(chan struct{})}
	go func() {
		// Returns when the server closes the session: the command exited,
		// or the HTTP session ended.
		_ = session.Wait()
		close(c.done)
	}()
	return c, nil
}

// command finds the server's program: a bare name in the server's own PATH,
// a relative path in dir.
func command(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		if _, err := exec.LookPath(name); err != nil {
			return "", &Unset{Problem: fmt.Sprintf("command %s cannot be run: %v", name, errors.Unwrap(err))}
		}
		return name, nil
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" || !filepath.IsAbs(d) {
			continue // a relative PATH entry would depend on the daemon's folder
		}
		if p, err := exec.LookPath(filepath.Join(d, name)); err == nil {
			return p, nil
		}
	}
	return "", &Unset{Problem: fmt.Sprintf("command %q is not installed (not found in PATH=%s)", name, pathEnv)}
}

type withHeaders struct {
	headers map[string]string
	next    http.RoundTripper
}

func (t *withHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	return t.next.RoundTrip(r)
}

// Pid is the command's process id; 0 for a URL server.
func (c *Conn) Pid() int {
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Server names the server and its version, as it introduced itself.
func (c *Conn) Server() (name, version string) {
	if r := c.session.InitializeResult(); r != nil && r.ServerInfo != nil {
		return r.ServerInfo.Name, r.ServerInfo.Version
	}
	return "", ""
}

// Done is closed when the session has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// TooLarge reports whether the session ended because the server sent a
// message over MaxMessageBytes.
func (c *Conn) TooLarge() bool { return c.wire.isTripped() }

// limited turns an error caused by the message limit into ErrTooLarge: the
// SDK's own wording of a failed read does not say which limit.
func (c *Conn) limited(err error) error {
	if err != nil && c.wire.isTripped() {
		return ErrTooLarge
	}
	return err
}

// Close ends the session; a command gets its stdin closed and Grace to exit
// before it is signalled.
func (c *Conn) Close() {
	c.closing.Do(func() { _ = c.session.Close() })
}

// Ping asks the server for a sign of life.
func (c *Conn) Ping(ctx context.Context) error {
	return c.limited(c.session.Ping(ctx, nil))
}

// Tool is one tool a server offers.
type Tool struct {
	Name        string          // the server's name for it
	Description string          // description, or the title when there is none
	Schema      json.RawMessage // the arguments' JSON Schema, without $schema
	ReadOnly    bool            // its annotations say readOnlyHint: true
}

// maxPages bounds a paginated tool list: a server that hands out cursors
// forever must not hold the daemon.
const maxPages = 100

// Tools lists the server's tools, every page.
func (c *Conn) Tools(ctx context.Context) ([]Tool, error) {
	var out []Tool
	cursor := ""
	for range maxPages {
		res, err := c.session.ListTools(ctx, &sdk.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("listing tools: %w", c.limited(err))
		}
		for _, t := range res.Tools {
			tool, err := convertTool(t)
			if err != nil {
				return nil, err
			}
			out = append(out, tool)
		}
		if cursor = res.NextCursor; cursor == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("listing tools: still more after %d pages", maxPages)
}

func convertTool(t *sdk.Tool) (Tool, error) {
	out := Tool{Name: t.Name, Description: t.Description}
	if out.Description == "" {
		out.Description = t.Title
	}
	if t.Annotations != nil {
		out.ReadOnly = t.Annotations.ReadOnlyHint
		if out.Description == "" {
			out.Description = t.Annotations.Title
		}
	}
	in := t.InputSchema
	if obj, ok := in.(map[string]any); ok {
		// The union embeds the schema as a subschema, where a $schema
		// naming another draft means nothing and confuses the validator.
		delete(obj, "$schema")
	}
	b, err := json.Marshal(in)
	if err != nil {
		return Tool{}, fmt.Errorf("tool %s: its input schema: %w", t.Name, err)
	}
	out.Schema = b
	return out, nil
}

// ErrClosed is returned when the session ended before the call did: the
// server exited or the connection broke.
var ErrClosed = sdk.ErrConnectionClosed

// Result is what a call returned.
type Result struct {
	Text    string // the observation: see Observation
	IsError bool   // the tool reported a failure
}

// Call runs a tool. ctx's cancellation or deadline is sent to the server as
// notifications/cancelled, and Call returns ctx's error at once.
func (c *Conn) Call(ctx context.Context, tool string, args json.RawMessage) (Result, error) {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	res, err := c.session.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		if c.wire.isTripped() {
			return Result{}, ErrTooLarge
		}
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		// A command that exits mid-call shows as EOF on its stdout,
		// possibly before the session notices it has ended.
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, sdk.ErrConnectionClosed) {
			return Result{}, fmt.Errorf("%w: %v", ErrClosed, err)
		}
		select {
		case <-c.done:
			return Result{}, fmt.Errorf("%w: %v", ErrClosed, err)
		default:
		}
		return Result{}, fmt.Errorf("calling %s: %w", tool, err)
	}
	return Result{Text: Observation(res), IsError: res.IsError}, nil
}

// Observation turns a result into the text the model reads: text as it is,
// structured content as JSON (unless a text block already carries the same
// JSON, as servers are asked to), and every other kind of content described
// by its type, media type and size, so that nothing the tool returned goes
// missing without a word.
func Observation(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		parts = append(parts, describe(c))
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil && !carriesJSON(parts, b) {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}

func describe(c sdk.Content) string {
	switch c := c.(type) {
	case *sdk.TextContent:
		return c.Text
	case *sdk.ImageContent:
		return fmt.Sprintf("[image: %s, %d bytes, not shown]", orUnknown(c.MIMEType), len(c.Data))
	case *sdk.AudioContent:
		return fmt.Sprintf("[audio: %s, %d bytes, not shown]", orUnknown(c.MIMEType), len(c.Data))
	case *sdk.ResourceLink:
		s := "[resource link: " + c.URI
		if c.Name != "" {
			s += " (" + c.Name + ")"
		}
		if c.MIMEType != "" {
			s += ", " + c.MIMEType
		}
		if c.Size != nil {
			s += fmt.Sprintf(", %d bytes", *c.Size)
		}
		if c.Description != "" {
			s += ": " + c.Description
		}
		return s + "]"
	case *sdk.EmbeddedResource:
		r := c.Resource
		if r == nil {
			return "[resource: empty]"
		}
		if r.Blob != nil {
			return fmt.Sprintf("[resource %s: %s, %d bytes, not shown]", r.URI, orUnknown(r.MIMEType), len(r.Blob))
		}
		return fmt.Sprintf("[resource %s, %s]\n%s", r.URI, orUnknown(r.MIMEType), r.Text)
	}
	b, _ := c.MarshalJSON()
	var kind struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(b, &kind)
	return fmt.Sprintf("[%s content, %d bytes, not shown]", orUnknown(kind.Type), len(b))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown type"
	}
	return s
}

// carriesJSON reports whether one of the text parts is the same JSON value
// as b.
func carriesJSON(parts []string, b []byte) bool {
	var want any
	if json.Unmarshal(b, &want) != nil {
		return false
	}
	wantNorm, _ := json.Marshal(want)
	for _, p := range parts {
		var got any
		if json.Unmarshal([]byte(p), &got) != nil {
			continue
		}
		if gotNorm, _ := json.Marshal(got); string(gotNorm) == string(wantNorm) {
			return true
		}
	}
	return false
}
