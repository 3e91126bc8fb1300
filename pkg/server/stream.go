package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// output is where a turn's outcome goes: one JSON answer, or, when the client
// asked for text/event-stream, the turn's events as Server-Sent Events ending
// with the same answer.
type output struct {
	s   *Server
	w   http.ResponseWriter
	r   *http.Request
	sse bool
	rc  *http.ResponseController
	// request is the loop's action_request, held back until the approval it
	// asks for exists and has an id to answer.
	request *loop.Event
}

// startEvent opens a stream: the ids a client needs before anything else.
type startEvent struct {
	Type      string `json:"type"`
	TraceID   string `json:"trace_id"`
	SessionID string `json:"session_id"`
}

// actionRequestEvent is the loop's action_request with what answering it
// takes: the session and the approval, and the explanation shown beside it.
type actionRequestEvent struct {
	loop.Event
	SessionID   string `json:"session_id"`
	ApprovalID  string `json:"approval_id"`
	Explanation string `json:"explanation"`
}

func (s *Server) output(w http.ResponseWriter, r *http.Request, session string) *output {
	o := &output{s: s, w: w, r: r, sse: strings.Contains(r.Header.Get("Accept"), "text/event-stream")}
	if o.sse {
		o.rc = http.NewResponseController(w)
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no") // proxies must not hold the stream back
		w.WriteHeader(http.StatusOK)
		o.send("start", startEvent{Type: "start", TraceID: trace.ID(r.Context()), SessionID: session})
	}
	return o
}

// event streams one loop event; the JSON form has no use for them.
func (o *output) event(e loop.Event) {
	if !o.sse {
		return
	}
	switch e.Type {
	case loop.EventError:
		// The one error event is the server's, with its code (fail).
		return
	case loop.EventActionRequest:
		o.request = &e // sent by done, with the approval's id
		return
	}
	o.send(string(e.Type), e)
}

func (o *output) send(event string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	// Event data is one line: JSON has no raw newlines.
	fmt.Fprintf(o.w, "event: %s\ndata: %s\n\n", event, data)
	_ = o.rc.Flush() // a client that left is noticed through the request's context
}

func (o *output) done(resp ChatResponse) {
	if o.sse {
		if o.request != nil && resp.Type == TypeActionRequest {
			o.send(string(loop.EventActionRequest), actionRequestEvent{Event: *o.request,
				SessionID: resp.SessionID, ApprovalID: resp.ApprovalID, Explanation: resp.Explanation})
		}
		o.send("done", resp)
		return
	}
	o.s.reply(o.w, http.StatusOK, resp)
}

func (o *output) turnFailed(err error) {
	if o.r.Context().Err() != nil && !shuttingDown(o.r) {
		o.s.log().InfoContext(o.r.Context(), "turn cancelled by the client", "err", err)
		return
	}
	status, code, retryable := turnError(err)
	if code == "internal" {
		o.failInternal(err)
		return
	}
	o.fail(status, code, err.Error(), retryable)
}

func (o *output) failInternal(err error) {
	// The turn has run by now: the message says its tools may have acted.
	if status, code, msg, ok := storageProblem(err, true); ok {
		o.s.log().ErrorContext(o.r.Context(), "storage failure", "err", err)
		o.fail(status, code, msg, false)
		return
	}
	o.s.log().ErrorContext(o.r.Context(), "internal error", "err", err)
	o.fail(http.StatusInternalServerError, "internal", "internal error; the log has details under this trace id", true)
}

func (o *output) fail(status int, code, msg string, retryable bool) {
	if !o.sse {
		o.s.fail(o.w, o.r, status, code, msg, retryable)
		return
	}
	noteFailure(o.r, code, msg)
	o.send("error", ErrorBody{Error: ErrorDetail{Code: code, Message: msg, Retryable: retryable}, TraceID: trace.ID(o.r.Context())})
}
