package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// rawRequest writes an HTTP/1.1 request by hand: the client library would
// normalise the request line, the Host and the headers this file tests.
// headers are name, value pairs; a body gets its Content-Length.
func rawRequest(method, target, host, body string, headers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, target)
	if host != "" {
		fmt.Fprintf(&b, "Host: %s\r\n", host)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.WriteString(body)
	return b.String()
}

// sendRaw sends request on a fresh connection to the test server and reads
// one response.
func (e *env) sendRaw(t *testing.T, request string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", e.addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", request, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// addr is the test server's host:port.
func (e *env) addr() string { return strings.TrimPrefix(e.url, "http://") }

// errorCode reads the code of the error envelope, or "" when body is not one.
func errorCode(body []byte) string {
	var got server.ErrorBody
	if json.Unmarshal(body, &got) != nil {
		return ""
	}
	return got.Error.Code
}

// TestDNSRebindingAndCrossOrigin: with the default set-up (loopback, no
// token) a web page must not be able to run a turn or approve an action,
// neither through a rebound host name nor as a cross-origin "simple" request.
func TestDNSRebindingAndCrossOrigin(t *testing.T) {
	e := start(t, "", final("ran"))
	own := e.addr()
	_, port, _ := net.SplitHostPort(own)
	chatBody := `{"message":"hi","session_id":"nope"}` // passes the boundary, then 404 without a turn
	respondBody := `{"session_id":"nope","approval_id":"a","decision":"approve"}`
	jsonType := []string{"Content-Type", "application/json"}
	with := func(h ...string) []string { return append(append([]string{}, jsonType...), h...) }
	tests := []struct {
		name    string
		method  string
		path    string
		host    string
		body    string
		headers []string
		status  int
		code    string
	}{
		// The review's reproduction: text/plain, a foreign Origin, a rebound Host.
		{"rebound chat", "POST", "/v1/chat", "rebind.evil.example", `{"message":"hi"}`,
			[]string{"Content-Type", "text/plain", "Origin", "https://evil.example"}, 421, "host_not_allowed"},
		{"rebound respond", "POST", "/v1/chat/respond", "rebind.evil.example", respondBody,
			[]string{"Content-Type", "text/plain", "Origin", "https://evil.example"}, 421, "host_not_allowed"},
		{"rebound read", "GET", "/v1/sessions", "rebind.evil.example:" + port, "", nil, 421, "host_not_allowed"},
		{"rebound metrics-like route", "GET", "/v1/plugins", "rebind.evil.example", "", nil, 421, "host_not_allowed"},
		{"rebound unknown route", "GET", "/nope", "rebind.evil.example", "", nil, 421, "host_not_allowed"},
		{"rebound JSON chat", "POST", "/v1/chat", "rebind.evil.example:" + port, chatBody, jsonType, 421, "host_not_allowed"},
		{"other IP", "GET", "/v1/sessions", "10.0.0.1:" + port, "", nil, 421, "host_not_allowed"},
		{"localhost look-alike", "GET", "/v1/sessions", "localhost.evil.example", "", nil, 421, "host_not_allowed"},
		// Loopback names and addresses, any port.
		{"own address", "GET", "/v1/sessions", own, "", nil, 200, ""},
		{"localhost", "GET", "/v1/sessions", "localhost:" + port, "", nil, 200, ""},
		{"localhost other port", "GET", "/v1/sessions", "LocalHost:1", "", nil, 200, ""},
		{"localhost no port", "GET", "/v1/sessions", "localhost", "", nil, 200, ""},
		{"127/8", "GET", "/v1/sessions", "127.0.0.2:8787", "", nil, 200, ""},
		{"IPv6 loopback", "GET", "/v1/sessions", "[::1]:" + port, "", nil, 200, ""},
		// /healthz answers supervisors whatever the Host.
		{"healthz rebound", "GET", "/healthz", "rebind.evil.example", "", nil, 200, ""},
		// Cross-origin writes are refused even with a good Host.
		{"foreign origin chat", "POST", "/v1/chat", own, chatBody, with("Origin", "https://evil.example"), 403, "origin_not_allowed"},
		{"foreign origin respond", "POST", "/v1/chat/respond", own, respondBody, with("Origin", "https://evil.example"), 403, "origin_not_allowed"},
		{"foreign origin completions", "POST", "/v1/chat/completions", own, `{"messages":[]}`, with("Origin", "https://evil.example"), 403, "origin_not_allowed"},
		{"foreign origin rename", "PATCH", "/v1/sessions/nope", own, `{"title":"x"}`, with("Origin", "https://evil.example"), 403, "origin_not_allowed"},
		{"foreign origin delete", "DELETE", "/v1/sessions/nope", own, "", []string{"Origin", "https://evil.example"}, 403, "origin_not_allowed"},
		{"null origin", "POST", "/v1/chat", own, chatBody, with("Origin", "null"), 403, "origin_not_allowed"},
		{"other loopback origin", "POST", "/v1/chat", own, chatBody, with("Origin", "http://localhost:3000"), 403, "origin_not_allowed"},
		{"cross-site fetch", "POST", "/v1/chat", own, chatBody, with("Sec-Fetch-Site", "cross-site"), 403, "origin_not_allowed"},
		{"same-site fetch", "POST", "/v1/chat", own, chatBody, with("Sec-Fetch-Site", "same-site"), 403, "origin_not_allowed"},
		{"own origin", "POST", "/v1/chat", own, chatBody, with("Origin", "http://"+own), 404, "session_not_found"},
		{"own origin localhost", "POST", "/v1/chat", "localhost:" + port, chatBody, with("Origin", "http://localhost:"+port), 404, "session_not_found"},
		{"no origin", "POST", "/v1/chat", own, chatBody, jsonType, 404, "session_not_found"},
		{"foreign origin may read", "GET", "/v1/sessions", own, "", []string{"Origin", "https://evil.example"}, 200, ""},
		// Bodies are JSON, said so.
		{"text/plain chat", "POST", "/v1/chat", own, chatBody, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"form respond", "POST", "/v1/chat/respond", own, respondBody, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"multipart completions", "POST", "/v1/chat/completions", own, `{"messages":[]}`, []string{"Content-Type", "multipart/form-data; boundary=x"}, 415, "unsupported_media_type"},
		{"text/plain rename", "PATCH", "/v1/sessions/nope", own, `{"title":"x"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"no content type", "POST", "/v1/chat", own, chatBody, nil, 415, "unsupported_media_type"},
		{"not UTF-8", "POST", "/v1/chat", own, chatBody, []string{"Content-Type", "application/json; charset=iso-8859-1"}, 415, "unsupported_media_type"},
		{"JSON with charset", "POST", "/v1/chat", own, chatBody, []string{"Content-Type", "Application/JSON; charset=UTF-8"}, 404, "session_not_found"},
		{"completions JSON", "POST", "/v1/chat/completions", own, `{"messages":[]}`, jsonType, 400, ""},
		{"delete without body", "DELETE", "/v1/sessions/nope", own, "", nil, 404, "session_not_found"},
		{"delete with a text body", "DELETE", "/v1/sessions/nope", own, "x", []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.sendRaw(t, rawRequest(tt.method, tt.path, tt.host, tt.body, tt.headers...))
			if resp.StatusCode != tt.status || (tt.code != "" && errorCode(body) != tt.code) {
				t.Errorf("%s %s Host %s: %d %s, want %d %s", tt.method, tt.path, tt.host, resp.StatusCode, body, tt.status, tt.code)
			}
			if resp.Header.Get("X-Trace-Id") == "" {
				t.Error("no X-Trace-Id")
			}
		})
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Errorf("%d turns reached the model", n)
	}
}

// TestAllowedHosts: names other than loopback and the listen address pass
// only when MMCP_ALLOWED_HOSTS lists them.
func TestAllowedHosts(t *testing.T) {
	tests := []struct {
		name    string
		listen  string
		allowed []string
		host    string
		status  int
	}{
		{"listed name, any port", "127.0.0.1:8787", []string{"media.example"}, "media.example:9999", 200},
		{"listed name, case and dot", "127.0.0.1:8787", []string{" Media.Example. "}, "MEDIA.example.", 200},
		{"listed name with port", "127.0.0.1:8787", []string{"nas.local:8787"}, "nas.local:8787", 200},
		{"listed name, other port", "127.0.0.1:8787", []string{"nas.local:8787"}, "nas.local:9999", 421},
		{"listed name, no port in Host", "127.0.0.1:8787", []string{"nas.local:8787"}, "nas.local", 421},
		{"listed IPv6", "127.0.0.1:8787", []string{"[fd00::1]:8787"}, "[fd00::1]:8787", 200},
		{"not listed", "127.0.0.1:8787", []string{"media.example"}, "evil.example", 421},
		{"star", "127.0.0.1:8787", []string{"*"}, "anything.example:1", 200},
		{"listen address", "192.168.1.5:8787", nil, "192.168.1.5:8787", 200},
		{"listen name", "nas.local:8787", nil, "nas.local:8787", 200},
		{"other address", "192.168.1.5:8787", nil, "192.168.1.6:8787", 421},
		{"wildcard listen, an address", "0.0.0.0:8787", nil, "192.168.1.6:8787", 200},
		{"wildcard listen, IPv6 address", ":8787", nil, "[fd00::2]:8787", 200},
		{"wildcard listen, a name", "0.0.0.0:8787", nil, "rebind.evil.example:8787", 421},
		{"empty Host", "127.0.0.1:8787", nil, "", 421},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startWith(t, options{configure: func(_ *store.Store, _ *loop.Runner, s *server.Server) {
				s.ListenAddr, s.AllowedHosts = tt.listen, tt.allowed
			}})
			// HTTP/1.0 may leave the Host out; HTTP/1.1 may not.
			req := rawRequest("GET", "/v1/sessions", tt.host, "")
			if tt.host == "" {
				req = strings.Replace(req, "HTTP/1.1", "HTTP/1.0", 1)
			}
			resp, body := e.sendRaw(t, req)
			if resp.StatusCode != tt.status {
				t.Errorf("Host %q: %d %s, want %d", tt.host, resp.StatusCode, body, tt.status)
			}
		})
	}
}

// TestBearerSchemeIsCaseInsensitive: RFC 7235 auth schemes are
// case-insensitive; the token itself is not.
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	const token = "tok-9f2c"
	e := start(t, token)
	tests := []struct {
		header string
		status int
	}{
		{"Bearer " + token, 200},
		{"bearer " + token, 200},
		{"BEARER " + token, 200},
		{"bEaReR " + token, 200},
		{"Bearer  " + token, 200}, // 1*SP
		{"bearer " + strings.ToUpper(token), 401},
		{"Basic " + token, 401},
		{"Bearer" + token, 401},
		{"Bearer", 401},
		{token, 401},
		{"", 401},
	}
	for _, tt := range tests {
		resp, body := e.sendRaw(t, rawRequest("GET", "/v1/sessions", e.addr(), "", "Authorization", tt.header))
		if resp.StatusCode != tt.status {
			t.Errorf("Authorization %q: %d %s, want %d", tt.header, resp.StatusCode, body, tt.status)
		}
	}
}

// TestUncleanPaths: a path the mux would redirect (dot segments, double
// slashes) gets 404 in the error envelope, never a redirect without a
// Location.
func TestUncleanPaths(t *testing.T) {
	e := start(t, "")
	for _, target := range []string{
		"/v1/sessions/../../etc/passwd",
		"/v1/sessions/..",
		"/v1/./sessions",
		"//v1/sessions",
		"/v1/sessions/x/../../../healthz",
	} {
		resp, body := e.sendRaw(t, rawRequest("GET", target, e.addr(), ""))
		if resp.StatusCode != 404 || errorCode(body) != "not_found" {
			t.Errorf("GET %s: %d (Location %q) %s, want 404 not_found", target, resp.StatusCode, resp.Header.Get("Location"), body)
		}
	}
}

// TestStrictInput: what encoding/json would let through quietly is refused,
// naming the field.
func TestStrictInput(t *testing.T) {
	e := start(t, "", final("first"))
	sess := chat(t, e, `{"message":"hi"}`).SessionID
	respond := func(extra string) string {
		return fmt.Sprintf(`{"session_id":%q,"approval_id":"a","decision":"approve"%s}`, sess, extra)
	}
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		want   string // in the message
	}{
		{"upper-case key", "POST", "/v1/chat", `{"MESSAGE":"hi"}`, `"MESSAGE"`},
		{"capitalised key", "POST", "/v1/chat", `{"Message":"hi"}`, `did you mean "message"`},
		{"upper-case second key", "POST", "/v1/chat", `{"message":"hi","SESSION_ID":""}`, `"SESSION_ID"`},
		{"duplicate key", "POST", "/v1/chat", `{"message":"hi","message":"again"}`, `"message" appears more than once`},
		{"zero-width only", "POST", "/v1/chat", `{"message":"\u200b\u200c\u200d\u2060\ufeff"}`, "message must not be empty"},
		{"zero-width and spaces", "POST", "/v1/chat", "{\"message\":\" \u200b\\t\ufeff \"}", "message must not be empty"},
		{"lone high surrogate", "POST", "/v1/chat", `{"message":"\ud800"}`, "message"},
		{"lone low surrogate", "POST", "/v1/chat", `{"message":"a\udc00b"}`, "surrogate"},
		{"high then not low", "POST", "/v1/chat", `{"message":"\ud83d\u0041"}`, "surrogate"},
		{"NUL in message", "POST", "/v1/chat", `{"message":"hi\u0000there"}`, "message must not contain control characters"},
		{"escape in message", "POST", "/v1/chat", `{"message":"hi\u001b[31m"}`, "message must not contain control characters"},
		{"null body", "POST", "/v1/chat", `null`, "JSON object"},
		{"respond upper-case key", "POST", "/v1/chat/respond", `{"session_id":"` + sess + `","approval_id":"a","Decision":"approve"}`, `"Decision"`},
		{"respond duplicate", "POST", "/v1/chat/respond", respond(`,"decision":"deny"`), "more than once"},
		{"respond NUL", "POST", "/v1/chat/respond", `{"session_id":"` + sess + `\u0000","approval_id":"a","decision":"approve"}`, "session_id must not contain control characters"},
		{"title upper-case key", "PATCH", "/v1/sessions/" + sess, `{"TITLE":"x"}`, `"TITLE"`},
		{"title NUL", "PATCH", "/v1/sessions/" + sess, `{"title":"a\u0000b"}`, "title must not contain control characters"},
		{"title zero-width", "PATCH", "/v1/sessions/" + sess, `{"title":"\u200b\u2060"}`, "title must be"},
		{"title lone surrogate", "PATCH", "/v1/sessions/" + sess, `{"title":"\udfff"}`, "title"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do(t, tt.method, tt.path, tt.body, "Content-Type", "application/json")
			var got server.ErrorBody
			json.Unmarshal(body, &got)
			if resp.StatusCode != 400 || got.Error.Code != "invalid_request" || !strings.Contains(got.Error.Message, tt.want) {
				t.Errorf("%s: %d %s, want 400 invalid_request containing %q", tt.body, resp.StatusCode, body, tt.want)
			}
		})
	}
	// Nothing of the above was stored.
	_, body := e.do(t, "GET", "/v1/sessions/"+sess, "")
	if strings.Contains(string(body), `\u0000`) || strings.Contains(string(body), "\ufffd") || !strings.Contains(string(body), `"title":"hi"`) || strings.Count(string(body), `"trace_id"`) != 1 {
		t.Errorf("session changed: %s", body)
	}
	// A surrogate pair is a character like any other.
	e.fake.Push(final("ok"))
	if resp, body := e.do(t, "POST", "/v1/chat", `{"message":"\ud83d\ude00"}`, "Content-Type", "application/json"); resp.StatusCode != 200 {
		t.Errorf("surrogate pair: %d %s", resp.StatusCode, body)
	}
}

// TestStrictOpenAIContent: the OpenAI route accepts unknown fields, but not
// message text that would be silently changed or that hides control bytes.
func TestStrictOpenAIContent(t *testing.T) {
	e := start(t, "")
	tests := []struct{ name, body, want string }{
		{"lone surrogate", `{"messages":[{"role":"user","content":"\ud800"}]}`, "messages[0].content"},
		{"lone surrogate in a part", `{"messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"text","text":"a\udc00"}]}]}`, "messages[1].content"},
		{"NUL", `{"messages":[{"role":"user","content":"a\u0000b"}]}`, "control characters"},
		{"NUL in an earlier message", `{"messages":[{"role":"system","content":"x\u0000"},{"role":"user","content":"hi"}]}`, "messages[0].content"},
		{"zero-width only", `{"messages":[{"role":"user","content":"\u200b\ufeff"}]}`, "must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do(t, "POST", "/v1/chat/completions", tt.body, "Content-Type", "application/json")
			var got server.OpenAIError
			json.Unmarshal(body, &got)
			if resp.StatusCode != 400 || got.Error.Code != "invalid_request" || !strings.Contains(got.Error.Message, tt.want) {
				t.Errorf("%s: %d %s, want 400 containing %q", tt.body, resp.StatusCode, body, tt.want)
			}
		})
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Errorf("%d turns reached the model", n)
	}
}
