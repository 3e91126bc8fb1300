package server

import (
	"crypto/subtle"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strings"
)

// The HTTP boundary: what a request must be before any route reads it. The
// daemon listens on loopback without a token by default, so a web page in the
// user's browser is the attacker to keep out: through DNS rebinding (a name
// it controls, resolved to 127.0.0.1, makes the daemon "same-origin"; the
// Host header still carries that name) and through cross-origin "simple"
// requests (a form or fetch POST with text/plain, which needs no CORS
// preflight).

// hostPolicy decides which Host headers name this daemon.
type hostPolicy struct {
	anyHost  bool            // "*" in AllowedHosts
	listen   string          // the listen address's host, normalised
	wildcard bool            // listening on every address of the machine
	allowed  map[string]bool // "name" (any port) or "name:port", normalised
}

func newHostPolicy(listenAddr string, allowed []string) hostPolicy {
	p := hostPolicy{allowed: map[string]bool{}}
	if listenAddr != "" {
		host, _ := splitHost(listenAddr)
		addr, err := netip.ParseAddr(host)
		p.listen = host
		p.wildcard = host == "" || err == nil && addr.IsUnspecified()
	}
	for _, a := range allowed {
		a = strings.TrimSpace(a)
		if a == "*" {
			p.anyHost = true
			continue
		}
		if host, port := splitHost(a); host != "" {
			p.allowed[hostKey(host, port)] = true
		}
	}
	return p
}

// allows reports whether a request's Host names this daemon: a loopback
// name or address (any port), the listen address's host, any IP address when
// the daemon listens on all of them (an address is never a rebound name, and
// the machine's addresses cannot be listed for good), or an allowed name.
func (p hostPolicy) allows(hostport string) bool {
	host, port := splitHost(hostport)
	if host == "" {
		return false
	}
	if host == "localhost" || host == p.listen || p.anyHost {
		return true
	}
	if addr, err := netip.ParseAddr(host); err == nil && (addr.Unmap().IsLoopback() || p.wildcard) {
		return true
	}
	return p.allowed[host] || port != "" && p.allowed[hostKey(host, port)]
}

// splitHost reads "host", "host:port" or "[v6]:port" as a lower-case host
// without a trailing dot (example.com. is example.com) and the port, if any.
func splitHost(hostport string) (host, port string) {
	hostport = strings.TrimSpace(hostport)
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), port
}

func hostKey(host, port string) string {
	if port == "" {
		return host
	}
	return net.JoinHostPort(host, port)
}

// guarded refuses requests from outside the boundary: a Host that does not
// name the daemon (421), and a browser's cross-origin write (403). /healthz
// is outside every check: it reveals nothing, and supervisors probe it with
// whatever Host they have (a pod IP, a container name).
func (s *Server) guarded(next http.Handler) http.Handler {
	hosts := newHostPolicy(s.ListenAddr, s.AllowedHosts)
	// The standard library's check: writes (not GET, HEAD, OPTIONS) are
	// refused when Sec-Fetch-Site says cross-site or same-site, or when the
	// Origin is not the request's own Host; requests with neither header
	// (curl, SDKs, servers) are not browsers' and pass.
	origins := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if !hosts.allows(r.Host) {
			s.fail(w, r, http.StatusMisdirectedRequest, "host_not_allowed",
				"the Host header does not name this daemon; use its address or localhost, or list the name in MMCP_ALLOWED_HOSTS", false)
			return
		}
		if err := origins.Check(r); err != nil {
			s.fail(w, r, http.StatusForbidden, "origin_not_allowed",
				"cross-origin request refused: mmcpd takes writes only from clients that are not web pages, or from its own origin", false)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// jsonBody reports whether a request that writes may go on: POST and PATCH
// must say their body is JSON (application/json, UTF-8 if a charset is
// given), so that no HTML form or CORS-free fetch can reach a route; DELETE
// carries no body, and needs a JSON type only when it sends one.
func jsonBody(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	switch r.Method {
	case http.MethodPost, http.MethodPatch:
	case http.MethodDelete:
		if ct == "" && r.ContentLength == 0 {
			return true
		}
	default:
		return true
	}
	typ, params, err := mime.ParseMediaType(ct)
	if err != nil || typ != "application/json" {
		return false
	}
	charset, ok := params["charset"]
	return !ok || strings.EqualFold(charset, "utf-8")
}

// bearerToken reads the credentials of an Authorization header of the Bearer
// scheme, whose name is case-insensitive (RFC 7235); spaces may separate it
// from the token.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// tokenMatches compares in constant time, so that the answer's timing tells
// nothing about how much of a guess was right.
func tokenMatches(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// cleanPath reports whether p is written as the routes are: no . or ..
// segments and no double slashes. The mux would answer any other path with a
// redirect; an API has no use for one.
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}
