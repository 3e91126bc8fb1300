package server_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/server"
)

// limitedServer serves h as cmd/mmcpd does: bounded headers and connections.
func limitedServer(t *testing.T, h http.Handler, maxConns int) (addr string, ln *server.LimitedListener) {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ln = server.LimitListener(ts.Listener, maxConns)
	ts.Listener = ln
	ts.Config.ConnState = ln.ConnState // httptest chains its own hook to it
	ts.Config.MaxHeaderBytes = server.MaxHeaderBytes
	ts.Config.ReadHeaderTimeout = server.ReadHeaderTimeout
	ts.Start()
	t.Cleanup(ts.Close)
	return ln.Addr().String(), ln
}

// exchange sends request on a fresh connection and reads the response's
// status, within limit.
func exchange(addr, request string, limit time.Duration) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, limit)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(limit))
	if _, err := io.WriteString(conn, request); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", conn.LocalAddr(), err)
	}
	defer resp.Body.Close()
	// The body may end in a reset: a server that refuses a request closes
	// the connection with the rest of it unread. The status is what counts.
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func healthz(addr string) string {
	return "GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n\r\n"
}

// closedByPeer reports whether the server closed c: a read sees the end
// instead of waiting.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	ne, timeout := err.(net.Error)
	return err != nil && !(timeout && ne.Timeout())
}

func TestHeaderLimit(t *testing.T) {
	addr, _ := limitedServer(t, start(t, "").handler, 8)
	tests := []struct {
		size   int
		status int
	}{
		{1 << 10, 200},
		{60 << 10, 200},
		{100 << 10, 431},
		{1 << 20, 431},
	}
	for _, tt := range tests {
		req := "GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\nX-Big: " + strings.Repeat("a", tt.size) + "\r\nConnection: close\r\n\r\n"
		if status, err := exchange(addr, req, 10*time.Second); status != tt.status {
			t.Errorf("%d bytes of header: %d %v, want %d", tt.size, status, err, tt.status)
		}
	}
}

// TestSlowHeadersMakeRoom: at the limit, the connection that has waited
// longest without a request is dropped for the new one; one serving a
// request never is, and when all serve one the newcomer is refused.
func TestSlowHeadersMakeRoom(t *testing.T) {
	const max = 4
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		w.WriteHeader(200)
	})
	addr, ln := limitedServer(t, h, max)

	// max connections that never finish their headers.
	var slow []net.Conn
	for i := range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\nX-%d: ", addr, i)
		slow = append(slow, c)
		time.Sleep(20 * time.Millisecond) // so that their ages differ
	}
	for deadline := time.Now().Add(5 * time.Second); ln.Open() < max && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if status, err := exchange(addr, healthz(addr), 2*time.Second); status != 200 {
		t.Fatalf("healthz at the limit: %d %v", status, err)
	}
	if !closedByPeer(slow[0]) {
		t.Error("the longest-waiting connection is still open")
	}
	for i, c := range slow[1:] {
		if closedByPeer(c) {
			t.Errorf("slow connection %d was closed, only the oldest should be", i+1)
		}
	}
	if n := ln.Open(); n > max {
		t.Errorf("%d connections open, limit %d", n, max)
	}

	// Connections serving requests are kept; a newcomer is refused.
	for _, c := range slow {
		c.Close()
	}
	var wg sync.WaitGroup
	statuses := make(chan int, max)
	for range max {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, _ := exchange(addr, "GET /slow HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n", 10*time.Second)
			statuses <- status
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if busy := ln.Open(); busy == max {
			break
		}
	}
	time.Sleep(50 * time.Millisecond) // let the requests be read
	if status, err := exchange(addr, healthz(addr), 2*time.Second); err == nil {
		t.Errorf("with every connection serving a request, a new one got %d", status)
	}
	close(release)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Errorf("a request in progress ended with %d, want 200", s)
		}
	}
}

// TestHealthzUnderHeaderFlood is the review's attack scaled down: three
// times the limit of connections dribbling their headers, and a few sending
// a megabyte of headers at once, each opening again when dropped; /healthz
// answers in time throughout and the server never holds more than its limit.
func TestHealthzUnderHeaderFlood(t *testing.T) {
	const limit = 32
	addr, ln := limitedServer(t, start(t, "").handler, limit)
	const flood = 3 * time.Second
	stop := time.Now().Add(flood)
	var wg sync.WaitGroup
	// attack opens connections one after another (a bounded number, for a
	// bounded time), each sending a request line and then what send sends.
	attack := func(pause time.Duration, send func(net.Conn) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for dials := 0; dials < 20 && time.Now().Before(stop); dials++ {
				if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
					c.SetDeadline(stop)
					if _, err := fmt.Fprintf(c, "GET /v1/sessions HTTP/1.1\r\nHost: %s\r\n", addr); err == nil {
						send(c)
					}
					c.Close()
				}
				// Jittered, so that the attackers do not come back in
				// waves: a burst of new connections larger than the
				// limit, all unread, is indistinguishable from a probe.
				time.Sleep(pause/2 + rand.N(pause))
			}
		}()
	}
	for range 3 * limit { // a header line every 50 ms
		attack(250*time.Millisecond, func(c net.Conn) error {
			for i := 0; time.Now().Before(stop); i++ {
				if _, err := fmt.Fprintf(c, "X-Slow-%d: %s\r\n", i, strings.Repeat("s", 100)); err != nil {
					return err
				}
				time.Sleep(50 * time.Millisecond)
			}
			return nil
		})
	}
	for range 4 { // 1 MB of headers at once
		attack(200*time.Millisecond, func(c net.Conn) error {
			_, err := fmt.Fprintf(c, "X-Big: %s\r\n\r\n", strings.Repeat("b", 1<<20))
			return err
		})
	}
	// Probe once the flood is on: every slot taken, the first burst read.
	for deadline := time.Now().Add(time.Second); ln.Open() < limit && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	probes, worst := 0, time.Duration(0)
	for time.Now().Before(stop) {
		begin := time.Now()
		status, err := exchange(addr, healthz(addr), 2*time.Second)
		took := time.Since(begin)
		worst = max(worst, took)
		probes++
		if status != 200 {
			t.Errorf("healthz under the flood: %d %v after %s", status, err, took.Round(time.Millisecond))
		}
		if n := ln.Open(); n > limit {
			t.Errorf("%d connections open, limit %d", n, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("%d healthz probes, slowest %s", probes, worst.Round(time.Millisecond))
}
