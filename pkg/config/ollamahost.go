package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/redact"
)

// normalizeOllamaHost turns what users put in OLLAMA_HOST into a base URL,
// accepting the same shapes as Ollama's own clients so that one value works
// for both: a bare host or host:port gets http:// and, when it has no port,
// 11434; an explicit URL without a port keeps its scheme's default port (a
// reverse proxy); an empty value means the local server. The unspecified
// address 0.0.0.0, which people copy from the server's bind setting, means
// "this machine" and becomes 127.0.0.1.
func normalizeOllamaHost(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		// url.Parse would read "localhost:11434" as scheme "localhost".
		hostport, path, _ := strings.Cut(s, "/")
		host, port, err := net.SplitHostPort(hostport)
		if err != nil { // no port, or a bare IPv6 address
			host, port = strings.Trim(hostport, "[]"), ""
		}
		if port == "" {
			port = defaultOllamaPort
		}
		s = "http://" + net.JoinHostPort(host, port)
		if path != "" {
			s += "/" + path
		}
	}

	invalid := func(format string, args ...any) error {
		return fmt.Errorf(format+" (expected an http(s) URL or host[:port], e.g. http://127.0.0.1:11434)", args...)
	}
	u, err := url.Parse(s)
	if err != nil {
		if strings.Contains(s, "@") {
			return "", invalid("cannot parse the value (not shown: it may contain credentials)")
		}
		return "", invalid("cannot parse %q", redact.URL(s))
	}
	if u.User != nil {
		// The URL is logged and shown by Effective; credentials must not be.
		return "", invalid("user:password@ is not supported")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", invalid("scheme must be http or https, got %q", u.Scheme)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		// The query may hold a key: the message is logged.
		return "", invalid("query and fragment are not supported, got %q", redact.URL(s))
	}

	host, port := u.Hostname(), u.Port()
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", invalid("port must be between 1 and 65535, got %q", port)
		}
		u.Host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		u.Host = "[" + host + "]"
	} else {
		u.Host = host
	}
	// Clients append /api/... to this base, so a trailing slash would double up.
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}
