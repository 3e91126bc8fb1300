package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// TestHealth: the probe is a login and one app/version, and when it fails it
// says why in words a person can act on, without the password.
func TestHealth(t *testing.T) {
	cases := []struct {
		name  string
		pass  string
		up    bool     // a fake qBittorrent listens; else nothing does
		parts []string // what the problem says, in order; none: healthy
	}{
		{"answers", testPass, true, nil},
		{"wrong password", "wrong-password", true, []string{"qBittorrent refused the user name and password; check MMCP_PLUGIN_QBITTORRENT_USERNAME and MMCP_PLUGIN_QBITTORRENT_PASSWORD"}},
		{"no password", "", true, []string{"qBittorrent requires a login (403); set MMCP_PLUGIN_QBITTORRENT_PASSWORD"}},
		{"nothing listens", testPass, false, []string{"qBittorrent is unreachable at http://127.0.0.1:", " (", "connection refused", "); check MMCP_PLUGIN_QBITTORRENT_URL"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fake{answers: map[string][]answer{"GET app/version": ok("v4.5.2")}}
			srv := httptest.NewServer(f)
			if c.up {
				t.Cleanup(srv.Close)
			} else {
				srv.Close()
			}
			t.Setenv(envURL, srv.URL)
			t.Setenv(envUser, testUser)
			t.Setenv(envPass, c.pass)
			s := newPlugin(2 * time.Second).Server()
			if d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{}); err != nil || !d.HasHealth {
				t.Errorf("has_health not declared: %v %v", d.GetHasHealth(), err)
			}
			r, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Ok != (c.parts == nil) {
				t.Errorf("ok %v, problem %q", r.Ok, r.Problem)
			}
			rest := r.Problem
			for _, p := range c.parts {
				i := strings.Index(rest, p)
				if i < 0 {
					t.Fatalf("problem %q lacks %q (in order)", r.Problem, p)
				}
				rest = rest[i+len(p):]
			}
			if c.pass != "" && strings.Contains(r.Problem, c.pass) {
				t.Errorf("the password shows: %q", r.Problem)
			}
			if c.parts == nil {
				if got := f.calls(false); len(got) != 1 || got[0] != "GET app/version" {
					t.Errorf("the probe asked %q, want one app/version", got)
				}
			}
		})
	}
}
