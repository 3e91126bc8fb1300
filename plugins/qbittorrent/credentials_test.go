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
// MMCP_PLUGIN_QBITTORRENT_URL itself (user:pass@ for a reverse proxy, a
// secret-looking query parameter) reach neither a tool error nor a context
// error, which the model reads.
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
		{"unreachable", "http://proxy:" + pass + "@" + closed + "/qbt?token=" + key,
			"qBittorrent is unreachable at http://proxy:***@" + closed + "/qbt?token=*** ("},
		{"not found", "http://proxy:" + pass + "@" + served + "/qbt?session=" + key,
			"qBittorrent: no Web API method auth/login at http://proxy:***@" + served + "/qbt?session=*** (404)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envURL, tc.url)
			t.Setenv(envUser, "mmcp")
			t.Setenv(envPass, testPass)
			s := newPlugin(5 * time.Second).Server()
			r := callTool(t, s, "qbittorrent_list", `{}`)
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

// TestOriginHasNoCredentials: the Origin and Referer headers name the
// host qBittorrent is reached at, never the URL's user, password or query.
func TestOriginHasNoCredentials(t *testing.T) {
	f := &fake{base: "/qbt", answers: map[string][]answer{"GET torrents/info": ok(`[]`)}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	t.Setenv(envURL, strings.Replace(srv.URL, "http://", "http://proxy:url-pass-7c1e@", 1)+"/qbt?token=url-token-9d2f")
	t.Setenv(envUser, testUser)
	t.Setenv(envPass, testPass)
	if r := callTool(t, newPlugin(5*time.Second).Server(), "qbittorrent_list", `{}`); r.Error != "" {
		t.Fatal(r.Error)
	}
	for _, r := range f.seen() {
		if r.Origin != srv.URL || r.Referer != srv.URL+"/qbt/" {
			t.Errorf("%s: Origin %q Referer %q", r.Path, r.Origin, r.Referer)
		}
	}
}
