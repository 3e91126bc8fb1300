package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/mmcpd/mmcpd/pkg/redact"
)

// maxRedirects is how many redirects one fetch follows.
const maxRedirects = 5

// hooks are what tests change; production uses the zero value.
type hooks struct {
	// allow are addresses reachable despite the guard: a test's own server.
	allow []netip.AddrPort
	// lookup resolves host names instead of the system resolver, so tests
	// can make a name resolve to any address without DNS.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// roots replaces the system's certificate authorities.
	roots *x509.CertPool
}

// fetcher fetches public https pages for the model.
type fetcher struct {
	client   *http.Client
	dialer   *net.Dialer
	guard    guard
	lookup   func(ctx context.Context, host string) ([]netip.Addr, error)
	maxBytes int64
	maxChars int
	timeout  time.Duration
}

func newFetcher(cfg settings, h hooks) (*fetcher, error) {
	switch {
	case cfg.MaxBytes <= 0:
		return nil, fmt.Errorf("%sMAX_BYTES must be a positive number of bytes, not %d", envPrefix, cfg.MaxBytes)
	case cfg.Timeout <= 0:
		return nil, fmt.Errorf("%sTIMEOUT must be a positive duration such as 15s, not %s", envPrefix, cfg.Timeout)
	case cfg.MaxChars <= 0:
		return nil, fmt.Errorf("%sMAX_CHARS must be a positive number of characters, not %d", envPrefix, cfg.MaxChars)
	}
	f := &fetcher{
		guard:    guard{allow: map[netip.AddrPort]bool{}},
		lookup:   h.lookup,
		maxBytes: cfg.MaxBytes,
		maxChars: cfg.MaxChars,
		timeout:  cfg.Timeout,
	}
	for _, ap := range h.allow {
		f.guard.allow[ap] = true
	}
	f.dialer = &net.Dialer{Timeout: min(cfg.Timeout, 10*time.Second), Control: f.guard.control}
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would be dialled instead of the page, past the guard
		DialContext:           f.dial,
		TLSClientConfig:       &tls.Config{RootCAs: h.roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConns:          4,
		IdleConnTimeout:       30 * time.Second,
	}
	// The time limit is a context of each fetch rather than the client's
	// Timeout, so that the fetch can tell it from the call's own deadline
	// and from a body that merely ended.
	f.client = &http.Client{Transport: transport, CheckRedirect: f.checkRedirect}
	return f, nil
}

// dial connects to address through the guarded dialer. The dialer's Control
// sees every address a name resolves to, whoever resolves it.
func (f *fetcher) dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(host); err == nil || f.lookup == nil {
		conn, err := f.dialer.DialContext(ctx, network, address)
		return conn, named(err, host)
	}
	addrs, err := f.lookup(ctx, host)
	if err != nil {
		return nil, &net.DNSError{Err: err.Error(), Name: host, IsNotFound: true}
	}
	var first error
	for _, a := range addrs {
		conn, err := f.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return nil, named(first, host)
}

// named puts the host name into a refusal, so that the message says which
// name led to the refused address.
func named(err error, host string) error {
	var re *refusedError
	if errors.As(err, &re) {
		return &refusedError{host: host, addr: re.addr, reason: re.reason}
	}
	return err
}

var (
	errNotHTTPS         = errors.New("not an https URL")
	errMissingHost      = errors.New("the URL has no host")
	errTooManyRedirects = fmt.Errorf("more than %d redirects", maxRedirects)
)

const (
	userAgent    = "mmcp-plugin-web/" + version
	acceptHeader = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5"
)

// checkURL refuses what the guard can tell from the URL alone: a scheme
// other than https, and an IP address it refuses. Host names are checked
// when they are dialled.
func (f *fetcher) checkURL(u *url.URL) error {
	if u.Scheme != "https" {
		return errNotHTTPS
	}
	host := u.Hostname()
	if host == "" {
		return errMissingHost
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	port := uint16(443)
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return fmt.Errorf("bad port %q", p)
		}
		port = uint16(n)
	}
	return f.guard.check(netip.AddrPortFrom(addr, port))
}

// redirectError is a redirect the fetcher refused, with its target resolved
// against the page that sent it.
type redirectError struct {
	target *url.URL
	err    error
}

func (e *redirectError) Error() string { return shown(e.target) + ": " + e.err.Error() }
func (e *redirectError) Unwrap() error { return e.err }

// shown is u as an error shows it, with its credentials masked (the password
// of user:pass@, secret-looking query values such as a signed link's token):
// a redirect target comes from the site, not from the model.
func shown(u *url.URL) string { return redact.URL(u.String()) }

func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	err := f.checkURL(req.URL)
	if len(via) > maxRedirects {
		err = errTooManyRedirects
	}
	if err != nil {
		return &redirectError{target: req.URL, err: err}
	}
	return nil
}

type fetchArgs struct {
	URL     string `json:"url" jsonschema:"minLength=1,maxLength=2048,description=The https:// address of the page"`
	Extract *bool  `json:"extract,omitempty" jsonschema:"default=true,description=Reduce an HTML page to its readable text; false returns the markup as is"`
}

type fetchResult struct {
	URL         string `json:"url"` // after redirects
	Title       string `json:"title,omitempty"`
	ContentType string `json:"content_type"`
	Text        string `json:"text"`
	Truncated   string `json:"truncated,omitempty"`
}

func (f *fetcher) fetch(ctx context.Context, a fetchArgs) (fetchResult, error) {
	raw := strings.TrimSpace(a.URL)
	u, err := url.Parse(raw)
	if err != nil {
		return fetchResult{}, fmt.Errorf("%q is not a URL: %v", redact.URL(raw), redact.Error(err))
	}
	if err := f.checkURL(u); err != nil {
		return fetchResult{}, f.refuse(redact.URL(raw), "", err)
	}
	fetchCtx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(fetchCtx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fetchResult{}, fmt.Errorf("%q is not a URL web_fetch can request: %v", redact.URL(raw), redact.Error(err))
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", acceptHeader)
	resp, err := f.client.Do(req)
	if err != nil {
		return fetchResult{}, f.failure(ctx, fetchCtx, u, err)
	}
	defer resp.Body.Close()
	final := resp.Request.URL.Redacted() // the page's address, for the model to cite
	if err := statusError(shown(resp.Request.URL), resp); err != nil {
		return fetchResult{}, err
	}

	declared := resp.Header.Get("Content-Type")
	mediaType, _, _ := mime.ParseMediaType(declared)
	mediaType = strings.ToLower(mediaType)
	if mediaType != "" && classify(mediaType) == binary {
		return fetchResult{}, binaryError(shown(resp.Request.URL), mediaType)
	}
	body, truncated, err := readCapped(resp.Body, f.maxBytes)
	if fetchCtx.Err() != nil && !truncated {
		// A body cut short by the time limit may read as a clean end.
		err = fetchCtx.Err()
	}
	if err != nil {
		return fetchResult{}, f.failure(ctx, fetchCtx, resp.Request.URL, err)
	}
	if mediaType == "" {
		declared = http.DetectContentType(body)
		mediaType, _, _ = mime.ParseMediaType(declared)
	}
	kind := classify(mediaType)
	if kind == binary || bytes.IndexByte(body[:min(len(body), 1024)], 0) >= 0 {
		return fetchResult{}, binaryError(shown(resp.Request.URL), mediaType)
	}
	text := decode(body, declared)

	r := fetchResult{URL: final, ContentType: mediaType}
	if kind == htmlText && (a.Extract == nil || *a.Extract) {
		r.Title, text = extract(text)
	}
	r.Text = cut(text, f.maxChars)
	if truncated {
		r.Truncated = fmt.Sprintf("the page is larger than %d bytes; only the first %d were read", f.maxBytes, f.maxBytes)
	}
	return r, nil
}

// readCapped reads at most max bytes of r and says whether there was more.
func readCapped(r io.Reader, max int64) ([]byte, bool, error) {
	body, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(body)) > max {
		return body[:max], true, nil
	}
	return body, false, nil
}

// decode turns body into UTF-8 by the charset that contentType or, for
// HTML, the page itself declares.
func decode(body []byte, contentType string) string {
	if r, err := charset.NewReader(bytes.NewReader(body), contentType); err == nil {
		if b, err := io.ReadAll(r); err == nil {
			body = b
		}
	}
	return strings.ToValidUTF8(string(body), "\uFFFD")
}

// cut keeps the first n characters of s and says how many it left out.
func cut(s string, n int) string {
	i, count := 0, 0
	for i < len(s) && count < n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		count++
	}
	if i >= len(s) {
		return s
	}
	return s[:i] + fmt.Sprintf("\n[... cut: %d more characters]", utf8.RuneCountInString(s[i:]))
}

type contentKind int

const (
	binary contentKind = iota
	plainText
	htmlText
)

// classify tells pages and text, which the model can read, from everything
// else.
func classify(mediaType string) contentKind {
	switch {
	case mediaType == "text/html" || mediaType == "application/xhtml+xml":
		return htmlText
	case strings.HasPrefix(mediaType, "text/"):
		return plainText
	case strings.HasPrefix(mediaType, "application/") &&
		(strings.HasSuffix(mediaType, "+json") || strings.HasSuffix(mediaType, "+xml")):
		return plainText
	}
	switch mediaType {
	case "application/json", "application/xml", "application/javascript", "application/ecmascript",
		"application/x-javascript", "application/yaml", "application/x-yaml", "application/toml",
		"application/x-sh", "application/x-subrip", "application/sql", "application/graphql":
		return plainText
	}
	return binary
}

func binaryError(u, mediaType string) error {
	if mediaType == "" {
		mediaType = "of unknown type"
	}
	return fmt.Errorf("%s is %s, not a web page or text; web_fetch reads only text", u, mediaType)
}

// statusError turns a response that is not the page into an error.
func statusError(u string, resp *http.Response) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	msg := fmt.Sprintf("%s answered %d %s", u, code, http.StatusText(code))
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		msg += "; the page needs a login or refuses automated clients"
	case code == http.StatusNotFound || code == http.StatusGone:
		msg += "; there is no such page"
	case code == http.StatusTooManyRequests:
		msg += "; the site is rate limiting requests, try again later"
	case code >= 300 && code < 400:
		msg += " without a usable Location"
	}
	return errors.New(msg)
}

// refuse says why the guard refused url (or a redirect from it to target).
func (f *fetcher) refuse(raw, target string, err error) error {
	var re *refusedError
	switch {
	case errors.As(err, &re) && target != "":
		return fmt.Errorf("web_fetch refuses %s, the redirect from %s: %v; it only fetches pages on the public internet", target, raw, re)
	case errors.As(err, &re):
		return fmt.Errorf("web_fetch refuses %s: %v; it only fetches pages on the public internet", raw, re)
	case errors.Is(err, errNotHTTPS) && target != "":
		return fmt.Errorf("%s redirected to %s; web_fetch follows https:// redirects only", raw, target)
	case errors.Is(err, errNotHTTPS):
		hint := ""
		if !strings.Contains(raw, "://") {
			hint = "; write it as https://" + raw
		}
		return fmt.Errorf("web_fetch only fetches https:// URLs; %q is not one%s", raw, hint)
	case errors.Is(err, errTooManyRedirects):
		return fmt.Errorf("%s redirected more than %d times (last to %s); web_fetch stopped there", raw, maxRedirects, target)
	case errors.Is(err, errMissingHost):
		return fmt.Errorf("%q has no host name", raw)
	}
	return fmt.Errorf("web_fetch refuses %s: %v", raw, err)
}

// failure explains an error of the request: a refusal, a timeout, a name
// that does not resolve, a bad certificate. ctx is the call's, fetchCtx the
// fetch's with its time limit.
func (f *fetcher) failure(ctx, fetchCtx context.Context, u *url.URL, err error) error {
	if ctx.Err() != nil {
		return ctx.Err() // the call's deadline or cancellation: the host reports it
	}
	// An error on the way through redirects concerns the redirect's
	// target, not the URL asked for.
	raw, target, host := shown(u), "", u.Hostname()
	var (
		rde  *redirectError
		ue   *url.Error
		re   *refusedError
		dns  *net.DNSError
		cert *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &rde):
		target, host = shown(rde.target), rde.target.Hostname()
	case errors.As(err, &ue) && ue.URL != u.String():
		if t, perr := url.Parse(ue.URL); perr == nil {
			target, host = shown(t), t.Hostname()
		}
	}
	switch {
	case errors.As(err, &re), rde != nil:
		return f.refuse(raw, target, err)
	case fetchCtx.Err() != nil:
		return fmt.Errorf("%s did not answer within %s", raw, f.timeout)
	case errors.As(err, &dns):
		return fmt.Errorf("the host %s cannot be found (%s); check the address", host, dns.Err)
	case errors.As(err, &cert):
		return fmt.Errorf("%s has a TLS certificate that cannot be trusted (%v)", host, cert.Err)
	}
	reason := err.Error()
	if errors.As(err, &ue) {
		reason = ue.Err.Error()
	}
	return fmt.Errorf("%s could not be fetched: %s", raw, reason)
}
