// Package httpapi owns what every plugin that speaks to a web service needs:
// a JSON client for one service's base URL, with timeouts, a size cap, and
// errors a person can act on (which variable to check, which URL failed).
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/pkg/redact"
)

// Kinds of failure, for errors.Is. Every error a Client returns wraps one.
// The transient ones (an unreachable service, a timeout, 429, 5xx) say so
// through a Transient() bool method, which the plugin SDK carries to the
// host: a tool that changes nothing is then called again a little later.
var (
	ErrUnreachable error = &kind{"service unreachable", true}
	ErrAuth        error = &kind{"credentials refused", false}
	ErrNotFound    error = &kind{"not found", false}
	ErrConflict    error = &kind{"conflict", false}
	ErrRateLimited error = &kind{"rate limited", true}
	ErrService     error = &kind{"service error", true}
	ErrBadResponse error = &kind{"unexpected response", false}
)

// kind is a kind of failure; compared by identity, as errors.New's are.
type kind struct {
	msg       string
	transient bool
}

func (k *kind) Error() string { return k.msg }

// Transient says whether the failure may pass on a later call.
func (k *kind) Transient() bool { return k.transient }

// MaxResponseBytes bounds a response body: a plugin hands the model a
// summary, never a dump.
const MaxResponseBytes = 8 << 20

// Client calls one service. Its zero value is not usable: fill every field
// or use New.
type Client struct {
	Service string   // the service's name in messages: "TMDB"
	Base    *url.URL // the API root; request paths are joined to it
	HTTP    *http.Client
	// Auth adds credentials to each request (a header, a query parameter).
	Auth func(*http.Request)
	// URLVar and CredVar name the settings behind Base and Auth, so that an
	// error can say which one to check.
	URLVar, CredVar string
	// Header is added to every request (after Auth).
	Header http.Header
}

// New returns a client for the service at base (an http or https URL), with
// a per-request timeout.
func New(service, base, urlVar string, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: %s is not an http(s) URL", urlVar, quote(base))
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Client{Service: service, Base: u, HTTP: &http.Client{Timeout: timeout}, URLVar: urlVar}, nil
}

// quote is a URL setting's value as an error shows it: with its credentials
// masked, and not at all when it has an @ but no "//", as in user:pass@host,
// since then what follows the colon may be a password redact cannot place.
func quote(value string) string {
	if strings.Contains(value, "@") && !strings.Contains(value, "//") {
		return "the value (not shown: it may hold credentials)"
	}
	return strconv.Quote(redact.URL(value))
}

// Redacted is the base URL as messages show it: its user's password and its
// secret-looking query parameters are masked (see redact.URL). The model
// reads tool errors, and a log line can be shared.
func (c *Client) Redacted() string { return redact.URL(c.Base.String()) }

// URL returns the full URL of path (with query) under the base.
func (c *Client) URL(path string, query url.Values) string {
	u := *c.Base
	u.Path = c.Base.Path + "/" + strings.TrimPrefix(path, "/")
	u.RawQuery = query.Encode()
	return u.String()
}

// Get fetches path and decodes its JSON into out.
func (c *Client) Get(ctx context.Context, path string, query url.Values, out any) error {
	return c.Do(ctx, http.MethodGet, path, query, nil, out)
}

// Do sends one request, with body (if not nil) as JSON, and decodes a JSON
// answer into out (if not nil).
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s: encoding the request: %w", c.Service, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL(path, query), rd)
	if err != nil {
		return fmt.Errorf("%s: building the request: %w", c.Service, redact.Error(err))
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Auth != nil {
		c.Auth(req)
	}
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return c.TransportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return c.TransportError(ctx, err)
	}
	if len(data) > MaxResponseBytes {
		return fmt.Errorf("%s answered more than %d bytes to %s %s: %w", c.Service, MaxResponseBytes, method, path, ErrBadResponse)
	}
	if err := c.statusError(resp, data, method, path); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s answered %s %s with something that is not the expected JSON (%v): %w", c.Service, method, path, err, ErrBadResponse)
	}
	return nil
}

// TransportError words a failure to reach the service, for clients that
// send their own requests (an RPC with a handshake, a login) through c.HTTP:
// the caller's own cancellation as it is, else a timeout or an unreachable
// service naming the URL (credentials masked) and the setting to check.
func (c *Client) TransportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err() // the caller's deadline or cancellation: the host reports it
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%s did not answer within %s at %s: %w", c.Service, c.HTTP.Timeout, c.Redacted(), ErrUnreachable)
	}
	// A *url.Error quotes the whole request URL, query and all; what went
	// wrong is in the error it wraps.
	reason := redact.Error(err).Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		reason = ue.Err.Error()
	}
	return fmt.Errorf("%s is unreachable at %s (%s); check %s: %w", c.Service, c.Redacted(), reason, c.URLVar, ErrUnreachable)
}

// statusError maps a status code to an error that says what to do.
func (c *Client) statusError(resp *http.Response, body []byte, method, path string) error {
	code := resp.StatusCode
	if code < 300 {
		return nil
	}
	what := fmt.Sprintf("%s %s", method, path)
	detail := Detail(body)
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fmt.Errorf("%s refused the credentials (%d)%s; check %s: %w", c.Service, code, suffix(detail), c.CredVar, ErrAuth)
	case code == http.StatusNotFound:
		return fmt.Errorf("%s: not found (%s)%s: %w", c.Service, what, suffix(detail), ErrNotFound)
	case code == http.StatusConflict:
		return fmt.Errorf("%s: conflict (%s)%s: %w", c.Service, what, suffix(detail), ErrConflict)
	case code == http.StatusTooManyRequests:
		wait := ""
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = fmt.Sprintf(" in %ds", s)
		}
		return fmt.Errorf("%s is rate limiting requests; try again%s: %w", c.Service, wait, ErrRateLimited)
	case code >= 500:
		return fmt.Errorf("%s failed (%d %s on %s)%s: %w", c.Service, code, http.StatusText(code), what, suffix(detail), ErrService)
	}
	return fmt.Errorf("%s refused %s (%d %s)%s: %w", c.Service, what, code, http.StatusText(code), suffix(detail), ErrBadResponse)
}

// Detail pulls a service's own error message out of a body: a JSON object's
// status_message, message, error or errorMessage (or the first of a list of
// them), else the start of the text.
func Detail(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	var any1 any
	if json.Unmarshal(body, &any1) == nil {
		if s := messageIn(any1); s != "" {
			return Text(s, 200)
		}
		return ""
	}
	if bytes.HasPrefix(body, []byte("<")) { // an HTML error page says nothing useful
		return ""
	}
	return Text(string(body), 200)
}

func messageIn(v any) string {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range []string{"status_message", "message", "errorMessage", "error", "title"} {
			if s, ok := t[k].(string); ok && s != "" {
				return s
			}
		}
	case []any:
		if len(t) > 0 {
			return messageIn(t[0])
		}
	}
	return ""
}

func suffix(detail string) string {
	if detail == "" {
		return ""
	}
	return ": " + detail
}

// Text is a service's long text (an overview, a description) as the model
// should get it: one line, at most n bytes, cut at a character boundary and
// marked with "...".
func Text(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "..."
	}
	return s
}
