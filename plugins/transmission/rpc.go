package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
	"github.com/mmcpd/mmcpd/pkg/redact"
)

// sessionHeader carries Transmission's CSRF token (rpc-spec 2.3.1).
const sessionHeader = "X-Transmission-Session-Id"

// rpcClient speaks Transmission's RPC: JSON POSTed to one URL, behind a
// session-id handshake. httpapi.Client posts to paths under a base and hides
// the headers of a 409, so it cannot do the handshake; it still holds the
// URL, timeout and variable names, and its sentinels and wording are reused.
type rpcClient struct {
	api        *httpapi.Client
	user, pass string

	mu      sync.Mutex
	session string // the last id Transmission handed out; it may change at any time

	tag atomic.Int64
}

type rpcRequest struct {
	Method    string `json:"method"`
	Arguments any    `json:"arguments,omitempty"`
	Tag       int64  `json:"tag"`
}

type rpcResponse struct {
	Result    string          `json:"result"`
	Arguments json.RawMessage `json:"arguments"`
}

func newRPCClient(rawURL, user, pass string, timeout time.Duration) (*rpcClient, error) {
	api, err := httpapi.New("Transmission", rawURL, envURL, timeout)
	if err != nil {
		return nil, err
	}
	return &rpcClient{api: api, user: user, pass: pass}, nil
}

// call runs one RPC method and decodes its arguments into out (if not nil).
// A 409 means the session id is missing or stale: the request is sent once
// more with the id that came with it.
func (c *rpcClient) call(ctx context.Context, method string, args, out any) error {
	body, err := json.Marshal(rpcRequest{Method: method, Arguments: args, Tag: c.tag.Add(1)})
	if err != nil {
		return fmt.Errorf("Transmission: encoding %s: %w", method, err)
	}
	for attempt := 0; ; attempt++ {
		resp, data, err := c.post(ctx, body)
		if err != nil {
			return err
		}
		if resp.StatusCode == http.StatusConflict {
			id := resp.Header.Get(sessionHeader)
			if id == "" {
				return fmt.Errorf("Transmission answered %s with 409 but no session id; check that %s is Transmission's RPC URL: %w", method, envURL, httpapi.ErrBadResponse)
			}
			c.setSession(id)
			if attempt == 0 {
				continue
			}
			return fmt.Errorf("Transmission refused its own session id twice for %s (409); try again: %w", method, httpapi.ErrConflict)
		}
		if err := c.statusError(resp, data, method); err != nil {
			return err
		}
		return c.decode(data, method, out)
	}
}

func (c *rpcClient) post(ctx context.Context, body []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.api.Base.String(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("Transmission: building the request: %w", redact.Error(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if id := c.getSession(); id != "" {
		req.Header.Set(sessionHeader, id)
	}
	if c.user != "" || c.pass != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	resp, err := c.api.HTTP.Do(req)
	if err != nil {
		return nil, nil, c.api.TransportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, httpapi.MaxResponseBytes+1))
	if err != nil {
		return nil, nil, c.api.TransportError(ctx, err)
	}
	if len(data) > httpapi.MaxResponseBytes {
		return nil, nil, fmt.Errorf("Transmission answered more than %d bytes: %w", httpapi.MaxResponseBytes, httpapi.ErrBadResponse)
	}
	return resp, data, nil
}

func (c *rpcClient) getSession() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

func (c *rpcClient) setSession(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.session = id
}

// statusError maps an HTTP status to an error that says what to do.
func (c *rpcClient) statusError(resp *http.Response, body []byte, method string) error {
	code := resp.StatusCode
	switch {
	case code < 300:
		return nil
	case code == http.StatusUnauthorized && c.user == "" && c.pass == "":
		return fmt.Errorf("Transmission requires a user name and password (401); set %s and %s: %w", envUser, envPass, httpapi.ErrAuth)
	case code == http.StatusUnauthorized:
		return fmt.Errorf("Transmission refused the credentials (401); check %s and %s: %w", envUser, envPass, httpapi.ErrAuth)
	case code == http.StatusForbidden:
		// Transmission answers 403 to an address outside rpc-whitelist, and
		// after too many failed logins; its page says which.
		return fmt.Errorf("Transmission refused access (403)%s; check rpc-whitelist in its settings.json, %s and %s: %w", suffix(htmlText(body)), envUser, envPass, httpapi.ErrAuth)
	case code == http.StatusMisdirectedRequest:
		return fmt.Errorf("Transmission refused the host name of %s (421); add it to rpc-host-whitelist in its settings.json or use an IP address: %w", envURL, httpapi.ErrAuth)
	case code == http.StatusNotFound:
		return fmt.Errorf("Transmission: no RPC endpoint at %s (404); check %s (it usually ends in /transmission/rpc): %w", c.api.Redacted(), envURL, httpapi.ErrNotFound)
	case code == http.StatusTooManyRequests:
		wait := ""
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = fmt.Sprintf(" in %ds", s)
		}
		return fmt.Errorf("Transmission is rate limiting requests; try again%s: %w", wait, httpapi.ErrRateLimited)
	case code >= 500:
		return fmt.Errorf("Transmission failed (%d %s on %s)%s: %w", code, http.StatusText(code), method, suffix(httpapi.Detail(body)), httpapi.ErrService)
	}
	return fmt.Errorf("Transmission refused %s (%d %s)%s: %w", method, code, http.StatusText(code), suffix(httpapi.Detail(body)), httpapi.ErrBadResponse)
}

// decode reads an RPC answer: a result other than "success" is
// Transmission's own error message.
func (c *rpcClient) decode(data []byte, method string, out any) error {
	var r rpcResponse
	if err := json.Unmarshal(data, &r); err != nil || r.Result == "" {
		why := "no result"
		if err != nil {
			why = err.Error()
		}
		return fmt.Errorf("Transmission answered %s with something that is not an RPC answer (%s); check that %s is Transmission's RPC URL: %w", method, httpapi.Text(why, 120), envURL, httpapi.ErrBadResponse)
	}
	if r.Result != "success" {
		return &rpcError{method: method, result: httpapi.Text(r.Result, 200)}
	}
	if out == nil || len(r.Arguments) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.Arguments, out); err != nil {
		return fmt.Errorf("Transmission answered %s with arguments of an unexpected shape (%v): %w", method, err, httpapi.ErrBadResponse)
	}
	return nil
}

// rpcError is a request Transmission understood and refused.
type rpcError struct{ method, result string }

func (e *rpcError) Error() string {
	return fmt.Sprintf("Transmission refused %s: %s", e.method, e.result)
}

func (e *rpcError) Unwrap() error { return httpapi.ErrService }

var tags = regexp.MustCompile(`<[^>]*>`)

// htmlText is the text of Transmission's small HTML error pages.
func htmlText(body []byte) string {
	return httpapi.Text(tags.ReplaceAllString(string(body), " "), 200)
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}
