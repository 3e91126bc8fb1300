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

// TestURLCredentialsStayOut: credentials written into MMCP_PLUGIN_PLEX_URL
// itself (an ?X-Plex-Token= copied from Plex Web, a proxy's password) never
// reach the error the model reads, the context line or the probe's reason,
// however Plex fails; nor does the token setting.
func TestURLCredentialsStayOut(t *testing.T) {
	const pass, urlToken = "url-pass-4b8a", "url-token-0e6d"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer slow.Close()
	slowHost := strings.TrimPrefix(slow.URL, "http://")
	// A server that refuses everything and echoes what it got, as a
	// careless proxy might.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":"bad token ` + r.Header.Get("X-Plex-Token") + ` for ` + r.URL.String() + `"}`))
	}))
	defer echo.Close()
	echoHost := strings.TrimPrefix(echo.URL, "http://")

	tests := []struct{ name, url, want string }{
		{"unreachable, token", "http://" + closed + "/?X-Plex-Token=" + urlToken,
			"Plex is unreachable at http://" + closed + "?X-Plex-Token=*** ("},
		{"unreachable, password", "http://plex:" + pass + "@" + closed + "/plex?X-Plex-Token=" + urlToken,
			"Plex is unreachable at http://plex:***@" + closed + "/plex?X-Plex-Token=*** ("},
		{"timeout", "http://plex:" + pass + "@" + slowHost + "/?X-Plex-Token=" + urlToken,
			"Plex did not answer within 100ms at http://plex:***@" + slowHost + "?X-Plex-Token=***"},
		{"echoed", "http://plex:" + pass + "@" + echoHost + "/?X-Plex-Token=" + urlToken,
			"Plex refused the credentials (401): bad token [secret] for /status/sessions; check MMCP_PLUGIN_PLEX_TOKEN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := server(t, tc.url, 100*time.Millisecond)
			_, msg := call(t, s, "plex_now_playing", `{}`)
			_, ctxErr := contextLine(t, s)
			h, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
			if err != nil || ctxErr == nil {
				t.Fatalf("health %v, context %v", err, ctxErr)
			}
			for what, text := range map[string]string{"tool error": msg, "context error": ctxErr.Error(), "probe": h.Problem} {
				if strings.Contains(text, urlToken) || strings.Contains(text, pass) || strings.Contains(text, token) {
					t.Errorf("%s %q quotes a credential", what, text)
				}
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("%q\nwant it to contain %q", msg, tc.want)
			}
		})
	}
}
