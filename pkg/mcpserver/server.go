// Package mcpserver serves mmcpd's tools, and whole chat turns, to MCP clients.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool is one tool the daemon can run now.
type Tool struct {
	Name        string
	Description string
	Schema      json.RawMessage // JSON Schema of the arguments, an object
	// NeedsApproval means a person must say yes to each call.
	NeedsApproval bool
}

// Lister tells which tools are usable now.
type Lister interface {
	Usable() []Tool
}

// Caller checks a client's arguments against the tool's schema and runs the
// tool; a ToolError is a failure the client's model should read (bad
// arguments, the tool's own error), any other error the daemon's.
type Caller interface {
	Call(ctx context.Context, name string, args json.RawMessage) (string, error)
}

// Turns runs mmcpd's chat turns: a message (in a session, or a new one when
// session is empty), and the answer to an action request.
type Turns interface {
	Ask(ctx context.Context, message, session string) (Outcome, error)
	Decide(ctx context.Context, session, approval string, approve bool) (Outcome, error)
}

// Outcome is how a turn ended: an answer, or an action waiting for a yes.
type Outcome struct {
	Session string
	Answer  string
	Pending *Pending // nil for an answer
}

// Pending is an action a turn paused on until the user approves it.
type Pending struct {
	Approval    string
	Tool        string
	Args        json.RawMessage
	Explanation string // the model's reason, cleaned for showing
}

// ToolError is a failure the MCP client's model should read (bad arguments,
// a tool that failed), as opposed to the daemon's own.
type ToolError struct{ Msg string }

func (e *ToolError) Error() string { return e.Msg }

// AskTool is the name of the tool that runs a whole turn.
const AskTool = "ask"

// Options is what a Handler serves.
type Options struct {
	Tools   Lister
	Calls   Caller
	Turns   Turns
	Version string
	Log     *slog.Logger
	// IdleSession is how long a session may go without a request before it
	// is closed (a client that vanished); zero means an hour.
	IdleSession time.Duration
	// Poll is how often the tool list is compared with the daemon's while
	// sessions are open, so that clients hear of plugins that came up or
	// went away; zero means two seconds.
	Poll time.Duration
	// MaxSessions bounds the sessions open at once, each of which holds
	// state until it is closed or idle for IdleSession; zero means
	// DefaultMaxSessions.
	MaxSessions int
}

// DefaultMaxSessions is how many MCP sessions may be open at once by default.
const DefaultMaxSessions = 64

// Instructions tell the client what mmcpd is and how approvals work.
const Instructions = "mmcpd runs a home media stack (films, series, music, downloads, the media server). " +
	"Call its tools directly, or call `ask` with a request in plain words to let mmcpd's own agent choose the tools and answer; " +
	"pass the session_id `ask` returns to continue that conversation. " +
	"Tools that change something (adding a film, removing a torrent) need the user's approval: " +
	"they are listed only to clients that support elicitation, and each call asks the user to confirm the exact tool and arguments first. " +
	"A client without elicitation does not see them, and an action `ask` leads to is returned to it unrun, with the approval it waits for."

const askDescription = "Ask mmcpd's own agent to do something or answer a question about the media stack, in plain words; " +
	"it runs a whole turn (choosing and calling tools itself) and returns the answer and its session_id. " +
	"Pass session_id to continue that conversation. An action that needs the user's approval is confirmed through elicitation; " +
	"without elicitation support it is not run, and the result names the approval to answer with `mmcpd respond`."

// askArgs is the argument schema of AskTool.
var askArgs = json.RawMessage(`{"type":"object","properties":{` +
	`"message":{"type":"string","minLength":1,"description":"The request or question, in plain words."},` +
	`"session_id":{"type":"string","description":"A session_id an earlier ask returned, to continue that conversation; omit to start a new one."}},` +
	`"required":["message"],"additionalProperties":false}`)

// Handler serves MCP over streamable HTTP. It is one MCP server for every
// session; its tool list follows the daemon's at each request.
type Handler struct {
	opts Options
	srv  *mcp.Server
	http *mcp.StreamableHTTPHandler

	mu       sync.Mutex
	listed   map[string]Tool // the plugin tools the MCP server holds now
	watching bool            // a goroutine polls the tool list
	closed   bool
	done     chan struct{} // closed by Close
}

// New builds the handler.
func New(o Options) *Handler {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.IdleSession <= 0 {
		o.IdleSession = time.Hour
	}
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	h := &Handler{opts: o, listed: map[string]Tool{}, done: make(chan struct{})}
	h.srv = mcp.NewServer(&mcp.Implementation{Name: "mmcpd", Title: "mmcpd", Version: o.Version}, &mcp.ServerOptions{
		Instructions: Instructions,
		Logger:       o.Log,
		// Tools only: no logging capability, which would send the
		// daemon's log lines to clients.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	h.srv.AddReceivingMiddleware(h.hideApprovalTools)
	h.srv.AddTool(&mcp.Tool{Name: AskTool, Title: "Ask mmcpd", Description: askDescription, InputSchema: askArgs}, h.ask)
	h.http = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.srv }, &mcp.StreamableHTTPOptions{
		Logger:         o.Log,
		SessionTimeout: o.IdleSession,
		// The daemon's own boundary (Host names, origins, the token) is
		// in front of this handler and is the one rule; the SDK's
		// loopback-only Host check would refuse MMCP_ALLOWED_HOSTS names.
		DisableLocalhostProtection: true,
	})
	return h
}

// ServeHTTP serves one request of the MCP endpoint.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A POST without a session id may open a session. Initializes racing
	// each other can each pass, so the bound is MaxSessions plus those in
	// flight at once, which the daemon's connection limit bounds.
	if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		n := 0
		for ss := range h.srv.Sessions() {
			// One that never initialized (a probe such as server/discover)
			// is being closed by the SDK.
			if ss.InitializeParams() != nil {
				n++
			}
		}
		if n >= h.opts.MaxSessions {
			h.opts.Log.Warn("MCP session refused: too many open", "max", h.opts.MaxSessions)
			http.Error(w, fmt.Sprintf("too many MCP sessions open (at most %d); close one (DELETE with its Mcp-Session-Id) or wait until an idle one expires", h.opts.MaxSessions), http.StatusServiceUnavailable)
			return
		}
	}
	h.sync()
	h.watch()
	h.http.ServeHTTP(w, r)
}

// Close ends every MCP session, their open streams included, so that a
// client listening for notifications does not hold the daemon's shutdown.
func (h *Handler) Close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
	h.mu.Unlock()
	for ss := range h.srv.Sessions() {
		_ = ss.Close()
	}
}

// watch polls the tool list while sessions are open: the plugin host has no
// word for a change, and a client that only listens would otherwise learn of
// one at its next request. With no session left the poll stops, and the next
// request starts it again.
func (h *Handler) watch() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watching || h.closed {
		return
	}
	h.watching = true
	go func() {
		t := time.NewTicker(h.opts.Poll)
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-t.C:
			}
			open := false
			for range h.srv.Sessions() {
				open = true
				break
			}
			if !open {
				h.mu.Lock()
				h.watching = false
				h.mu.Unlock()
				return
			}
			h.sync()
		}
	}()
}

// sync brings the MCP server's tools in line with the usable ones: plugins
// start, stop and change while clients are connected, and the SDK tells each
// session when its list changed.
func (h *Handler) sync() {
	if h.opts.Tools == nil {
		return
	}
	// One sync at a time, reading and applying together: an older reading
	// applied after a newer one would bring back what is gone.
	h.mu.Lock()
	defer h.mu.Unlock()
	now := map[string]Tool{}
	for _, t := range h.opts.Tools.Usable() {
		if t.Name == AskTool || !objectSchema(t.Schema) {
			continue // the SDK takes object schemas only
		}
		now[t.Name] = t
	}
	var gone []string
	for name := range h.listed {
		if _, ok := now[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		h.srv.RemoveTools(gone...)
	}
	for name, t := range now {
		if old, ok := h.listed[name]; ok && sameTool(old, t) {
			continue
		}
		h.srv.AddTool(&mcp.Tool{Name: t.Name, Description: describe(t), InputSchema: t.Schema,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: !t.NeedsApproval}}, h.callTool(t))
	}
	h.listed = now
}

func sameTool(a, b Tool) bool {
	return a.Name == b.Name && a.Description == b.Description && a.NeedsApproval == b.NeedsApproval && string(a.Schema) == string(b.Schema)
}

func describe(t Tool) string {
	if t.NeedsApproval {
		return t.Description + " (Changes something: each call asks the user to confirm it first.)"
	}
	return t.Description
}

func objectSchema(s json.RawMessage) bool {
	var m struct {
		Type any `json:"type"`
	}
	return json.Unmarshal(s, &m) == nil && m.Type == "object"
}

func (h *Handler) needsApproval(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listed[name].NeedsApproval
}

// canElicit reports whether the session's client can ask its user a
// question with a form.
func canElicit(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return false
	}
	e := p.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil // neither named means form (the SDK's reading too)
}

// hideApprovalTools leaves the tools that need approval out of the list a
// client without elicitation gets: it could not call them.
func (h *Handler) hideApprovalTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "tools/list" || err != nil {
			return res, err
		}
		list, ok := res.(*mcp.ListToolsResult)
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if !ok || canElicit(ss) {
			return res, nil
		}
		list.Tools = slices.DeleteFunc(list.Tools, func(t *mcp.Tool) bool { return h.needsApproval(t.Name) })
		return list, nil
	}
}

// callTool runs one plugin tool for a client, after the user's yes when the
// tool needs one.
func (h *Handler) callTool(t Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := req.Params.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage(`{}`)
		}
		if t.NeedsApproval {
			if !canElicit(req.Session) {
				return failed(t.Name + " changes something and needs the user's approval, which this client cannot ask for (no elicitation support); nothing was run."), nil
			}
			yes, why := h.confirm(ctx, req.Session, confirmation(t.Name, args, ""))
			if !yes {
				return failed(t.Name + " was not run: " + why), nil
			}
		}
		out, err := h.opts.Calls.Call(ctx, t.Name, args)
		if err != nil {
			var te *ToolError
			if errors.As(err, &te) {
				return failed(te.Msg), nil
			}
			return nil, fmt.Errorf("running %s: %w", t.Name, err)
		}
		return text(out), nil
	}
}

// confirmation is the question put to the user: the exact tool and
// arguments, and the agent's reason when there is one.
func confirmation(tool string, args json.RawMessage, why string) string {
	shown := string(args)
	var v any
	if json.Unmarshal(args, &v) == nil {
		if b, err := json.MarshalIndent(v, "", "  "); err == nil {
			shown = string(b)
		}
	}
	msg := "mmcpd asks to run " + tool + " with these arguments:\n" + shown
	if why != "" {
		msg += "\nReason given: " + why
	}
	return msg + "\nAccept to run it; decline to run nothing."
}

// confirm asks the user through the client; yes only for an accept.
func (h *Handler) confirm(ctx context.Context, ss *mcp.ServerSession, question string) (bool, string) {
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{Mode: "form", Message: question,
		RequestedSchema: json.RawMessage(`{"type":"object","properties":{}}`)})
	if err != nil {
		h.opts.Log.WarnContext(ctx, "asking the MCP client's user for an approval", "err", err)
		return false, "the approval could not be asked (" + err.Error() + ")."
	}
	switch res.Action {
	case "accept":
		return true, ""
	case "decline":
		return false, "the user declined."
	}
	return false, "the user cancelled."
}

// askResult is the structured content of an ask.
type askResult struct {
	SessionID string `json:"session_id"`
	Answer    string `json:"answer,omitempty"`
	// ApprovalID names the action left waiting, when the client could not
	// confirm it.
	ApprovalID string          `json:"approval_id,omitempty"`
	Tool       string          `json:"tool,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
}

// maxApprovals bounds the actions one ask confirms one after another.
const maxApprovals = 10

func (h *Handler) ask(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Message   string `json:"message"`
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
		return failed("arguments: " + err.Error()), nil
	}
	if strings.TrimSpace(in.Message) == "" {
		return failed("message must not be empty"), nil
	}
	out, err := h.opts.Turns.Ask(ctx, in.Message, in.SessionID)
	for i := 0; err == nil && out.Pending != nil && i < maxApprovals && canElicit(req.Session); i++ {
		p := out.Pending
		yes, _ := h.confirm(ctx, req.Session, confirmation(p.Tool, p.Args, p.Explanation))
		out, err = h.opts.Turns.Decide(ctx, out.Session, p.Approval, yes)
	}
	if err != nil {
		var te *ToolError
		if errors.As(err, &te) {
			return failed(te.Msg), nil
		}
		return nil, err
	}
	res := askResult{SessionID: out.Session, Answer: out.Answer}
	msg := out.Answer
	if p := out.Pending; p != nil {
		res.ApprovalID, res.Tool, res.Args = p.Approval, p.Tool, p.Args
		msg = fmt.Sprintf("Not run: mmcpd wants to run %s with %s, which needs the user's approval, and this client cannot ask for it (no elicitation support). "+
			"The user can answer it with: mmcpd respond --session %s --approval %s approve|deny. Reason given: %s",
			p.Tool, p.Args, out.Session, p.Approval, p.Explanation)
	}
	r := text(msg)
	r.StructuredContent = res
	return r, nil
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func failed(s string) *mcp.CallToolResult {
	r := text(s)
	r.IsError = true
	return r
}
