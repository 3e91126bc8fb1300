package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessageBytes bounds one message from a server: a line on a command's
// stdout, an event of an HTTP event stream, a whole JSON response body. A
// server is other people's code; past this it is treated as broken. It is
// well above the 1 MiB a result is cut to, so a large result still arrives
// (and is cut) rather than failing.
const MaxMessageBytes = 4 << 20

// ErrTooLarge is what a call, a listing or a ping fails with once the server
// has sent a message over MaxMessageBytes; the session is over by then.
var ErrTooLarge = fmt.Errorf("the MCP server sent a message over the %d MiB limit", MaxMessageBytes>>20)

// tripwire records, once for a session, that the server broke the limit.
type tripwire struct {
	once    sync.Once
	tripped chan struct{}
	onTrip  func() // ends the session's process at once
}

func newTripwire() *tripwire { return &tripwire{tripped: make(chan struct{})} }

func (w *tripwire) trip() error {
	w.once.Do(func() {
		close(w.tripped)
		if w.onTrip != nil {
			w.onTrip()
		}
	})
	return ErrTooLarge
}

func (w *tripwire) isTripped() bool {
	select {
	case <-w.tripped:
		return true
	default:
		return false
	}
}

// Framing: how a limited stream is cut into messages.
type framing int

const (
	framingLines  framing = iota // stdio: one message a line
	framingEvents                // an event stream: events end at a blank line
	framingWhole                 // a response body: one message in all
)

// limitedReader fails, and trips its wire, once one message of r is longer
// than MaxMessageBytes; the SDK then sees a read error and ends the session,
// having buffered at most that much.
type limitedReader struct {
	r       io.Reader
	framing framing
	wire    *tripwire
	n       int // bytes of the current message
	lineLen int // bytes of the current line (events), \r not counted
	err     error
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.r.Read(p)
	for i := range n {
		c := p[i]
		switch {
		case c == '\n' && l.framing == framingLines:
			l.n = 0
			continue
		case c == '\n' && l.framing == framingEvents:
			if l.lineLen == 0 {
				l.n = 0 // a blank line ends the event
				continue
			}
			l.lineLen = 0
		case c != '\r':
			l.lineLen++
		}
		l.n++
		if l.n > MaxMessageBytes {
			l.err = l.wire.trip()
			return i, l.err
		}
	}
	return n, err
}

func (l *limitedReader) Close() error {
	if c, ok := l.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// limitedBodies caps every response body a URL server sends.
type limitedBodies struct {
	wire *tripwire
	next http.RoundTripper
}

func (t *limitedBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	f := framingWhole
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "text/event-stream" {
		f = framingEvents
	}
	resp.Body = &limitedReader{r: resp.Body, framing: f, wire: t.wire}
	return resp, nil
}

// commandTransport runs a command server with its stdout read through a
// limitedReader; the SDK's own CommandTransport reads 16 MiB a line.
type commandTransport struct {
	cmd   *exec.Cmd
	grace time.Duration
	wire  *tripwire
}

func (t *commandTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	t.wire.onTrip = func() { _ = t.cmd.Process.Kill() }
	grace := t.grace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	w := &stdinCloser{stdin: stdin, cmd: t.cmd, grace: grace, waited: make(chan struct{})}
	go func() {
		w.waitErr = t.cmd.Wait()
		close(w.waited)
	}()
	// The SDK's own per-line cap is off: ours is lower and says why.
	return (&sdk.IOTransport{
		Reader:        io.NopCloser(&limitedReader{r: stdout, framing: framingLines, wire: t.wire}),
		Writer:        w,
		MaxLineLength: -1,
	}).Connect(ctx)
}

// stdinCloser ends a command server as MCP asks: stdin closed, then grace
// to exit, then SIGTERM, then SIGKILL.
type stdinCloser struct {
	stdin   io.WriteCloser
	cmd     *exec.Cmd
	grace   time.Duration
	waited  chan struct{}
	waitErr error
}

func (w *stdinCloser) Write(p []byte) (int, error) { return w.stdin.Write(p) }

func (w *stdinCloser) Close() error {
	_ = w.stdin.Close()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case <-w.waited:
			return exitErr(w.waitErr)
		case <-time.After(w.grace):
		}
		_ = w.cmd.Process.Signal(sig)
	}
	<-w.waited
	return exitErr(w.waitErr)
}

// exitErr drops the error of a server that was signalled or exited non-zero:
// the session is over either way, and why is logged elsewhere.
func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil
	}
	return err
}
