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
}

func (s *Server) output(w http.ResponseWriter, r *http.Request) *output {
	o := &output{s: s, w: w, r: r, sse: strings.Contains(r.Header.Get("Accept"), "text/event-stream")}
	if o.sse {
		o.rc = http.NewResponseController(w)
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no") // proxies must not hold the stream back
		w.WriteHeader(http.StatusOK)
		o.send("start", map[string]string{"trace_id": trace.ID(r.Context())})
	}
	return o
}

// event streams one loop event; the JSON form has no use for them.
func (o *output) event(e loop.Event) {
	if o.sse {
		o.send(string(e.Type), e)
	}
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
	o.send("error", ErrorBody{Error: ErrorDetail{Code: code, Message: msg, Retryable: retryable}, TraceID: trace.ID(o.r.Context())})
}
