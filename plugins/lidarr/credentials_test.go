package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/plugins/internal/arr/arrtest"
)

// TestURLCredentialsStayOut: credentials written into MMCP_PLUGIN_LIDARR_URL
// itself (an ?apikey=, a user's password) never reach the tool error the
// model reads, nor the probe's reason, however Lidarr fails.
func TestURLCredentialsStayOut(t *testing.T) {
	const pass, key = "url-pass-71c2", "url-apikey-93fd"
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
			"Lidarr is unreachable at http://" + closed + "?apikey=*** ("},
		{"unreachable, password", "http://lidarr:" + pass + "@" + closed + "/lidarr?apikey=" + key,
			"Lidarr is unreachable at http://lidarr:***@" + closed + "/lidarr?apikey=*** ("},
		{"timeout", "http://lidarr:" + pass + "@" + slowHost + "/?api_key=" + key,
			"Lidarr did not answer within 100ms at http://lidarr:***@" + slowHost + "?api_key=***"},
	}
	env := arrtest.Env()
	env.Timeout = 100 * time.Millisecond
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := arrtest.Start(t, "lidarr", tc.url, newPlugin, env)
			_, msg := arrtest.Call(t, s, "lidarr_lookup", `{"term":"wet leg"}`)
			h, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for what, text := range map[string]string{"tool error": msg, "probe": h.Problem} {
				if strings.Contains(text, key) || strings.Contains(text, pass) || !strings.Contains(text, tc.want) {
					t.Errorf("%s: %q\nwant it to contain %q and no credential", what, text, tc.want)
				}
			}
		})
	}
}
