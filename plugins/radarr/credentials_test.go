package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/plugins/internal/arr/arrtest"
)

// TestURLCredentialsStayOut: credentials written into MMCP_PLUGIN_RADARR_URL
// itself (an ?apikey=, a user's password) never reach the tool error the
// model reads, however Radarr fails.
func TestURLCredentialsStayOut(t *testing.T) {
	const pass, key = "url-pass-4b8a", "url-apikey-0e6d"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer slow.Close()
	slowHost := strings.TrimPrefix(slow.URL, "http://")

	tests := []struct{ name, url, want string }{
		{"unreachable, key", "http://" + closed + "/?apikey=" + key,
			"Radarr is unreachable at http://" + closed + "?apikey=*** ("},
		{"unreachable, password", "http://radarr:" + pass + "@" + closed + "/radarr?apikey=" + key,
			"Radarr is unreachable at http://radarr:***@" + closed + "/radarr?apikey=*** ("},
		{"timeout", "http://radarr:" + pass + "@" + slowHost + "/?api_key=" + key,
			"Radarr did not answer within 100ms at http://radarr:***@" + slowHost + "?api_key=***"},
	}
	env := arrtest.Env()
	env.Timeout = 100 * time.Millisecond
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := arrtest.Start(t, "radarr", tc.url, newPlugin, env)
			_, msg := arrtest.Call(t, s, "radarr_lookup", `{"term":"dune"}`)
			if strings.Contains(msg, key) || strings.Contains(msg, pass) || !strings.Contains(msg, tc.want) {
				t.Errorf("%q\nwant it to contain %q and no credential", msg, tc.want)
			}
		})
	}
}
