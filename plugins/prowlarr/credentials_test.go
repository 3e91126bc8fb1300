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

// TestURLCredentialsStayOut: credentials written into MMCP_PLUGIN_PROWLARR_URL
// itself (an ?apikey=, a user's password) never reach the tool error the
// model reads, nor the probe's reason, however Prowlarr fails.
func TestURLCredentialsStayOut(t *testing.T) {
	const pass, key = "url-pass-5d0e", "url-apikey-c7a1"
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
			"Prowlarr is unreachable at http://" + closed + "?apikey=*** ("},
		{"unreachable, password", "http://prowlarr:" + pass + "@" + closed + "/prowlarr?apikey=" + key,
			"Prowlarr is unreachable at http://prowlarr:***@" + closed + "/prowlarr?apikey=*** ("},
		{"timeout", "http://prowlarr:" + pass + "@" + slowHost + "/?api_key=" + key,
			"Prowlarr did not answer within 100ms at http://prowlarr:***@" + slowHost + "?api_key=***"},
	}
	env := arrtest.Env()
	env.Timeout = 100 * time.Millisecond
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := arrtest.Start(t, "prowlarr", tc.url, newPlugin, env)
			_, msg := arrtest.Call(t, s, "prowlarr_search", `{"query":"dune"}`)
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
