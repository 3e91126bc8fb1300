package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
	"github.com/mmcpd/mmcpd/pkg/redact"
)

// client speaks qBittorrent's Web API v2: queries and form posts under
// <URL>/api/v2/, behind a cookie session that auth/login opens.
// httpapi.Client sends JSON and knows no sessions; it still holds the URL,
// the timeout and the variable names, and its sentinels and wording are
// reused.
type client struct {
	api        *httpapi.Client
	user, pass string
	// origin is scheme://host[:port] of the URL. qBittorrent refuses a
	// request (401) whose Origin or Referer names another host than its Host
	// header (CSRF protection); sending both, made from the URL the request
	// goes to, always matches.
	origin string

	// mu guards the session and serializes logins, so that calls that find
	// the session expired at the same time log in once.
	mu       sync.Mutex
	cookies  []*http.Cookie // from the last login: SID, or QBT_SID_<port> since 5.x
	loggedIn bool
	logins   int // counts logins, so that a call knows whether its session is still the last
}

func newClient(rawURL, user, pass string, timeout time.Duration) (*client, error) {
	api, err := httpapi.New("qBittorrent", rawURL, envURL, timeout)
	if err != nil {
		return nil, err
	}
	origin := api.Base.Scheme + "://" + api.Base.Host // never the userinfo
	return &client{api: api, user: user, pass: pass, origin: origin}, nil
}

// get fetches an API method (path under /api/v2/, e.g. "torrents/info") and
// decodes its JSON answer into out.
func (c *client) get(ctx context.Context, path string, query url.Values, out any) error {
	body, err := c.call(ctx, http.MethodGet, path, query)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("qBittorrent answered %s with something that is not the expected JSON (%s); check that %s is qBittorrent's WebUI address: %w",
			path, httpapi.Text(err.Error(), 120), envURL, httpapi.ErrBadResponse)
	}
	return nil
}

// post sends a form to an API method that changes something (qBittorrent
// 4.4.4 and later refuse those as GET) and returns the answer's text.
func (c *client) post(ctx context.Context, path string, form url.Values) (string, error) {
	body, err := c.call(ctx, http.MethodPost, path, form)
	return strings.TrimSpace(string(body)), err
}

// call sends one request and returns the body of a 2xx answer. It logs in
// first when there is no session yet, and once more when qBittorrent
// refuses the session (it expired, or qBittorrent restarted): 403 in every
// version so far, 401 is taken the same way in case a later one uses it.
func (c *client) call(ctx context.Context, method, path string, params url.Values) ([]byte, error) {
	cookies, seen, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		resp, body, err := c.send(ctx, method, path, params, cookies)
		if err != nil {
			return nil, err
		}
		refused := resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized
		if refused && c.pass != "" && attempt == 0 {
			if cookies, seen, err = c.relogin(ctx, seen); err != nil {
				return nil, err
			}
			continue
		}
		return body, c.statusError(resp, c.detail(resp, body, cookies), method, path)
	}
}

// session returns the cookies to send, logging in first if no login was
// made yet. Without a password there is no login: qBittorrent may let this
// machine in without one (bypass for localhost or whitelisted subnets).
func (c *client) session(ctx context.Context) ([]*http.Cookie, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loggedIn && c.pass != "" {
		if err := c.login(ctx); err != nil {
			return nil, c.logins, err
		}
	}
	return c.cookies, c.logins, nil
}

// relogin opens a new session, unless another call did so since seen.
func (c *client) relogin(ctx context.Context, seen int) ([]*http.Cookie, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logins == seen {
		if err := c.login(ctx); err != nil {
			return nil, c.logins, err
		}
	}
	return c.cookies, c.logins, nil
}

// login runs auth/login; c.mu is held. qBittorrent answers a wrong user
// name or password with 200 and "Fails." up to 5.1, and with 401 since; a
// 403 means the address is banned after too many failed logins.
func (c *client) login(ctx context.Context) error {
	c.loggedIn = false
	form := url.Values{"username": {c.user}, "password": {c.pass}}
	resp, body, err := c.send(ctx, http.MethodPost, "auth/login", form, nil)
	if err != nil {
		return err
	}
	text := strings.TrimSpace(string(body))
	detail := c.detail(resp, body, nil)
	switch code := resp.StatusCode; {
	case code < 300 && (text == "Ok." || text == ""):
		// Only the name and value go back: the attributes are not cookies.
		c.cookies = nil
		for _, ck := range resp.Cookies() {
			c.cookies = append(c.cookies, &http.Cookie{Name: ck.Name, Value: ck.Value})
		}
		c.loggedIn = true
		c.logins++
		return nil
	case code < 300 && text == "Fails.", code == http.StatusUnauthorized:
		return fmt.Errorf("qBittorrent refused the user name and password; check %s and %s: %w", envUser, envPass, httpapi.ErrAuth)
	case code == http.StatusForbidden:
		return fmt.Errorf("qBittorrent refused the login (403)%s; it bans an address for a while after too many failed logins (Web UI ban duration); check %s and %s: %w",
			suffix(detail), envUser, envPass, httpapi.ErrAuth)
	case code < 300:
		return fmt.Errorf("qBittorrent answered the login with %q, not Ok.; check that %s is qBittorrent's WebUI address: %w",
			httpapi.Text(c.blank(text, resp.Cookies()), 60), envURL, httpapi.ErrBadResponse)
	}
	return c.statusError(resp, detail, http.MethodPost, "auth/login")
}

// send makes one HTTP request: params go in the query of a GET and as a
// form in the body of a POST.
func (c *client) send(ctx context.Context, method, path string, params url.Values, cookies []*http.Cookie) (*http.Response, []byte, error) {
	target, body := c.api.URL("api/v2/"+path, params), io.Reader(nil)
	if method != http.MethodGet {
		target, body = c.api.URL("api/v2/"+path, nil), strings.NewReader(params.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, nil, fmt.Errorf("qBittorrent: building the request: %w", redact.Error(err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Origin", c.origin)
	req.Header.Set("Referer", c.origin+c.api.Base.Path+"/")
	for _, ck := range cookies {
		req.AddCookie(ck)
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
		return nil, nil, fmt.Errorf("qBittorrent answered more than %d bytes to %s: %w", httpapi.MaxResponseBytes, path, httpapi.ErrBadResponse)
	}
	return resp, data, nil
}

// detail is qBittorrent's own message in body, on one line, with the
// session cookies (those sent and those set) and the password blanked out: a
// server, or a proxy before it, may quote the request back.
func (c *client) detail(resp *http.Response, body []byte, sent []*http.Cookie) string {
	return httpapi.Detail([]byte(c.blank(string(body), append(resp.Cookies(), sent...))))
}

func (c *client) blank(s string, cookies []*http.Cookie) string {
	secrets := []string{c.pass}
	for _, ck := range cookies {
		secrets = append(secrets, ck.Value)
	}
	for _, v := range secrets {
		if len(v) >= 4 { // shorter ones would blank out ordinary words
			s = strings.ReplaceAll(s, v, "[secret]")
		}
	}
	return s
}

// statusError maps the status of an API call's answer, after any new login,
// to an error that says what to do; detail is the answer's own message.
func (c *client) statusError(resp *http.Response, detail, method, path string) error {
	code := resp.StatusCode
	detail = suffix(detail)
	switch {
	case code < 300:
		return nil
	case code == http.StatusForbidden && c.pass == "":
		return fmt.Errorf("qBittorrent requires a login (403); set %s (and %s unless the WebUI user is admin): %w", envPass, envUser, httpapi.ErrAuth)
	case code == http.StatusForbidden:
		return fmt.Errorf("qBittorrent refused access (403) right after a login; check %s and %s: %w", envUser, envPass, httpapi.ErrAuth)
	case code == http.StatusUnauthorized:
		// What qBittorrent answers when the Origin or Host does not match
		// its own address (CSRF protection, host header validation).
		return fmt.Errorf("qBittorrent refused %s as a request from another site (401); check that %s is the address qBittorrent's WebUI is reached at (a reverse proxy must pass the Host header on): %w", path, envURL, httpapi.ErrAuth)
	case code == http.StatusNotFound:
		return fmt.Errorf("qBittorrent: no Web API method %s at %s (404); check %s (qBittorrent's WebUI address, such as http://127.0.0.1:8080): %w", path, c.api.Redacted(), envURL, httpapi.ErrNotFound)
	case code == http.StatusConflict:
		return fmt.Errorf("qBittorrent: conflict (%s)%s: %w", path, detail, httpapi.ErrConflict)
	case code >= 500:
		return fmt.Errorf("qBittorrent failed (%d %s on %s)%s: %w", code, http.StatusText(code), path, detail, httpapi.ErrService)
	}
	return fmt.Errorf("qBittorrent refused %s %s (%d %s)%s: %w", method, path, code, http.StatusText(code), detail, httpapi.ErrBadResponse)
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}
