package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawExchange sends request on a fresh connection to addr and reads one
// response, within limit.
func rawExchange(addr, request string, limit time.Duration) (*http.Response, error) {
	conn, err := net.DialTimeout("tcp", addr, limit)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(limit)); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(conn, request); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	// The body may end in a reset: a server that refuses a request closes
	// the connection with the rest of it unread. The status is what counts.
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

func get(path, host string, headers ...string) string {
	return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", path, host, strings.Join(headers, ""))
}

// TestHeaderAndConnectionLimits: the daemon as started by serve refuses
// oversized headers, holds a bounded number of connections, keeps answering
// /healthz while many connections dribble their headers, and reads
// MMCP_ALLOWED_HOSTS.
func TestHeaderAndConnectionLimits(t *testing.T) {
	const maxConns = 16
	addr, logs, _ := startDaemon(t, []string{
		"MMCP_OLLAMA_HOST=http://" + freeAddr(t), // no model needed
		"MMCP_PLUGINS_DIR=" + t.TempDir(),
		fmt.Sprintf("MMCP_MAX_CONNECTIONS=%d", maxConns),
		"MMCP_ALLOWED_HOSTS=nas.local",
	})

	headers := []struct {
		name   string
		size   int
		status int
	}{
		{"under the limit", 60 << 10, 200},
		{"over the limit", 100 << 10, 431},
	}
	for _, h := range headers {
		resp, err := rawExchange(addr, get("/v1/sessions", addr, "X-Big: "+strings.Repeat("a", h.size)+"\r\n"), 10*time.Second)
		if err != nil || resp.StatusCode != h.status {
			t.Errorf("header %s (%d bytes): %v %v, want %d", h.name, h.size, resp, err, h.status)
		}
	}

	hosts := []struct {
		host   string
		status int
	}{
		{"nas.local:8787", 200},
		{"rebind.evil.example", 421},
	}
	for _, h := range hosts {
		resp, err := rawExchange(addr, get("/v1/sessions", h.host), 10*time.Second)
		if err != nil || resp.StatusCode != h.status {
			t.Errorf("Host %s: %v %v, want %d", h.host, resp, err, h.status)
		}
	}

	// Four times the limit of connections, each sending its headers a few
	// bytes at a time, for a bounded while.
	const attackers = 4 * maxConns
	const flood = 2500 * time.Millisecond
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	dialled := time.Now()
	for range attackers {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dialling: %v", err)
		}
		conns = append(conns, c)
	}
	stop := time.Now().Add(flood)
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := io.WriteString(c, "GET /v1/sessions HTTP/1.1\r\nHost: "+addr+"\r\n"); err != nil {
				return
			}
			for i := 0; time.Now().Before(stop); i++ {
				if _, err := fmt.Fprintf(c, "X-Slow-%d: %s\r\n", i, strings.Repeat("b", 512)); err != nil {
					return // closed by the daemon
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	// /healthz answers throughout.
	for time.Now().Before(stop) {
		start := time.Now()
		resp, err := rawExchange(addr, get("/healthz", addr), 2*time.Second)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("healthz under load after %s: %v %v", time.Since(start).Round(time.Millisecond), resp, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	wg.Wait()

	// The daemon holds no more than its limit: the others were closed. A
	// loaded machine may still be finishing the evictions the last
	// newcomers caused, so look again until it is done, but stop well
	// before the 5 s header timeout (from the dial) could close them instead.
	settle := dialled.Add(4500 * time.Millisecond)
	open := len(conns)
	closed := make([]bool, len(conns))
	for open > maxConns && time.Now().Before(settle) {
		open = 0
		for i, c := range conns {
			if closed[i] {
				continue
			}
			c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					open++
					continue
				}
			}
			closed[i] = true
		}
	}
	if open > maxConns {
		t.Errorf("%d of %d slow connections still open, want at most %d (MMCP_MAX_CONNECTIONS)", open, attackers, maxConns)
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", logs)
	}
}

// TestReachable: mmcpd chat builds its URL from MMCP_LISTEN_ADDR; a wildcard
// host must become one the daemon accepts as Host.
func TestReachable(t *testing.T) {
	for base, want := range map[string]string{
		"http://:8787":            "http://127.0.0.1:8787",
		"http://0.0.0.0:8787":     "http://127.0.0.1:8787",
		"http://[::]:8787":        "http://[::1]:8787",
		"http://127.0.0.1:8787":   "http://127.0.0.1:8787",
		"http://localhost:8787":   "http://localhost:8787",
		"http://nas.local:8787":   "http://nas.local:8787",
		"http://192.168.1.5:8787": "http://192.168.1.5:8787",
	} {
		if got := reachable(base); got != want {
			t.Errorf("reachable(%q) = %q, want %q", base, got, want)
		}
	}
}
