package server

import (
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Limits on what a client can hold before it is authenticated: without them,
// a thousand connections each sending a megabyte of headers cost the daemon
// gigabytes.
const (
	// MaxHeaderBytes bounds a request's line and headers; net/http answers a
	// request past it with 431 before any handler runs.
	MaxHeaderBytes = 64 << 10
	// ReadHeaderTimeout is how long a client has to send them: ample on a
	// LAN, short enough that a connection dribbling bytes is soon dropped.
	ReadHeaderTimeout = 5 * time.Second
)

// LimitedListener holds at most a fixed number of connections. When a new
// one arrives at the limit, a connection without a request in progress (idle
// between requests, or still sending its headers) is closed to make room:
// the one that has sent the most without finishing a request, else the one
// that has waited longest. A real client's request is small and read at
// once, so connections that dribble or pile up headers go before it, and it
// is let in at once, /healthz included. A connection serving a request is
// never closed; when every connection serves one, the new one is closed at
// once.
//
// It must see the server's connection states: set the http.Server's
// ConnState to its ConnState method.
type LimitedListener struct {
	net.Listener
	limit int

	mu    sync.Mutex
	conns map[*limitedConn]struct{} // every connection not yet closed
}

// LimitListener wraps ln so that it holds at most limit connections.
func LimitListener(ln net.Listener, limit int) *LimitedListener {
	return &LimitedListener{Listener: ln, limit: limit, conns: map[*limitedConn]struct{}{}}
}

// limitedConn is a connection the listener counts. busy and since are
// guarded by the listener's mu.
type limitedConn struct {
	net.Conn
	l       *LimitedListener
	busy    bool         // a request is being served, or the connection was hijacked
	since   time.Time    // when it opened or last became idle
	pending atomic.Int64 // bytes read since then
}

// Read counts what the connection sends while it waits.
func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.pending.Add(int64(n))
	return n, err
}

// worse reports whether c should be closed before o: the one that has sent
// more without finishing a request, else the one that has waited longer.
func (c *limitedConn) worse(o *limitedConn) bool {
	cp, op := c.pending.Load(), o.pending.Load()
	return cp > op || cp == op && c.since.Before(o.since)
}

// Accept returns the next connection, making room for it if it must.
func (l *LimitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.Open() >= l.limit {
			// Let the connections just accepted read what they were sent
			// before one is picked to close: under load, this loop drains
			// the kernel's queue faster than they run, and unread they
			// all look alike, a real request among them.
			runtime.Gosched()
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
		// Every connection is serving a request: refusing now costs the
		// client a retry, queueing would cost the daemon memory.
		_ = c.Close()
	}
}

// admit counts c, closing the worst waiting connection if the listener is
// full; nil when there is none to close.
func (l *LimitedListener) admit(c net.Conn) *limitedConn {
	l.mu.Lock()
	var victim *limitedConn
	if len(l.conns) >= l.limit {
		for lc := range l.conns {
			if !lc.busy && (victim == nil || lc.worse(victim)) {
				victim = lc
			}
		}
		if victim == nil {
			l.mu.Unlock()
			return nil
		}
		delete(l.conns, victim) // its slot is the new connection's from now
	}
	lc := &limitedConn{Conn: c, l: l, since: time.Now()}
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	if victim != nil {
		// The server's read fails, and it cleans up as for any closed
		// connection.
		_ = victim.Conn.Close()
	}
	return lc
}

// ConnState tells the listener which connections serve a request; set it as
// the http.Server's ConnState.
func (l *LimitedListener) ConnState(c net.Conn, state http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateActive, http.StateHijacked:
		lc.busy = true
	case http.StateIdle:
		lc.busy, lc.since = false, time.Now()
		lc.pending.Store(0)
	}
}

// Open tells how many connections the listener holds now.
func (l *LimitedListener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Close frees the connection's slot.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
