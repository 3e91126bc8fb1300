package main

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

func serve(contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.Write([]byte(body))
	}
}

func TestFetchArticle(t *testing.T) {
	page, err := os.ReadFile("testdata/article.html")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/article.txt")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []*http.Request
	s := newSite(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		serve("text/html; charset=utf-8", string(page))(w, r)
	}))
	srv := server(t, s.hooks(), nil)

	r, e := call(t, srv, fetchArgsFor(s.url("/2025/01/qsv?ref=home")))
	if e != "" {
		t.Fatal(e)
	}
	if r.URL != s.url("/2025/01/qsv?ref=home") || r.ContentType != "text/html" || r.Truncated != "" ||
		r.Title != "How to Set Up Hardware Transcoding in Jellyfin – Home Media Notes" {
		t.Errorf("result: %+v", r)
	}
	if r.Text != strings.TrimSuffix(string(want), "\n") {
		t.Errorf("text:\n%s\n--- want:\n%s", r.Text, want)
	}
	// The same page by host name: the name resolves to the allowed address.
	r, e = call(t, srv, `{"url":"https://example.com:`+strconv.Itoa(int(s.addr.Port()))+`/2025/01/qsv","extract":true}`)
	if e != "" || r.Title == "" {
		t.Errorf("by name: %+v %q", r, e)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("%d requests", len(seen))
	}
	q := seen[0]
	if q.Method != "GET" || q.URL.Path != "/2025/01/qsv" || q.URL.RawQuery != "ref=home" ||
		q.Header.Get("User-Agent") != "mmcp-plugin-web/1.0.0" || !strings.HasPrefix(q.Header.Get("Accept"), "text/html") {
		t.Errorf("request: %s %s %v", q.Method, q.URL, q.Header)
	}
	if seen[1].Host != "example.com:"+strconv.Itoa(int(s.addr.Port())) {
		t.Errorf("host header %q", seen[1].Host)
	}
}

func TestFetchText(t *testing.T) {
	page := "<!doctype html><title>T</title><p>Hello <b>there</b></p>"
	cases := []struct {
		name, contentType, body, args string
		want                          fetchResult // URL filled in below
	}{
		{"plain", "text/plain; charset=utf-8", "line one\n  indented\n", "",
			fetchResult{ContentType: "text/plain", Text: "line one\n  indented\n"}},
		{"json", "application/json", `{"a": [1, 2]}`, "",
			fetchResult{ContentType: "application/json", Text: `{"a": [1, 2]}`}},
		{"rss", "application/rss+xml", "<rss><channel><title>x</title></channel></rss>", "",
			fetchResult{ContentType: "application/rss+xml", Text: "<rss><channel><title>x</title></channel></rss>"}},
		{"html", "text/html", page, "",
			fetchResult{ContentType: "text/html", Title: "T", Text: "T\nHello there"}},
		{"html raw", "text/html", page, `,"extract":false`,
			fetchResult{ContentType: "text/html", Text: page}},
		{"xhtml", "application/xhtml+xml", page, "",
			fetchResult{ContentType: "application/xhtml+xml", Title: "T", Text: "T\nHello there"}},
		{"sniffed html", "", page, "",
			fetchResult{ContentType: "text/html", Title: "T", Text: "T\nHello there"}},
		{"latin-1", "text/plain; charset=iso-8859-1", "caf\xe9 cr\xe8me", "",
			fetchResult{ContentType: "text/plain", Text: "café crème"}},
		{"html meta charset", "text/html", `<html><head><meta charset="windows-1252"><title>Caf` + "\xe9" + `</title></head><body><p>` + "\x93quoted\x94" + `</p></body></html>`, "",
			fetchResult{ContentType: "text/html", Title: "Café", Text: "Café\n“quoted”"}},
		{"bad utf-8", "text/plain; charset=utf-8", "ok \xff\xfe end", "",
			fetchResult{ContentType: "text/plain", Text: "ok \uFFFD\uFFFD end"}},
	}
	for _, c := range cases {
		s := newSite(t, serve(c.contentType, c.body))
		r, e := call(t, server(t, s.hooks(), nil), `{"url":"`+s.url("/x")+`"`+c.args+`}`)
		c.want.URL = s.url("/x")
		if e != "" || r != c.want {
			t.Errorf("%s: %+v %q\nwant %+v", c.name, r, e, c.want)
		}
	}
}

func TestBinaryRefused(t *testing.T) {
	png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"
	cases := []struct{ name, contentType, body, want string }{
		{"png", "image/png", png, "is image/png, not a web page or text"},
		{"svg", "image/svg+xml", "<svg/>", "is image/svg+xml"},
		{"pdf", "application/pdf", "%PDF-1.7", "is application/pdf"},
		{"octets", "application/octet-stream", "\x00\x01", "is application/octet-stream"},
		{"zip", "application/zip", "PK\x03\x04", "is application/zip"},
		{"video", "video/mp4", "\x00\x00\x00\x18ftypmp42", "is video/mp4"},
		{"sniffed png", "", png, "is image/png"},
		{"text with NULs", "text/plain", "abc\x00\x00\x00def", "is text/plain, not a web page or text"},
	}
	for _, c := range cases {
		s := newSite(t, serve(c.contentType, c.body))
		_, e := call(t, server(t, s.hooks(), nil), fetchArgsFor(s.url("/file")))
		if !strings.HasPrefix(e, s.url("/file")+" "+c.want) {
			t.Errorf("%s: %q, want %q", c.name, e, c.want)
		}
	}
}

func TestSizeCap(t *testing.T) {
	line := strings.Repeat("0123456789", 10) + "\n" // 101 bytes
	var written int
	var mu sync.Mutex
	s := newSite(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		// 10 MB, of which the fetcher must read only the first kilobyte.
		for range 100_000 {
			n, err := w.Write([]byte(line))
			mu.Lock()
			written += n
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}))
	srv := server(t, s.hooks(), map[string]string{"MAX_BYTES": "1000"})
	r, e := call(t, srv, fetchArgsFor(s.url("/big.txt")))
	if e != "" {
		t.Fatal(e)
	}
	if len(r.Text) != 1000 || r.Text != strings.Repeat(line, 10)[:1000] {
		t.Errorf("text of %d bytes", len(r.Text))
	}
	if r.Truncated != "the page is larger than 1000 bytes; only the first 1000 were read" {
		t.Errorf("truncated %q", r.Truncated)
	}

	// A page cut in the middle of its markup is still read.
	html := "<html><head><title>Long</title></head><body><p>first</p><p>second " + strings.Repeat("word ", 1000)
	s2 := newSite(t, serve("text/html", html))
	r, e = call(t, server(t, s2.hooks(), map[string]string{"MAX_BYTES": "100"}), fetchArgsFor(s2.url("/")))
	if e != "" || r.Title != "Long" || !strings.HasPrefix(r.Text, "Long\nfirst\nsecond word") || r.Truncated == "" {
		t.Errorf("cut html: %+v %q", r, e)
	}
}

func TestTextCut(t *testing.T) {
	s := newSite(t, serve("text/plain; charset=utf-8", strings.Repeat("é", 25)+strings.Repeat("x", 10)))
	r, e := call(t, server(t, s.hooks(), map[string]string{"MAX_CHARS": "20"}), fetchArgsFor(s.url("/")))
	if want := strings.Repeat("é", 20) + "\n[... cut: 15 more characters]"; e != "" || r.Text != want || r.Truncated != "" {
		t.Errorf("%q %q\nwant %q", r.Text, e, want)
	}
	if got := cut("short", 20); got != "short" {
		t.Errorf("cut: %q", got)
	}
	if got := cut("exactly", 7); got != "exactly" {
		t.Errorf("cut: %q", got)
	}
}

func TestSchemes(t *testing.T) {
	s := newSite(t, serve("text/plain", "secret"))
	srv := server(t, s.hooks(), nil)
	cases := map[string]string{
		"http://" + s.addr.String() + "/": `web_fetch only fetches https:// URLs; "http://` + s.addr.String() + `/" is not one`,
		"ftp://example.org/file":          `web_fetch only fetches https:// URLs; "ftp://example.org/file" is not one`,
		"file:///etc/passwd":              `web_fetch only fetches https:// URLs; "file:///etc/passwd" is not one`,
		"gopher://example.org/":           `is not one`,
		"javascript:alert(1)":             `web_fetch only fetches https:// URLs; "javascript:alert(1)" is not one; write it as https://javascript:alert(1)`,
		"example.org/page":                `web_fetch only fetches https:// URLs; "example.org/page" is not one; write it as https://example.org/page`,
		"https:///no-host":                `"https:///no-host" has no host name`,
		"https://exa mple.org/":           `is not a URL`,
	}
	for u, want := range cases {
		if _, e := call(t, srv, fetchArgsFor(u)); !strings.Contains(e, want) {
			t.Errorf("%s: %q, want %q", u, e, want)
		}
	}
	if n := s.conns.Load(); n != 0 {
		t.Errorf("%d connections to the site", n)
	}
}

// Addresses the guard refuses, written into the URL.
func TestRefusedLiterals(t *testing.T) {
	s := newSite(t, serve("text/plain", "secret"))
	srv := server(t, s.hooks(), nil)
	port := strconv.Itoa(int(s.addr.Port()))
	cases := map[string]string{
		"https://127.0.0.1/":                        "127.0.0.1 is a loopback address",
		"https://127.0.0.1:8443/":                   "127.0.0.1 is a loopback address",
		"https://[::1]:" + port + "/":               "::1 is a loopback address",
		"https://[::ffff:127.0.0.1]:" + port + "/":  "::ffff:127.0.0.1 is an IPv4-mapped address of 127.0.0.1, a loopback address",
		"https://[64:ff9b::7f00:1]:" + port + "/":   "64:ff9b::7f00:1 is a NAT64 address of 127.0.0.1, a loopback address",
		"https://0.0.0.0:" + port + "/":             "0.0.0.0 is the unspecified address",
		"https://10.0.0.1/admin":                    "10.0.0.1 is a private address",
		"https://192.168.1.1/":                      "192.168.1.1 is a private address",
		"https://169.254.169.254/latest/meta-data/": "169.254.169.254 is a link-local address",
		"https://100.100.100.200/":                  "100.100.100.200 is a shared (carrier-grade NAT) address",
		"https://[fd00::1]/":                        "fd00::1 is a unique local (private) address",
		"https://[fe80::1%25eth0]/":                 "fe80::1 is a link-local address",
		"https://224.0.0.1/":                        "224.0.0.1 is a multicast address",
		"https://255.255.255.255/":                  "255.255.255.255 is the broadcast address",
		"https://198.18.0.1/":                       "198.18.0.1 is a benchmarking address",
	}
	for u, want := range cases {
		_, e := call(t, srv, fetchArgsFor(u))
		if !strings.HasPrefix(e, "web_fetch refuses "+u+": "+want+"; it only fetches pages on the public internet") {
			t.Errorf("%s: %q, want %q", u, e, want)
		}
	}
	if n := s.conns.Load(); n != 0 {
		t.Errorf("%d connections to the site", n)
	}
}

// Names that resolve to refused addresses are refused when dialled: the
// site listens on 127.0.0.1 and the fetcher has no allowance for it, so a
// connection would succeed if the dialer's check did not stop it.
func TestRefusedNames(t *testing.T) {
	s := newSite(t, serve("text/plain", "secret"))
	port := strconv.Itoa(int(s.addr.Port()))
	srv := server(t, s.guardless(), nil)
	cases := map[string]string{
		"evil.test":  "evil.test resolves to 127.0.0.1, a loopback address",
		"evil6.test": "evil6.test resolves to ::1, a loopback address",
		// The dialer connects to an IPv4-mapped address over IPv4: its
		// Control sees the IPv4 address.
		"mapped.test":   "mapped.test resolves to 127.0.0.1, a loopback address",
		"nat64.test":    "nat64.test resolves to 64:ff9b::7f00:1, a NAT64 address of 127.0.0.1, a loopback address",
		"private.test":  "private.test resolves to 192.168.1.1, a private address",
		"metadata.test": "metadata.test resolves to 169.254.169.254, a link-local address",
		"twofaced.test": "twofaced.test resolves to 10.0.0.1, a private address", // every address is checked
	}
	for host, want := range cases {
		u := "https://" + host + ":" + port + "/"
		_, e := call(t, srv, fetchArgsFor(u))
		if want := "web_fetch refuses " + u + ": " + want + "; it only fetches pages on the public internet"; e != want {
			t.Errorf("%s: %q\nwant %q", host, e, want)
		}
	}
	if n := s.conns.Load(); n != 0 {
		t.Errorf("%d connections to the site", n)
	}
}

// The production path, the system resolver and no hooks at all: localhost
// resolves (from the hosts file, without DNS) to loopback and is refused.
func TestProductionGuard(t *testing.T) {
	s := newSite(t, serve("text/plain", "secret"))
	srv := server(t, hooks{}, nil)
	u := "https://localhost:" + strconv.Itoa(int(s.addr.Port())) + "/"
	_, e := call(t, srv, fetchArgsFor(u))
	if !strings.HasPrefix(e, "web_fetch refuses "+u+": localhost resolves to ") || !strings.Contains(e, "a loopback address") {
		t.Errorf("localhost: %q", e)
	}
	if n := s.conns.Load(); n != 0 {
		t.Errorf("%d connections to the site", n)
	}
}

func TestRedirects(t *testing.T) {
	var s *site
	mux := http.NewServeMux()
	mux.HandleFunc("/page", serve("text/plain", "the page"))
	mux.HandleFunc("/secret", serve("text/plain", "must not be read"))
	redirect := func(path string, to func() string) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to(), http.StatusFound) })
	}
	port := func() string { return strconv.Itoa(int(s.addr.Port())) }
	redirect("/relative", func() string { return "/page" })
	redirect("/to-loopback", func() string { return "https://127.0.0.1/secret" })
	redirect("/to-mapped", func() string { return "https://[::ffff:127.0.0.1]:" + port() + "/secret" })
	redirect("/to-metadata", func() string { return "https://169.254.169.254/latest/meta-data/" })
	redirect("/to-private", func() string { return "https://192.168.1.1/" })
	redirect("/to-evil", func() string { return "https://evil.test/secret" })
	redirect("/to-http", func() string { return "http://" + s.addr.String() + "/secret" })
	redirect("/to-file", func() string { return "file:///etc/passwd" })
	mux.HandleFunc("/hop/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		if n == 0 {
			serve("text/plain", "arrived")(w, r)
			return
		}
		http.Redirect(w, r, "/hop/"+strconv.Itoa(n-1), http.StatusMovedPermanently)
	})
	s = newSite(t, mux)
	srv := server(t, s.hooks(), nil)

	r, e := call(t, srv, fetchArgsFor(s.url("/relative")))
	if e != "" || r.URL != s.url("/page") || r.Text != "the page" {
		t.Errorf("relative: %+v %q", r, e)
	}
	r, e = call(t, srv, fetchArgsFor(s.url("/hop/5")))
	if e != "" || r.URL != s.url("/hop/0") || r.Text != "arrived" {
		t.Errorf("5 redirects: %+v %q", r, e)
	}
	_, e = call(t, srv, fetchArgsFor(s.url("/hop/6")))
	if want := s.url("/hop/6") + " redirected more than 5 times (last to " + s.url("/hop/0") + "); web_fetch stopped there"; e != want {
		t.Errorf("6 redirects: %q\nwant %q", e, want)
	}

	refused := map[string]string{
		"/to-loopback": "web_fetch refuses https://127.0.0.1/secret, the redirect from " + s.url("/to-loopback") + ": 127.0.0.1 is a loopback address",
		"/to-mapped":   "web_fetch refuses https://[::ffff:127.0.0.1]:" + port() + "/secret, the redirect from " + s.url("/to-mapped") + ": ::ffff:127.0.0.1 is an IPv4-mapped address of 127.0.0.1",
		"/to-metadata": "web_fetch refuses https://169.254.169.254/latest/meta-data/, the redirect from " + s.url("/to-metadata") + ": 169.254.169.254 is a link-local address",
		"/to-private":  "web_fetch refuses https://192.168.1.1/, the redirect from " + s.url("/to-private") + ": 192.168.1.1 is a private address",
		"/to-evil":     "web_fetch refuses https://evil.test/secret, the redirect from " + s.url("/to-evil") + ": evil.test resolves to 127.0.0.1, a loopback address",
		"/to-http":     s.url("/to-http") + " redirected to http://" + s.addr.String() + "/secret; web_fetch follows https:// redirects only",
		"/to-file":     s.url("/to-file") + " redirected to file:///etc/passwd; web_fetch follows https:// redirects only",
	}
	for path, want := range refused {
		if _, e := call(t, srv, fetchArgsFor(s.url(path))); !strings.HasPrefix(e, want) {
			t.Errorf("%s: %q\nwant %q", path, e, want)
		}
	}
}

func TestStatusErrors(t *testing.T) {
	cases := []struct {
		code int
		want string
	}{
		{404, "answered 404 Not Found; there is no such page"},
		{410, "answered 410 Gone; there is no such page"},
		{401, "answered 401 Unauthorized; the page needs a login or refuses automated clients"},
		{403, "answered 403 Forbidden; the page needs a login or refuses automated clients"},
		{429, "answered 429 Too Many Requests; the site is rate limiting requests, try again later"},
		{500, "answered 500 Internal Server Error"},
		{503, "answered 503 Service Unavailable"},
		{304, "answered 304 Not Modified without a usable Location"},
	}
	for _, c := range cases {
		s := newSite(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(c.code)
			w.Write([]byte("<h1>error</h1>"))
		}))
		_, e := call(t, server(t, s.hooks(), nil), fetchArgsFor(s.url("/p")))
		if want := s.url("/p") + " " + c.want; e != want {
			t.Errorf("%d: %q\nwant %q", c.code, e, want)
		}
	}
}

func TestSlowSite(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/no-answer", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/stalls", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("the start"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	s := newSite(t, mux)
	defer close(release) // before s.Close, which waits for the handlers

	srv := server(t, s.hooks(), map[string]string{"TIMEOUT": "200ms"})
	for _, path := range []string{"/no-answer", "/stalls"} {
		start := time.Now()
		_, e := call(t, srv, fetchArgsFor(s.url(path)))
		if want := s.url(path) + " did not answer within 200ms"; e != want {
			t.Errorf("%s: %q, want %q", path, e, want)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s took %v", path, d)
		}
	}

	// The call's own deadline, shorter than TIMEOUT: the host's timeout.
	srv = server(t, s.hooks(), nil)
	_, err := srv.Call(context.Background(), &pluginpb.CallRequest{Tool: "web_fetch", Args: []byte(fetchArgsFor(s.url("/no-answer"))), TimeoutMs: 100})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call past its deadline: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	s := newSite(t, serve("text/plain", "x"))
	h := s.hooks()
	u := s.url("/")
	s.Close()
	_, e := call(t, server(t, h, nil), fetchArgsFor(u))
	if !strings.HasPrefix(e, u+" could not be fetched: ") || !strings.Contains(e, "connection refused") {
		t.Errorf("closed site: %q", e)
	}
}

func TestUnknownHost(t *testing.T) {
	_, e := call(t, server(t, hooks{lookup: fakeDNS}, nil), fetchArgsFor("https://nowhere.test/page"))
	if want := "the host nowhere.test cannot be found (no such host); check the address"; e != want {
		t.Errorf("%q, want %q", e, want)
	}
}

func TestUntrustedCertificate(t *testing.T) {
	s := newSite(t, serve("text/plain", "x"))
	h := s.hooks()
	h.roots = nil // the system's authorities do not know httptest's
	_, e := call(t, server(t, h, nil), fetchArgsFor(s.url("/")))
	if !strings.HasPrefix(e, "127.0.0.1 has a TLS certificate that cannot be trusted") {
		t.Errorf("%q", e)
	}
}

// The model gets the result as JSON with the page's < > & as they are, and
// nothing else than the fields it is told about.
func TestResultJSON(t *testing.T) {
	s := newSite(t, serve("text/plain", "a < b && c > d"))
	r, err := server(t, s.hooks(), nil).Call(context.Background(), &pluginpb.CallRequest{Tool: "web_fetch", Args: []byte(fetchArgsFor(s.url("/cmp")))})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"url":"` + s.url("/cmp") + `","content_type":"text/plain","text":"a < b && c > d"}`
	if string(r.Result) != want || r.Error != "" {
		t.Errorf("%s %q\nwant %s", r.Result, r.Error, want)
	}
}

// A name that resolves to an allowed address once and to a refused one the
// next time (DNS rebinding) is refused the second time: the check is made on
// every connection, not once per name.
func TestRebinding(t *testing.T) {
	s := newSite(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close") // the next fetch must dial again
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("harmless"))
	}))
	var lookups atomic.Int64
	h := s.hooks()
	h.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != "example.com" {
			return nil, errors.New("no such host")
		}
		if lookups.Add(1) == 1 {
			return []netip.Addr{s.addr.Addr()}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
	}
	srv := server(t, h, nil)
	u := "https://example.com:" + strconv.Itoa(int(s.addr.Port())) + "/"
	if r, e := call(t, srv, fetchArgsFor(u)); e != "" || r.Text != "harmless" {
		t.Fatalf("first fetch: %+v %q", r, e)
	}
	_, e := call(t, srv, fetchArgsFor(u))
	if want := "web_fetch refuses " + u + ": example.com resolves to 127.0.0.2, a loopback address; it only fetches pages on the public internet"; e != want {
		t.Errorf("second fetch: %q\nwant %q", e, want)
	}
	if n := s.conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}
