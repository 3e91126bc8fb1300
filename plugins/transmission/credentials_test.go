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

// TestURLCredentialsStayOut: credentials written into
// MMCP_PLUGIN_TRANSMISSION_URL itself (user:pass@, a secret-looking query
// parameter) reach neither a tool error nor a context error, which the model
// reads.
func TestURLCredentialsStayOut(t *testing.T) {
	const pass, key = "url-pass-7c1e", "url-token-9d2f"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	served := strings.TrimPrefix(srv.URL, "http://")

	tests := []struct{ name, url, want string }{
		{"unreachable", "http://mmcp:" + pass + "@" + closed + rpcPath + "?token=" + key,
			"Transmission is unreachable at http://mmcp:***@" + closed + rpcPath + "?token=*** ("},
		{"not found", "http://mmcp:" + pass + "@" + served + "/rpc?session=" + key,
			"Transmission: no RPC endpoint at http://mmcp:***@" + served + "/rpc?session=*** (404)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envURL, tc.url)
			t.Setenv(envUser, "")
			t.Setenv(envPass, "")
			s := newPlugin(5 * time.Second).Server()
			r := callTool(t, s, "transmission_list", `{}`)
			if strings.Contains(r.Error, pass) || strings.Contains(r.Error, key) || !strings.Contains(r.Error, tc.want) {
				t.Errorf("tool error %q\nwant it to contain %q and no credential", r.Error, tc.want)
			}
			_, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "downloads"})
			if err == nil || strings.Contains(err.Error(), pass) || strings.Contains(err.Error(), key) {
				t.Errorf("context error %v, want one without the credentials", err)
			}
		})
	}
}
