package httpapi_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

// The password and key that a URL setting may carry; no error may quote them.
const (
	urlPass = "hunter2-pass"
	urlKey  = "SECRETKEY42"
)

// closedAddr is a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestErrorsHideURLCredentials: a user's password and a secret query value in
// the base URL stay out of every error, which the model reads.
func TestErrorsHideURLCredentials(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer slow.Close()
	slowHost := strings.TrimPrefix(slow.URL, "http://")
	closed := closedAddr(t)

	tests := []struct {
		name, base, want string
	}{
		{"unreachable", "http://user:" + urlPass + "@" + closed + "/?apikey=" + urlKey,
			"Radarr is unreachable at http://user:***@" + closed + "?apikey=*** ("},
		{"slow", "http://user:" + urlPass + "@" + slowHost + "/?token=" + urlKey,
			"Radarr did not answer within 50ms at http://user:***@" + slowHost + "?token=***: service unreachable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := httpapi.New("Radarr", tc.base, "MMCP_PLUGIN_RADARR_URL", 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Get(context.Background(), "/api/v3/movie", nil, nil)
			if err == nil || strings.Contains(err.Error(), urlPass) || strings.Contains(err.Error(), urlKey) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v\nwant it to contain %q and no credential", err, tc.want)
			}
		})
	}
}

// TestNewHidesURLCredentials: a URL setting that is refused is quoted with its
// credentials masked, or not at all when they cannot be placed.
func TestNewHidesURLCredentials(t *testing.T) {
	tests := []struct{ base, want string }{
		{"ftp://user:" + urlPass + "@nas/?apikey=" + urlKey, `MMCP_PLUGIN_SONARR_URL: "ftp://user:***@nas/?apikey=***" is not an http(s) URL`},
		{"http://user:" + urlPass + "@nas:bad/", `MMCP_PLUGIN_SONARR_URL: "http://user:***@nas:bad/" is not an http(s) URL`},
		{"user:" + urlPass + "@nas:8989", `MMCP_PLUGIN_SONARR_URL: the value (not shown: it may hold credentials) is not an http(s) URL`},
		{"ftp://nas:8989", `MMCP_PLUGIN_SONARR_URL: "ftp://nas:8989" is not an http(s) URL`},
	}
	for _, tc := range tests {
		_, err := httpapi.New("Sonarr", tc.base, "MMCP_PLUGIN_SONARR_URL", time.Second)
		if err == nil || err.Error() != tc.want {
			t.Errorf("New(%q): %v\nwant %s", tc.base, err, tc.want)
		}
	}
}
