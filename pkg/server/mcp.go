package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/mcpserver"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// ToolCaller runs one tool outside a turn, for MCP clients.
type ToolCaller interface {
	Call(ctx context.Context, name string, args json.RawMessage) (string, error)
}

// mcpEndpoint is /mcp's handler, which the daemon closes when it stops.
type mcpEndpoint interface {
	http.Handler
	Close()
}

// mcpHandler serves /mcp: the usable tools, each call checked against its
// schema as a model's would be, and whole turns run through the same
// handlers as POST /v1/chat and /v1/chat/respond.
func (s *Server) mcpHandler() *mcpserver.Handler {
	return mcpserver.New(mcpserver.Options{
		Tools:   mcpTools{s},
		Calls:   mcpCalls{s},
		Turns:   mcpTurns{s},
		Version: s.Version,
		Log:     s.log(),
	})
}

// CloseMCP ends the MCP sessions and their open streams; the daemon calls it
// when it starts shutting down.
func (s *Server) CloseMCP() {
	if s.mcp != nil {
		s.mcp.Close()
	}
}

type mcpTools struct{ s *Server }

func (m mcpTools) Usable() []mcpserver.Tool {
	if m.s.Calls == nil {
		return nil
	}
	var out []mcpserver.Tool
	for _, t := range m.s.Catalog.Catalog() {
		if t.Disabled == "" {
			out = append(out, mcpserver.Tool{Name: t.Name, Description: t.Description, Schema: t.Schema, NeedsApproval: t.NeedsApproval})
		}
	}
	return out
}

type mcpCalls struct{ s *Server }

// Call checks args with the union, as a model's reply is checked, so an MCP
// client gets the same precise errors, then runs the tool.
func (m mcpCalls) Call(ctx context.Context, name string, args json.RawMessage) (string, error) {
	u, err := m.s.Catalog.Union()
	if err != nil {
		return "", fmt.Errorf("building the union: %w", err)
	}
	reply, err := json.Marshal(map[string]any{"thought": "", "action": name, "args": args})
	if err != nil {
		return "", &mcpserver.ToolError{Msg: "arguments are not JSON: " + err.Error()}
	}
	if _, err := u.Decode(string(reply)); err != nil {
		var re *schema.ReplyError
		if errors.As(err, &re) {
			return "", &mcpserver.ToolError{Msg: "invalid arguments for " + name + ": " + strings.Join(re.Problems, "; ")}
		}
		return "", &mcpserver.ToolError{Msg: err.Error()}
	}
	ctx = trace.With(ctx, trace.New())
	cctx, cancel := context.WithTimeout(ctx, m.s.Limits.ToolTimeout)
	defer cancel()
	out, err := m.s.Calls.Call(cctx, name, args)
	var timeout interface{ Timeout() bool }
	timedOut := errors.Is(cctx.Err(), context.DeadlineExceeded) || errors.As(err, &timeout) && timeout.Timeout()
	if err != nil && timedOut && ctx.Err() == nil {
		// The host words it with the time that was left when it started,
		// a millisecond short; the setting is what the client can change.
		err = fmt.Errorf("tool %s did not finish within %s (MMCP_TOOL_TIMEOUT)", name, shortDuration(m.s.Limits.ToolTimeout))
	}
	if err != nil {
		m.s.log().InfoContext(ctx, "mcp tool call failed", "tool", name, "err", err)
		return "", &mcpserver.ToolError{Msg: err.Error()}
	}
	m.s.log().InfoContext(ctx, "mcp tool call", "tool", name)
	return out, nil
}

type mcpTurns struct{ s *Server }

func (m mcpTurns) Ask(ctx context.Context, message, session string) (mcpserver.Outcome, error) {
	return m.turn(ctx, "/v1/chat", ChatRequest{Message: message, SessionID: session}, m.s.chat)
}

func (m mcpTurns) Decide(ctx context.Context, session, approval string, approve bool) (mcpserver.Outcome, error) {
	d := "deny"
	if approve {
		d = "approve"
	}
	return m.turn(ctx, "/v1/chat/respond", RespondRequest{SessionID: session, ApprovalID: approval, Decision: d}, m.s.respond)
}

// turn runs one chat or respond request in process, so that a turn from an
// MCP client takes the same path as any other: its limits, session lock,
// recording and approvals.
func (m mcpTurns) turn(ctx context.Context, path string, body any, h http.HandlerFunc) (mcpserver.Outcome, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return mcpserver.Outcome{}, err
	}
	ctx, _ = withNote(trace.With(ctx, trace.New()))
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(b))
	if err != nil {
		return mcpserver.Outcome{}, err
	}
	r.Header.Set("Content-Type", "application/json")
	w := &bufferWriter{header: http.Header{}, status: http.StatusOK}
	h(w, r)
	if w.status != http.StatusOK {
		var e ErrorBody
		if json.Unmarshal(w.body.Bytes(), &e) != nil || e.Error.Message == "" {
			return mcpserver.Outcome{}, fmt.Errorf("%s answered %d", path, w.status)
		}
		return mcpserver.Outcome{}, &mcpserver.ToolError{Msg: fmt.Sprintf("%s (%s, trace %s)", e.Error.Message, e.Error.Code, e.TraceID)}
	}
	var resp ChatResponse
	if err := json.Unmarshal(w.body.Bytes(), &resp); err != nil {
		return mcpserver.Outcome{}, fmt.Errorf("reading the turn's answer: %w", err)
	}
	out := mcpserver.Outcome{Session: resp.SessionID, Answer: resp.Answer}
	if resp.Type == TypeActionRequest {
		out.Pending = &mcpserver.Pending{Approval: resp.ApprovalID, Tool: resp.Tool, Args: resp.Args, Explanation: resp.Explanation}
	}
	return out, nil
}

// bufferWriter keeps a handler's answer in memory.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferWriter) Header() http.Header         { return b.header }
func (b *bufferWriter) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferWriter) WriteHeader(code int)        { b.status = code }

// bodyLimited holds /mcp to MaxBodyBytes, as the rest of the API: the SDK's
// own cap is 4 MiB, and its refusal is not the API's error body. A declared
// length over it is refused unread; a chunked body stops being read at the
// limit. The body is read here, as every other handler reads its own.
func (s *Server) bodyLimited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBodyBytes {
			s.fail(w, r, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body is over %d bytes", MaxBodyBytes), false)
			return
		}
		if r.Method == http.MethodPost && r.Body != nil {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
			var tooBig *http.MaxBytesError
			switch {
			case errors.As(err, &tooBig):
				s.fail(w, r, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body is over %d bytes", MaxBodyBytes), false)
				return
			case err != nil:
				s.fail(w, r, http.StatusBadRequest, "invalid_request", "reading the request body: "+err.Error(), false)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}
