package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// systemInfo is GET /System/Info of Jellyfin 10.10, shortened.
const systemInfo = `{"LocalAddress":"http://172.18.0.5:8096","ServerName":"media","Version":"10.10.3","ProductName":"Jellyfin Server","OperatingSystem":"","Id":"6c6d1e4b2a9f4c7e8d0b1a2c3d4e5f60","StartupWizardCompleted":true}`

// TestHealth: the probe is one authenticated GET /System/Info; a refused key
// and a server that is not there each say what to check.
func TestHealth(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc // nil: nothing listens
		want    string           // in the problem; "": healthy
	}{
		{"answers", reply(200, systemInfo), ""},
		{"401", reply(401, ""), "Jellyfin refused the credentials (401); check MMCP_PLUGIN_JELLYFIN_API_KEY"},
		{"403", reply(403, ""), "Jellyfin refused the credentials (403); check MMCP_PLUGIN_JELLYFIN_API_KEY"},
		{"nothing listens", nil, "Jellyfin is unreachable at http://127.0.0.1:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var base string
			var f *fake
			if c.handler != nil {
				f = newFake(t, map[string]http.HandlerFunc{"GET /System/Info": c.handler})
				base = f.URL
			} else {
				gone := httptest.NewServer(http.NotFoundHandler())
				gone.Close()
				base = gone.URL
			}
			s := server(t, base, "", time.Second)
			if d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{}); err != nil || !d.HasHealth {
				t.Errorf("has_health not declared (%v)", err)
			}
			r, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Ok != (c.want == "") || !strings.Contains(r.Problem, c.want) || strings.Contains(r.Problem, apiKey) {
				t.Errorf("ok %v, problem %q; want %q", r.Ok, r.Problem, c.want)
			}
			if f != nil {
				if got := f.requests(); len(got) != 1 || got[0].Auth != authValue {
					t.Errorf("requests %+v, want one with the key", got)
				}
			}
		})
	}
}
