// Package server owns the HTTP API: routes, request validation, the error
// envelope, trace ids, and the sessions turns run in.
package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/page"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/store"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 1 << 20

// Turns runs chat turns, and resumes those paused for an approval.
type Turns interface {
	Run(ctx context.Context, conv *convo.Conversation, message string, obs loop.Observer) (*loop.Result, error)
	Resume(ctx context.Context, conv *convo.Conversation, d loop.Decision, obs loop.Observer) (*loop.Result, error)
}

// Catalog tells what the model can use now.
type Catalog interface {
	Catalog() []loop.Tool
	Union() (*schema.Union, error)
}

// Checker reports whether the model is ready to serve.
type Checker interface {
	Check(ctx context.Context) error
}

// modelNamer names the model a Checker checks, for /readyz.
type modelNamer interface {
	Model() string
}

// PluginLister tells which plugins the daemon has and how they are.
type PluginLister interface {
	Plugins() []plugins.Info
	// Starting names the plugins whose tools are not available yet.
	Starting() []string
}

// Limits bound what one client can ask of the daemon.
type Limits struct {
	MaxMessageChars    int           // a chat message's length
	MaxConcurrentTurns int           // turns running at once, streams included
	ApprovalTTL        time.Duration // how long an action request can be answered
	TurnTimeout        time.Duration // how long one turn may run, all its calls included
	// StreamHeartbeat is how long a stream may stay quiet before it gets a
	// Heartbeat comment.
	StreamHeartbeat time.Duration
	// ToolTimeout bounds a tool an MCP client calls, as MMCP_TOOL_TIMEOUT
	// bounds a turn's calls.
	ToolTimeout time.Duration
}

// DefaultLimits are the limits when the daemon's settings leave them.
var DefaultLimits = Limits{MaxMessageChars: 8000, MaxConcurrentTurns: 16, ApprovalTTL: 10 * time.Minute,
	TurnTimeout: 10 * time.Minute, StreamHeartbeat: 10 * time.Second, ToolTimeout: 30 * time.Second}

// orDefault fills the limits left at zero from DefaultLimits: a zero turn
// timeout would end every turn at once, and zero turns at once would serve
// none.
func (l Limits) orDefault() Limits {
	d := DefaultLimits
	l.MaxMessageChars = cmp.Or(l.MaxMessageChars, d.MaxMessageChars)
	l.MaxConcurrentTurns = cmp.Or(l.MaxConcurrentTurns, d.MaxConcurrentTurns)
	l.ApprovalTTL = cmp.Or(l.ApprovalTTL, d.ApprovalTTL)
	l.TurnTimeout = cmp.Or(l.TurnTimeout, d.TurnTimeout)
	l.StreamHeartbeat = cmp.Or(l.StreamHeartbeat, d.StreamHeartbeat)
	l.ToolTimeout = cmp.Or(l.ToolTimeout, d.ToolTimeout)
	return l
}

// Server is the HTTP API. Fill the fields, then call Handler once.
type Server struct {
	Turns   Turns
	Catalog Catalog
	Model   Checker
	Store   *store.Store
	Plugins PluginLister // nil when the daemon runs without plugins
	// Tasks answers Open WebUI's task requests (titles, tags, follow-ups:
	// see isTask) with one plain model call; nil runs them as turns.
	Tasks   Completer
	Metrics http.Handler // GET /metrics; nil serves none
	// Calls runs tools for MCP clients (/mcp); nil lists only the ask tool.
	Calls   ToolCaller
	Version string // the daemon's, shown to MCP clients
	// Token, when set, is required as a bearer token on every route but
	// /healthz.
	Token string
	// ListenAddr is the address the daemon was told to listen on
	// (MMCP_LISTEN_ADDR); its host is one of the Hosts requests may name.
	ListenAddr string
	// AllowedHosts are the other Host names requests may carry
	// (MMCP_ALLOWED_HOSTS): "name" (any port), "name:port", or "*" for any.
	AllowedHosts []string
	// PublicURL is where people open the page (MMCP_PUBLIC_URL), for the
	// links written into answers; empty: http:// and the Host the request
	// named, which a client in a container may know by a name the user's
	// browser does not (host.docker.internal).
	PublicURL string
	Limits    Limits
	Log       *slog.Logger
	// TurnDone, when set, is told how each finished turn ended: answer,
	// action_request, failed or cancelled.
	TurnDone func(outcome string)

	mcp   mcpEndpoint
	slots chan struct{}   // one per running turn
	mu    sync.Mutex      // guards busy
	busy  map[string]bool // sessions with a running turn
}

// Step is one step of a turn as the API shows it.
type Step = loop.Step

// Handler returns the API's routes, each response carrying X-Trace-Id.
func (s *Server) Handler() http.Handler {
	s.Limits = s.Limits.orDefault()
	s.slots = make(chan struct{}, s.Limits.MaxConcurrentTurns)
	s.busy = map[string]bool{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat", s.chat)
	mux.HandleFunc("POST /v1/chat/respond", s.respond)
	mux.HandleFunc("POST /v1/chat/completions", s.completions)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /v1/sessions", s.listSessions)
	mux.HandleFunc("GET /v1/sessions/{id}", s.getSession)
	mux.HandleFunc("PATCH /v1/sessions/{id}", s.renameSession)
	mux.HandleFunc("DELETE /v1/sessions/{id}", s.deleteSession)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /v1/tools", s.tools)
	mux.HandleFunc("GET /v1/schema", s.schema)
	mux.HandleFunc("GET /v1/plugins", s.listPlugins)
	s.mcp = s.mcpHandler()
	mux.Handle("/mcp", s.bodyLimited(s.mcp))
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics)
	}
	return s.traced(s.guarded(paged(s.authorized(s.unrouted(mux)))))
}

// paged serves the built-in page before the token is asked for: its files
// hold no data, and the page asks for the token itself when the API refuses
// it. The Host check still applies, so a rebound name gets no page either.
func paged(next http.Handler) http.Handler {
	p := page.New()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.Owns(r) {
			p.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// unrouted answers requests no route takes (404, or 405 for a known path with
// another method) in the error envelope instead of the mux's plain text, and
// refuses a write whose body is not JSON (415).
func (s *Server) unrouted(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cleanPath(r.URL.EscapedPath()) {
			// The mux would redirect to the cleaned path, or answer a
			// redirect without a Location when nothing is there.
			s.fail(w, r, http.StatusNotFound, "not_found", "no route for "+r.Method+" "+r.URL.Path+" (paths are taken as written: no . or .. segments, no double slashes)", false)
			return
		}
		h, pattern := mux.Handler(r)
		if pattern != "" {
			if !jsonBody(r) {
				s.fail(w, r, http.StatusUnsupportedMediaType, "unsupported_media_type", "the body must be JSON: send Content-Type: application/json", false)
				return
			}
			mux.ServeHTTP(w, r) // through the mux, which sets the path values
			return
		}
		probe := &probeWriter{header: http.Header{}, Code: http.StatusNotFound}
		h.ServeHTTP(probe, r)
		status, code := http.StatusNotFound, "not_found"
		if probe.Code == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", probe.Header().Get("Allow"))
			status, code = http.StatusMethodNotAllowed, "method_not_allowed"
		}
		s.fail(w, r, status, code, "no route for "+r.Method+" "+r.URL.Path, false)
	})
}

// authorized refuses requests without the bearer token, when one is set.
// /healthz stays open so that supervisors need no secret.
func (s *Server) authorized(next http.Handler) http.Handler {
	if s.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			token, ok := bearerToken(r.Header.Get("Authorization"))
			if !ok || !tokenMatches(token, s.Token) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="mmcpd"`)
				s.fail(w, r, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token (MMCP_API_TOKEN)", false)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// traced gives every request a trace id, in its context and its response
// headers, and logs one line when it is done.
func (s *Server) traced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := trace.New()
		ctx, note := withNote(trace.With(r.Context(), id))
		w.Header().Set("X-Trace-Id", id)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(rec, r.WithContext(ctx))
		s.log().LogAttrs(ctx, slog.LevelInfo, "http", append([]slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", rec.status),
			slog.Duration("duration", time.Since(start)),
		}, note.attrs()...)...)
	})
}

// probeWriter keeps the status and headers a handler writes, and drops the body.
type probeWriter struct {
	header http.Header
	Code   int
}

func (p *probeWriter) Header() http.Header         { return p.header }
func (p *probeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (p *probeWriter) WriteHeader(code int)        { p.Code = code }

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the real writer (to flush a
// stream).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.reply(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.Store != nil {
		if err := s.Store.Healthy(); err != nil {
			s.log().ErrorContext(r.Context(), "the session database is lost", "err", err)
			s.fail(w, r, http.StatusServiceUnavailable, "storage_lost", storageLost, false)
			return
		}
	}
	if starting := s.starting(); len(starting) > 0 {
		s.fail(w, r, http.StatusServiceUnavailable, "plugins_starting", "plugins still starting: "+strings.Join(starting, ", "), true)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.Model.Check(ctx); err != nil {
		// The codes and retryability of a chat that meets the same: a
		// missing model stays missing until someone pulls it.
		code, retryable := "model_unavailable", true
		if errors.Is(err, llm.ErrModelMissing) {
			code, retryable = "model_missing", false
		}
		s.failWith(w, r, http.StatusServiceUnavailable, code, err.Error(), retryable, s.backends())
		return
	}
	ready := map[string]any{"status": "ready"}
	if b := s.backends(); b != nil {
		ready["backends"] = b
	}
	if m, ok := s.Model.(modelNamer); ok {
		ready["model"] = m.Model()
	}
	if warnings := s.pluginWarnings(); len(warnings) > 0 {
		ready["warnings"] = warnings
	}
	s.reply(w, http.StatusOK, ready)
}

// BackendLister tells the state of each model server (llm.Pool is one).
type BackendLister interface {
	Backends() []llm.BackendState
}

// backends lists the model servers' states when Model knows them, for
// /readyz, ready or not.
func (s *Server) backends() []llm.BackendState {
	if b, ok := s.Model.(BackendLister); ok {
		return b.Backends()
	}
	return nil
}

// pluginWarnings lists what keeps a plugin or a tool from serving although
// the daemon is ready: failed, standby and unreachable plugins, refused tools
// (a name two plugins declare is listed once).
func (s *Server) pluginWarnings() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range s.pluginList() {
		switch p.Status {
		case plugins.StatusFailed:
			out = append(out, "plugin "+p.Name+" failed: "+p.Reason)
		case plugins.StatusStandby:
			out = append(out, "plugin "+p.Name+" is on standby: "+p.Reason)
		case plugins.StatusUnreachable:
			out = append(out, "plugin "+p.Name+" is unreachable: "+p.Reason)
		}
		for _, t := range p.Tools {
			if why, ok := strings.CutPrefix(t.Disabled, "refused: "); ok && !seen[t.Name+why] {
				seen[t.Name+why] = true
				out = append(out, "tool "+t.Name+" of plugin "+p.Name+" is refused: "+why)
			}
		}
	}
	return out
}

func (s *Server) starting() []string {
	if s.Plugins == nil {
		return nil
	}
	return s.Plugins.Starting()
}

func (s *Server) pluginList() []plugins.Info {
	if s.Plugins == nil {
		return []plugins.Info{}
	}
	return s.Plugins.Plugins()
}

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request) {
	s.reply(w, http.StatusOK, map[string]any{"plugins": s.pluginList()})
}

func (s *Server) tools(w http.ResponseWriter, r *http.Request) {
	s.reply(w, http.StatusOK, map[string]any{"tools": withRefused(s.Catalog.Catalog(), s.pluginList())})
}

// withRefused adds to the catalogue the tools the host refused alone (too
// large, a name or schema no union takes, past MMCP_TOOLS_MAX), each with
// why: they never reach the model, but whoever lists tools sees them.
func withRefused(list []loop.Tool, ps []plugins.Info) []loop.Tool {
	seen := make(map[string]bool, len(list))
	for _, t := range list {
		seen[t.Name] = true
	}
	n := len(list)
	for _, p := range ps {
		for _, t := range p.Tools {
			if strings.HasPrefix(t.Disabled, "refused: ") && !seen[t.Name] {
				seen[t.Name] = true
				list = append(list, loop.Tool{Tool: schema.Tool{Name: t.Name, Description: t.Description}, Disabled: t.Disabled})
			}
		}
	}
	if len(list) > n {
		slices.SortFunc(list, func(a, b loop.Tool) int { return strings.Compare(a.Name, b.Name) })
	}
	return list
}

func (s *Server) schema(w http.ResponseWriter, r *http.Request) {
	u, err := s.Catalog.Union()
	if err != nil {
		s.internal(w, r, fmt.Errorf("building the union: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/schema+json")
	_, _ = w.Write(u.Format())
}

// decode reads a JSON body into v, a pointer to a struct, answering the
// client itself when it cannot: 413 past MaxBodyBytes, 400 for invalid UTF-8,
// invalid JSON, and what checkObject refuses (keys not spelt exactly as the
// struct's, duplicate keys, lone surrogates, control characters).
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.fail(w, r, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body is over %d bytes", MaxBodyBytes), false)
		return false
	case err != nil:
		s.fail(w, r, http.StatusBadRequest, "invalid_request", "reading request body: "+err.Error(), false)
		return false
	case !utf8.Valid(body):
		// encoding/json would quietly turn bad bytes into U+FFFD.
		s.fail(w, r, http.StatusBadRequest, "invalid_request", "request body is not valid UTF-8", false)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		s.fail(w, r, http.StatusBadRequest, "invalid_request", "request body is not valid JSON for this route: "+err.Error(), false)
		return false
	}
	if dec.More() {
		s.fail(w, r, http.StatusBadRequest, "invalid_request", "request body holds more than one JSON value", false)
		return false
	}
	if err := checkObject(body, v); err != nil {
		s.fail(w, r, http.StatusBadRequest, "invalid_request", err.Error(), false)
		return false
	}
	return true
}

// ErrorBody is every error response.
type ErrorBody struct {
	Error   ErrorDetail `json:"error"`
	TraceID string      `json:"trace_id"`
}

// ErrorDetail says what went wrong and whether trying again may help.
type ErrorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, code, msg string, retryable bool) {
	noteFailure(r, code, msg)
	s.reply(w, status, ErrorBody{
		Error:   ErrorDetail{Code: code, Message: msg, Retryable: retryable},
		TraceID: trace.ID(r.Context()),
	})
}

// failWith is fail for /readyz, with each model server's state beside the
// error.
func (s *Server) failWith(w http.ResponseWriter, r *http.Request, status int, code, msg string, retryable bool, backends []llm.BackendState) {
	noteFailure(r, code, msg)
	s.reply(w, status, struct {
		ErrorBody
		Backends []llm.BackendState `json:"backends,omitempty"`
	}{ErrorBody{Error: ErrorDetail{Code: code, Message: msg, Retryable: retryable}, TraceID: trace.ID(r.Context())}, backends})
}

func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	// A full disk or a lost database file is no bug: say what to do.
	if status, code, msg, ok := storageProblem(err, false); ok {
		s.log().ErrorContext(r.Context(), "storage failure", "err", err)
		s.fail(w, r, status, code, msg, false)
		return
	}
	s.log().ErrorContext(r.Context(), "internal error", "err", err)
	s.fail(w, r, http.StatusInternalServerError, "internal", "internal error; the log has details under this trace id", true)
}

func (s *Server) reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client may be gone; nothing to do about it
}
