// Package source owns what the torrent-client plugins accept as a torrent to
// add, apart from any one client's API.
package source

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

// Check keeps an add to what the add tools promise: one magnet link
// with a torrent hash, or an http(s) URL of a .torrent file. The clients
// take more (Transmission a path on its own machine, qBittorrent bc://bt/
// links and several URLs split at newlines), which a model must not reach.
// It returns s without surrounding space.
func Check(s string) (string, error) {
	s = strings.TrimSpace(s)
	if strings.ContainsAny(s, "\r\n") {
		return "", errors.New("source must be one magnet link or URL, on one line")
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("source %q is not a valid magnet link or URL: %v", httpapi.Text(s, 100), err)
	}
	switch strings.ToLower(u.Scheme) {
	case "magnet":
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil || !strings.HasPrefix(strings.ToLower(q.Get("xt")), "urn:bt") {
			return "", fmt.Errorf("source %q is a magnet link without a torrent hash (xt=urn:btih:...)", httpapi.Text(s, 100))
		}
	case "http", "https":
		if u.Host == "" {
			return "", fmt.Errorf("source %q is a URL without a host", httpapi.Text(s, 100))
		}
	default:
		return "", fmt.Errorf("source must be a magnet: link or an http(s) URL of a .torrent file, not %q", httpapi.Text(s, 100))
	}
	return s, nil
}
