package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/page"
)

// TestPageRoutes: the page is served without the token (it asks for it
// itself), with its Content-Security-Policy, behind the same Host check as
// the API; the API it calls still wants the token, and /readyz names the
// model.
func TestPageRoutes(t *testing.T) {
	e := start(t, "s3cret")
	get := func(path, host string, headers ...string) (*http.Response, []byte) {
		return e.sendRaw(t, rawRequest("GET", path, host, "", headers...))
	}
	resp, body := get("/", e.addr())
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(body), `<script src="/page/app.js"`) {
		t.Fatalf("GET /: %d %q\n%.200s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != page.ContentSecurityPolicy || !strings.Contains(got, "script-src 'self'") {
		t.Errorf("CSP: %q", got)
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Trace-Id") == "" {
		t.Errorf("headers: %v", resp.Header)
	}
	etag := resp.Header.Get("ETag")
	for path, typ := range map[string]string{"/page/app.js": "text/javascript", "/page/app.css": "text/css", "/page/icon.svg": "image/svg+xml"} {
		resp, body := get(path, e.addr())
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), typ) || len(body) == 0 {
			t.Errorf("GET %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	// A reload with the ETag downloads nothing.
	if resp, _ := get("/", e.addr(), "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("GET / with If-None-Match: %d, want 304", resp.StatusCode)
	}
	// A rebound name gets no page either.
	if resp, body := get("/", "evil.example:8787"); resp.StatusCode != http.StatusMisdirectedRequest || errorCode(body) != "host_not_allowed" {
		t.Errorf("GET / with a foreign Host: %d %s", resp.StatusCode, body)
	}
	// Only the page's own files: anything else is the API's, token first.
	for _, path := range []string{"/page/", "/page/nothing.js", "/index.html", "/v1/sessions"} {
		if resp, body := get(path, e.addr()); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d %s", path, resp.StatusCode, body)
		}
	}
	if resp, body := e.sendRaw(t, rawRequest("POST", "/", e.addr(), `{}`, "Content-Type", "application/json", "Authorization", "Bearer s3cret")); resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d %s", resp.StatusCode, body)
	}
	resp, body = get("/readyz", e.addr(), "Authorization", "Bearer s3cret")
	var ready struct {
		Status, Model string
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &ready) != nil || ready.Model != "test-model" {
		t.Errorf("/readyz: %d %s", resp.StatusCode, body)
	}
}
