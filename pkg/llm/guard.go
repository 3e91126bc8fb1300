package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// timeout is the cause a chat's watchdog cancels it with: which setting's
// bound passed, and after how many pieces.
type timeout struct {
	setting string
	after   time.Duration
	pieces  int
}

func (t *timeout) Error() string { return t.setting + " passed" }

// watchdog cuts a streamed chat that is silent too long: first until the
// first piece (the prompt is being read, the model perhaps loaded), then idle
// between pieces. A model that keeps writing is never cut: its length is
// bounded by the reply caps and the context, not by a clock. Both backends
// use it, so a model server of either kind is held to the same settings.
type watchdog struct {
	cancel      context.CancelCauseFunc
	first, idle time.Duration
	timer       *time.Timer
	pieces      atomic.Int64
}

func newWatchdog(cancel context.CancelCauseFunc, first, idle time.Duration) *watchdog {
	w := &watchdog{cancel: cancel, first: first, idle: idle}
	if first > 0 {
		w.timer = time.AfterFunc(first, w.fire)
	}
	return w
}

func (w *watchdog) fire() {
	n := int(w.pieces.Load())
	if n == 0 {
		w.cancel(&timeout{setting: "MMCP_LLM_TIMEOUT", after: w.first})
		return
	}
	w.cancel(&timeout{setting: "MMCP_LLM_IDLE_TIMEOUT", after: w.idle, pieces: n})
}

// piece restarts the idle bound. A timer that already fired stays fired: the
// call is cancelled, and this piece is the last one read.
func (w *watchdog) piece() {
	w.pieces.Add(1)
	if w.timer != nil && w.idle > 0 {
		w.timer.Reset(w.idle)
	}
}

func (w *watchdog) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// transport keeps connections to the model server for reuse: the default
// keeps only two idle per host, and under concurrent turns most calls would
// dial again. Idle ones close soon: the server is near, and a burst should
// not leave its connections (and their goroutines) behind for long.
func transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 64
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 5 * time.Second
	return t
}

// errTooLarge stops the api client's read loop; chatOnce replaces it with an
// error for a person.
var errTooLarge = errors.New("reply too large")

// bodyCapKey marks, in a request's context, the bodyCap capped enforces.
type bodyCapKey struct{}

// bodyCap is the most bytes one response body may have, and the flag set
// when a body passed it.
type bodyCap struct {
	limit int64
	over  atomic.Bool
}

// capped is a RoundTripper whose response bodies fail past their cap, so that
// no reply, however it is cut into lines or events, is read whole into
// memory. Only requests whose context carries a bodyCap are capped: Ollama's
// /api/show (Check) is small, trusted to be, and left alone.
type capped struct{ base http.RoundTripper }

func (t capped) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if c, ok := req.Context().Value(bodyCapKey{}).(*bodyCap); ok {
		resp.Body = &cappedBody{ReadCloser: resp.Body, cap: c}
	}
	return resp, nil
}

// cappedBody fails, and sets the cap's flag, as soon as more than its limit
// has been read: it reads one byte past the bound to know, and no further.
type cappedBody struct {
	io.ReadCloser
	read int64
	cap  *bodyCap
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.read > b.cap.limit {
		return 0, b.err()
	}
	if rest := b.cap.limit + 1 - b.read; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if b.read > b.cap.limit {
		b.cap.over.Store(true)
		return n, b.err()
	}
	return n, err
}

func (b *cappedBody) err() error { return fmt.Errorf("response body over %d bytes", b.cap.limit) }
