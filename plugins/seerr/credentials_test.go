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
)

// TestURLCredentialsStayOut: credentials written into MMCP_PLUGIN_SEERR_URL
// itself (an ?apikey=, a proxy's password) never reach the error the model
// reads or the probe's reason, however Seerr fails; nor does the key.
func TestURLCredentialsStayOut(t *testing.T) {
	const pass, urlKey = "url-pass-4b8a", "url-apikey-0e6d"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer slow.Close()
	slowHost := strings.TrimPrefix(slow.URL, "http://")
	// A server that refuses everything and echoes the key it got, as a
	// careless proxy might.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"message":"bad key ` + r.Header.Get("X-Api-Key") + `"}`))
	}))
	defer echo.Close()
	echoHost := strings.TrimPrefix(echo.URL, "http://")

	tests := []struct{ name, url, want string }{
		{"unreachable, key", "http://" + closed + "/?apikey=" + urlKey,
			"Seerr is unreachable at http://" + closed + "?apikey=*** ("},
		{"unreachable, password", "http://seerr:" + pass + "@" + closed + "/seerr?apikey=" + urlKey,
			"Seerr is unreachable at http://seerr:***@" + closed + "/seerr?apikey=*** ("},
		{"timeout", "http://seerr:" + pass + "@" + slowHost + "/?api_key=" + urlKey,
			"Seerr did not answer within 100ms at http://seerr:***@" + slowHost + "?api_key=***"},
		{"echoed", "http://seerr:" + pass + "@" + echoHost + "/",
			"Seerr refused the credentials (403): bad key [secret]; check MMCP_PLUGIN_SEERR_API_KEY"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := server(t, tc.url, 100*time.Millisecond)
			_, msg := call(t, s, "seerr_search", `{"query":"dune"}`)
			h, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for what, text := range map[string]string{"tool error": msg, "probe": h.Problem} {
				if strings.Contains(text, urlKey) || strings.Contains(text, pass) || strings.Contains(text, apiKey) {
					t.Errorf("%s %q quotes a credential", what, text)
				}
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("%q\nwant it to contain %q", msg, tc.want)
			}
		})
	}
}
