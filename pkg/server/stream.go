package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// Heartbeat is the comment line a stream gets when nothing else was sent for
// Limits.StreamHeartbeat: clients ignore comments, and the bytes keep proxies
// and clients from timing out while the model or a tool is slow. No blank
// line follows it: a blank line ends an event, and some clients (openai-go)
// fail on an event with no data; the comment belongs to the next event.
const Heartbeat = ": keepalive\n"

// sseWriter is a stream's one way out. The turn's events and the heartbeats
// share its lock, so they never interleave, and every write is flushed at
// once.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu   sync.Mutex
	last time.Time // when anything was last written

	quit, done chan struct{}
	stopOnce   sync.Once
}

// newSSEWriter answers 200 with an event stream's headers and starts the
// heartbeats: a Heartbeat whenever nothing was written for every. Call stop
// before the handler returns.
func newSSEWriter(w http.ResponseWriter, every time.Duration) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies must not hold the stream back
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w), last: time.Now(),
		quit: make(chan struct{}), done: make(chan struct{})}
	go s.heartbeat(every)
	return s
}

func (s *sseWriter) write(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeLocked(text)
}

func (s *sseWriter) writeLocked(text string) {
	_, _ = io.WriteString(s.w, text)
	_ = s.rc.Flush() // a client that left is noticed through the request's context
	s.last = time.Now()
}

// heartbeat wakes when the stream has been quiet for every, and writes a
// Heartbeat if nothing was written meanwhile; else it sleeps until every
// after the last write.
func (s *sseWriter) heartbeat(every time.Duration) {
	defer close(s.done)
	if every <= 0 {
		return
	}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		s.mu.Lock()
		quiet := time.Since(s.last)
		if quiet >= every {
			s.writeLocked(Heartbeat)
			quiet = 0
		}
		s.mu.Unlock()
		t.Reset(every - quiet)
	}
}

// stop ends the heartbeats, once the turn is over; it returns when none can
// be written any more, so the handler may return after it. Calling it again
// does nothing.
func (s *sseWriter) stop() {
	s.stopOnce.Do(func() {
		close(s.quit)
		<-s.done
	})
}

// output is where a turn's outcome goes: one JSON answer, or, when the client
// asked for text/event-stream, the turn's events as Server-Sent Events ending
// with the same answer.
type output struct {
	s   *Server
	w   http.ResponseWriter
	r   *http.Request
	sse *sseWriter // nil for a JSON answer
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

// output opens the turn's answer; the handler must call close before it
// returns.
func (s *Server) output(w http.ResponseWriter, r *http.Request, session string) *output {
	o := &output{s: s, w: w, r: r}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		o.sse = newSSEWriter(w, s.Limits.StreamHeartbeat)
		o.send("start", startEvent{Type: "start", TraceID: trace.ID(r.Context()), SessionID: session})
	}
	return o
}

// close stops a stream's heartbeats: the turn is over.
func (o *output) close() {
	if o.sse != nil {
		o.sse.stop()
	}
}

// event streams one loop event; the JSON form has no use for them.
func (o *output) event(e loop.Event) {
	if o.sse == nil {
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
	o.sse.write(fmt.Sprintf("event: %s\ndata: %s\n\n", event, data))
}

func (o *output) done(resp ChatResponse) {
	if o.sse != nil {
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
	if clientLeft(o.r) {
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
	if o.sse == nil {
		o.s.fail(o.w, o.r, status, code, msg, retryable)
		return
	}
	noteFailure(o.r, code, msg)
	o.send("error", ErrorBody{Error: ErrorDetail{Code: code, Message: msg, Retryable: retryable}, TraceID: trace.ID(o.r.Context())})
}
