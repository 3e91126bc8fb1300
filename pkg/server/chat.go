package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/store"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// ChatRequest is the body of POST /v1/chat.
type ChatRequest struct {
	Message   string `json:"message"`
	SessionID string `json:"session_id,omitempty"`
}

// RespondRequest is the body of POST /v1/chat/respond.
type RespondRequest struct {
	SessionID  string `json:"session_id"`
	ApprovalID string `json:"approval_id"`
	Decision   string `json:"decision"` // approve or deny
}

// ChatResponse ends a turn: an answer, or an action request waiting for the
// user's decision.
type ChatResponse struct {
	Type      string    `json:"type"` // "answer" or "action_request"
	SessionID string    `json:"session_id"`
	TraceID   string    `json:"trace_id"`
	Answer    string    `json:"answer,omitempty"`
	Forced    bool      `json:"forced,omitempty"`
	Fallback  bool      `json:"fallback,omitempty"` // every tool call of the turn failed
	Steps     []Step    `json:"steps"`
	Usage     llm.Usage `json:"usage"`
	ActionRequest
}

// ActionRequest is the part of a ChatResponse that asks for approval.
type ActionRequest struct {
	ApprovalID  string          `json:"approval_id,omitempty"`
	Tool        string          `json:"tool,omitempty"`
	Args        json.RawMessage `json:"args,omitempty"`
	Explanation string          `json:"explanation,omitempty"`
}

// Response types.
const (
	TypeAnswer        = "answer"
	TypeActionRequest = "action_request"
)

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req ChatRequest
	if !s.decode(w, r, &req) {
		return
	}
	if blank(req.Message) {
		s.fail(w, r, http.StatusBadRequest, "invalid_request", "message must not be empty, blank or only invisible characters", false)
		return
	}
	if n := utf8.RuneCountInString(req.Message); n > s.Limits.MaxMessageChars {
		s.fail(w, r, http.StatusBadRequest, "message_too_long", fmt.Sprintf("message has %d characters; at most %d (MMCP_MAX_MESSAGE_CHARS)", n, s.Limits.MaxMessageChars), false)
		return
	}
	release, ok := s.slot(w, r)
	if !ok {
		return
	}
	defer release()
	ctx := r.Context()
	var sess store.Session
	var turn int64
	var conv convo.Conversation
	if req.SessionID == "" {
		var err error
		if sess, turn, err = s.Store.CreateSessionWithTurn(ctx, store.Title(req.Message), trace.ID(ctx), req.Message); err != nil {
			s.internal(w, r, err)
			return
		}
		s.lockNew(sess.ID)
	} else {
		if sess, ok = s.session(w, r, req.SessionID); !ok {
			return
		}
		if !s.lock(w, r, sess.ID) {
			return
		}
		// A new message answers a pending approval with "not now": close
		// it, so the model reads that the call never ran.
		if err := s.supersede(ctx, sess.ID); err != nil {
			s.unlock(sess.ID)
			s.internal(w, r, err)
			return
		}
		turns, err := s.Store.Turns(ctx, sess.ID)
		if err == nil {
			conv = store.Conversation(turns)
			turn, err = s.Store.StartTurn(ctx, sess.ID, trace.ID(ctx), req.Message)
		}
		if err != nil {
			s.unlock(sess.ID)
			s.internal(w, r, err)
			return
		}
	}
	defer s.unlock(sess.ID)
	s.log().InfoContext(ctx, "turn started", "session_id", sess.ID, "new_session", req.SessionID == "")
	before := len(conv.Messages) + 1 // the user message lives in the turn's own row
	out := s.output(w, r, sess.ID)
	defer out.close()
	turnCtx, cancel := s.turnContext(r)
	defer cancel()
	turnCtx = llm.WithSession(turnCtx, sess.ID) // its calls stay on one model server
	res, runErr := s.Turns.Run(turnCtx, &conv, req.Message, out.event)
	s.finish(w, r, out, sess.ID, turn, &conv, before, res, turnEnd(r, turnCtx, runErr))
}

func (s *Server) respond(w http.ResponseWriter, r *http.Request) {
	var req RespondRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.Decision != "approve" && req.Decision != "deny" {
		s.fail(w, r, http.StatusBadRequest, "invalid_request", `decision must be "approve" or "deny"`, false)
		return
	}
	if req.SessionID == "" || req.ApprovalID == "" {
		s.fail(w, r, http.StatusBadRequest, "invalid_request", "session_id and approval_id are required", false)
		return
	}
	release, ok := s.slot(w, r)
	if !ok {
		return
	}
	defer release()
	ctx := r.Context()
	sess, ok := s.session(w, r, req.SessionID)
	if !ok {
		return
	}
	if !s.lock(w, r, sess.ID) {
		return
	}
	defer s.unlock(sess.ID)

	status := store.ApprovalApproved
	if req.Decision == "deny" {
		status = store.ApprovalDenied
	}
	a, err := s.Store.ClaimApproval(ctx, sess.ID, req.ApprovalID, status)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, "approval_not_found", fmt.Sprintf("no approval %q in this session", req.ApprovalID), false)
		return
	case errors.Is(err, store.ErrApprovalUsed):
		s.fail(w, r, http.StatusConflict, "approval_used", "this approval was already answered; nothing was run", false)
		return
	case errors.Is(err, store.ErrApprovalExpired):
		s.fail(w, r, http.StatusConflict, "approval_expired", "this approval expired (MMCP_APPROVAL_TTL); nothing was run; ask again", false)
		return
	case err != nil:
		s.internal(w, r, err)
		return
	}
	turns, err := s.Store.Turns(ctx, sess.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	conv := store.Conversation(turns)
	call, ok := pendingCall(conv, a)
	if !ok {
		s.internal(w, r, fmt.Errorf("approval %s: the conversation does not end with its call", a.ID))
		return
	}
	if err := s.Store.SetTurnStatus(ctx, a.Turn, store.TurnRunning); err != nil {
		s.internal(w, r, err)
		return
	}
	s.log().InfoContext(ctx, "turn resumed", "session_id", sess.ID, "approval_id", a.ID, "decision", req.Decision)
	out := s.output(w, r, sess.ID)
	defer out.close()
	before := len(conv.Messages)
	turnCtx, cancel := s.turnContext(r)
	defer cancel()
	turnCtx = llm.WithSession(turnCtx, sess.ID)
	res, runErr := s.Turns.Resume(turnCtx, &conv, loop.Decision{ActionRequest: call, Approved: status == store.ApprovalApproved}, out.event)
	s.finish(w, r, out, sess.ID, a.Turn, &conv, before, res, turnEnd(r, turnCtx, runErr))
}

// pendingCall reads the call an approval is for from the end of the
// conversation, where the paused turn left it.
func pendingCall(conv convo.Conversation, a store.Approval) (loop.ActionRequest, bool) {
	n := len(conv.Messages)
	if n == 0 {
		return loop.ActionRequest{}, false
	}
	last := conv.Messages[n-1]
	if last.Role != convo.Assistant || last.Tool != a.Tool {
		return loop.ActionRequest{}, false
	}
	var d struct {
		Thought string          `json:"thought"`
		Args    json.RawMessage `json:"args"`
	}
	if json.Unmarshal([]byte(last.Content), &d) != nil {
		return loop.ActionRequest{}, false
	}
	return loop.ActionRequest{Tool: a.Tool, Args: d.Args, Thought: d.Thought}, true
}

// ErrShuttingDown is the cause the daemon cancels running turns with when it
// stops: they answer 503 shutting_down and are recorded cancelled.
var ErrShuttingDown = errors.New("the daemon is shutting down; the turn was cancelled: send it again once mmcpd is back")

// shuttingDown reports whether r's context was cancelled by the daemon
// stopping, not by the client leaving.
func shuttingDown(r *http.Request) bool {
	return errors.Is(context.Cause(r.Context()), ErrShuttingDown)
}

// clientLeft reports whether r's context ended because its client went
// away: nobody is there to answer.
func clientLeft(r *http.Request) bool {
	return r.Context().Err() != nil && !shuttingDown(r)
}

// TurnTimeoutError ends a turn that ran past Limits.TurnTimeout
// (MMCP_TURN_TIMEOUT): 504 timeout, and the turn is recorded failed.
type TurnTimeoutError struct {
	Limit time.Duration
}

func (e *TurnTimeoutError) Error() string {
	return fmt.Sprintf("the turn did not finish within %s (MMCP_TURN_TIMEOUT) and was stopped where it was; a slow model or slow tools may need a longer MMCP_TURN_TIMEOUT",
		shortDuration(e.Limit))
}

// shortDuration writes d as settings are written: 10m, not 10m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// turnContext bounds a turn by Limits.TurnTimeout. The deadline's cause
// tells it apart from the two ways r's own context ends (the client left,
// the daemon shut down), which reach the turn through the same context.
// Only the turn gets the deadline: recording it afterwards does not.
func (s *Server) turnContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(r.Context(), s.Limits.TurnTimeout, &TurnTimeoutError{Limit: s.Limits.TurnTimeout})
}

// turnEnd says why a turn ended with err. The daemon stopping and the client
// leaving come first: they end r's context, and with it the turn's, whose
// own deadline may have passed meanwhile. Then the turn's deadline: the loop
// reports it as whatever it was waiting on saw (a model call's "context
// deadline exceeded"), which names neither the turn's limit nor its setting.
func turnEnd(r *http.Request, turnCtx context.Context, err error) error {
	var timeout *TurnTimeoutError
	switch {
	case err == nil:
		return nil
	case shuttingDown(r):
		return ErrShuttingDown
	case r.Context().Err() == nil && errors.As(context.Cause(turnCtx), &timeout):
		return timeout
	}
	return err
}

// finish commits what the turn added and answers the client.
func (s *Server) finish(w http.ResponseWriter, r *http.Request, out *output, session string, turn int64, conv *convo.Conversation, before int, res *loop.Result, runErr error) {
	a, runErr, err := s.record(r, session, turn, conv, before, res, runErr)
	switch {
	case err != nil:
		out.failInternal(err)
		return
	case runErr != nil:
		out.turnFailed(runErr)
		return
	}
	resp := ChatResponse{Type: TypeAnswer, SessionID: session, TraceID: res.TraceID, Answer: res.Answer, Forced: res.Forced, Fallback: res.Fallback, Steps: res.Steps, Usage: res.Usage}
	if a != nil {
		p := res.Pending
		resp.Type = TypeActionRequest
		resp.ActionRequest = ActionRequest{ApprovalID: a.ID, Tool: p.Tool, Args: p.Args, Explanation: Explain(p.Thought)}
	}
	out.done(resp)
}

// record commits what a turn added and how it ended, and stores the
// approval a paused turn waits for (returned, nil when none). runErr comes
// back as the client should get it; failed is set when the turn ran well
// but could not be recorded, or its approval stored.
func (s *Server) record(r *http.Request, session string, turn int64, conv *convo.Conversation, before int, res *loop.Result, runErr error) (a *store.Approval, _ error, failed error) {
	ctx := context.WithoutCancel(r.Context()) // a client that left still gets its turn recorded
	added := conv.Messages[min(before, len(conv.Messages)):]
	status, errMsg, outcome := store.TurnDone, "", TypeAnswer
	switch {
	case runErr != nil && shuttingDown(r):
		status, errMsg, outcome = store.TurnCancelled, "the daemon shut down before the turn ended", "cancelled"
		runErr = ErrShuttingDown
	case runErr != nil && r.Context().Err() != nil:
		status, errMsg, outcome = store.TurnCancelled, "the client went away", "cancelled"
	case runErr != nil:
		status, errMsg, outcome = store.TurnFailed, runErr.Error(), "failed"
	case res.Pending != nil:
		status, outcome = store.TurnAwaiting, TypeActionRequest
	}
	if s.TurnDone != nil {
		s.TurnDone(outcome)
	}
	if err := s.Store.CommitTurn(ctx, turn, status, errMsg, added); err != nil {
		s.log().ErrorContext(ctx, "recording the turn", "session_id", session, "err", err)
		s.failTurn(ctx, session, turn, err)
		if runErr == nil {
			return nil, nil, fmt.Errorf("recording the turn: %w", err)
		}
	}
	if runErr != nil {
		return nil, runErr, nil
	}
	if p := res.Pending; p != nil {
		created, err := s.Store.CreateApproval(ctx, session, turn, p.Tool, string(p.Args), s.Limits.ApprovalTTL)
		if err != nil {
			s.failTurn(ctx, session, turn, err) // no approval can ever resume it
			return nil, nil, err
		}
		a = &created
	}
	return a, nil, nil
}

// failTurn is the last resort when a turn's record could not be written: it
// marks the turn failed, the smallest write there is, so that it does not
// stay running (or awaiting an approval that does not exist) until the next
// start, which would mark it interrupted.
func (s *Server) failTurn(ctx context.Context, session string, turn int64, cause error) {
	reason := "the turn could not be recorded"
	if store.IsFull(cause) {
		reason += ": the disk is full"
	}
	if err := s.Store.FailTurn(ctx, turn, reason); err != nil {
		s.log().ErrorContext(ctx, "marking the turn failed", "session_id", session, "err", err)
	}
}

// supersede closes the session's pending approvals: each paused turn gets an
// observation saying the call did not run.
func (s *Server) supersede(ctx context.Context, session string) error {
	old, err := s.Store.SupersedeApprovals(ctx, session)
	if err != nil {
		return err
	}
	for _, a := range old {
		msg := convo.Message{Role: convo.Observation, Tool: a.Tool,
			Content: a.Tool + " was not run: the user sent a new message instead of approving it."}
		if err := s.Store.CommitTurn(ctx, a.Turn, store.TurnCancelled, "approval superseded by a new message", []convo.Message{msg}); err != nil {
			return err
		}
	}
	return nil
}

var (
	mdLinks  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`) // [text](url) keeps its text
	links    = regexp.MustCompile(`(?i)\b(?:https?|ftp|magnet|file):\S+|\bwww\.\S+`)
	tags     = regexp.MustCompile(`</?[a-zA-Z][^<>]*>`) // only what reads as an HTML tag
	emphasis = regexp.MustCompile("\\*+|`+|(?:^|\\s)_{1,2}|_{1,2}(?:\\s|$)|~~")
	heading  = regexp.MustCompile(`(?m)^\s*(?:#{1,6}|>)\s+`)
)

// Explain turns the model's thought into the explanation shown next to an
// approval: its words, without links, HTML or Markdown that could dress up
// a request. Everything else (parentheses, comparisons, snake_case names)
// stays, since it is part of what the user is asked to judge.
func Explain(thought string) string {
	t := mdLinks.ReplaceAllString(thought, "$1")
	t = links.ReplaceAllString(t, "")
	t = tags.ReplaceAllString(t, "")
	t = heading.ReplaceAllString(t, "")
	t = emphasis.ReplaceAllStringFunc(t, func(m string) string {
		if strings.TrimSpace(m) == "" || strings.Trim(m, " \t\n_*`~") == "" && strings.ContainsAny(m, " \t\n") {
			return " "
		}
		return ""
	})
	t = strings.Join(strings.Fields(t), " ")
	if utf8.RuneCountInString(t) > 500 {
		t = string([]rune(t)[:500]) + "…"
	}
	return t
}

// slot takes one of the concurrent-turn slots, or answers 503.
func (s *Server) slot(w http.ResponseWriter, r *http.Request) (func(), bool) {
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots }, true
	default:
		s.fail(w, r, http.StatusServiceUnavailable, "too_busy", fmt.Sprintf("%d turns are running (MMCP_MAX_CONCURRENT_TURNS); try again shortly", s.Limits.MaxConcurrentTurns), true)
		return nil, false
	}
}

// session finds the session id names, or answers 404.
func (s *Server) session(w http.ResponseWriter, r *http.Request, id string) (store.Session, bool) {
	ctx := r.Context()
	sess, err := s.Store.Session(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, "session_not_found", fmt.Sprintf("no session %q; omit session_id to start a new one", id), false)
		return store.Session{}, false
	}
	if err != nil {
		s.internal(w, r, err)
		return store.Session{}, false
	}
	return sess, true
}

// lock gives the caller the session's one turn, or answers 409 at once.
func (s *Server) lock(w http.ResponseWriter, r *http.Request, id string) bool {
	if !s.tryLock(id) {
		s.fail(w, r, http.StatusConflict, "session_busy", busyMessage, true)
		return false
	}
	return true
}

const busyMessage = "a turn is already running in this session; retry when it ends"

// tryLock gives the caller the session's one turn, or reports that it is
// taken.
func (s *Server) tryLock(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[id] {
		return false
	}
	s.busy[id] = true
	return true
}

// lockNew marks a session nobody else can know yet as busy.
func (s *Server) lockNew(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[id] = true
}

func (s *Server) unlock(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, id)
}

// turnFailed maps a turn's error to a status and a code a client can act on.
func turnError(err error) (status int, code string, retryable bool) {
	var invalid *loop.InvalidReplyError
	var overflow *loop.ContextOverflowError
	var timeout *TurnTimeoutError
	switch {
	case errors.Is(err, ErrShuttingDown):
		return http.StatusServiceUnavailable, "shutting_down", true
	case errors.As(err, &timeout):
		// Retryable: the model may answer faster once loaded, or the
		// setting may be raised.
		return http.StatusGatewayTimeout, "timeout", true
	case errors.Is(err, llm.ErrModelMissing):
		return http.StatusServiceUnavailable, "model_missing", false
	case errors.Is(err, llm.ErrUnauthorized):
		// The key setting is wrong: trying again cannot help.
		return http.StatusServiceUnavailable, "model_unauthorized", false
	case errors.Is(err, llm.ErrSchemaRefused):
		return http.StatusBadGateway, "schema_refused", false
	case errors.Is(err, llm.ErrUnavailable):
		return http.StatusServiceUnavailable, "model_unavailable", true
	case errors.Is(err, llm.ErrTimeout):
		// Retryable: a model still loading answers in time once loaded.
		return http.StatusGatewayTimeout, "model_timeout", true
	case errors.As(err, &invalid):
		return http.StatusBadGateway, "invalid_model_reply", false
	case errors.Is(err, llm.ErrBadResponse): // ErrServerError, ErrReplyTooLarge
		return http.StatusBadGateway, "model_error", true
	case errors.As(err, &overflow), errors.Is(err, llm.ErrContextTooLong):
		// The settings' fault, not the request's (its size has its own
		// limit): the message says which to change; trying again cannot
		// help.
		return http.StatusInternalServerError, "context_overflow", false
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout", true
	}
	return http.StatusInternalServerError, "internal", true
}
