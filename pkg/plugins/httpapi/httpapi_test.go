package httpapi_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

func client(t *testing.T, h http.HandlerFunc) *httpapi.Client {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	c, err := httpapi.New("TMDB", ts.URL+"/3/", "MMCP_PLUGIN_TMDB_BASE_URL", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.CredVar = "MMCP_PLUGIN_TMDB_API_KEY"
	c.Auth = func(r *http.Request) { r.Header.Set("Authorization", "Bearer token") }
	return c
}

func TestGet(t *testing.T) {
	var got *http.Request
	c := client(t, func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Write([]byte(`{"id":42}`))
	})
	var out struct{ ID int }
	if err := c.Get(context.Background(), "/search/movie", url.Values{"query": {"Dune"}}, &out); err != nil || out.ID != 42 {
		t.Fatalf("%v %+v", err, out)
	}
	if got.URL.Path != "/3/search/movie" || got.URL.Query().Get("query") != "Dune" || got.Header.Get("Authorization") != "Bearer token" || got.Header.Get("Accept") != "application/json" {
		t.Errorf("request: %s %v", got.URL, got.Header)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		status int
		header string
		body   string
		kind   error
		msg    string
	}{
		{401, "", `{"status_message":"Invalid API key: You must be granted a valid key."}`, httpapi.ErrAuth,
			"TMDB refused the credentials (401): Invalid API key: You must be granted a valid key.; check MMCP_PLUGIN_TMDB_API_KEY"},
		{404, "", `{"message":"NotFound"}`, httpapi.ErrNotFound, "TMDB: not found (GET /x): NotFound"},
		{409, "", `[{"errorMessage":"This movie has already been added"}]`, httpapi.ErrConflict, "This movie has already been added"},
		{429, "7", ``, httpapi.ErrRateLimited, "TMDB is rate limiting requests; try again in 7s"},
		{500, "", `<html>oops</html>`, httpapi.ErrService, "TMDB failed (500 Internal Server Error on GET /x)"},
		{200, "", `{"id":`, httpapi.ErrBadResponse, "TMDB answered GET /x with something that is not the expected JSON"},
		{400, "", `{"error":"bad year"}`, httpapi.ErrBadResponse, "TMDB refused GET /x (400 Bad Request): bad year"},
	}
	for _, tt := range tests {
		c := client(t, func(w http.ResponseWriter, r *http.Request) {
			if tt.header != "" {
				w.Header().Set("Retry-After", tt.header)
			}
			w.WriteHeader(tt.status)
			w.Write([]byte(tt.body))
		})
		var out map[string]any
		err := c.Get(context.Background(), "/x", nil, &out)
		if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%d: %v, want %v containing %q", tt.status, err, tt.kind, tt.msg)
		}
	}
}

func TestUnreachableAndSlow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, _ := httpapi.New("Radarr", "http://"+addr, "MMCP_PLUGIN_RADARR_URL", time.Second)
	err = c.Get(context.Background(), "/api/v3/movie", nil, nil)
	if !errors.Is(err, httpapi.ErrUnreachable) || !strings.Contains(err.Error(), "Radarr is unreachable at http://"+addr) || !strings.Contains(err.Error(), "check MMCP_PLUGIN_RADARR_URL") {
		t.Errorf("refused: %v", err)
	}

	block := make(chan struct{})
	defer close(block)
	c = client(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	c.HTTP.Timeout = 50 * time.Millisecond
	if err := c.Get(context.Background(), "/x", nil, nil); !errors.Is(err, httpapi.ErrUnreachable) || !strings.Contains(err.Error(), "did not answer within 50ms") {
		t.Errorf("slow: %v", err)
	}
	// The caller's own deadline is the caller's to report.
	c.HTTP.Timeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := c.Get(ctx, "/x", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller deadline: %v", err)
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "localhost:8989", "http://"} {
		if _, err := httpapi.New("Sonarr", u, "MMCP_PLUGIN_SONARR_URL", time.Second); err == nil || !strings.Contains(err.Error(), "MMCP_PLUGIN_SONARR_URL") {
			t.Errorf("%q: %v", u, err)
		}
	}
}

func TestText(t *testing.T) {
	if got := httpapi.Text("  a\n\tb  ", 10); got != "a b" {
		t.Errorf("%q", got)
	}
	if got := httpapi.Text("ééééé", 5); got != "éé..." {
		t.Errorf("%q", got)
	}
}

// TestTransientKinds: what may pass on a later call says so (a Transient()
// method the plugin SDK reads): 5xx, 429, a timeout, an unreachable
// service; the rest does not.
func TestTransientKinds(t *testing.T) {
	transient := func(err error) bool {
		var tr interface{ Transient() bool }
		return errors.As(err, &tr) && tr.Transient()
	}
	for status, want := range map[int]bool{500: true, 502: true, 503: true, 429: true, 404: false, 401: false, 409: false, 400: false} {
		c := client(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) })
		if err := c.Get(context.Background(), "/x", nil, nil); err == nil || transient(err) != want {
			t.Errorf("%d: %v, transient %v", status, err, transient(err))
		}
	}
	slow := client(t, func(w http.ResponseWriter, r *http.Request) { time.Sleep(200 * time.Millisecond) })
	slow.HTTP.Timeout = 50 * time.Millisecond
	if err := slow.Get(context.Background(), "/x", nil, nil); !transient(err) {
		t.Errorf("timeout: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, _ := httpapi.New("Radarr", "http://"+addr, "MMCP_PLUGIN_RADARR_URL", time.Second)
	if err := c.Get(context.Background(), "/x", nil, nil); !transient(err) || !errors.Is(err, httpapi.ErrUnreachable) {
		t.Errorf("unreachable: %v", err)
	}
}
