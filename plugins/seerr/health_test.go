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

// me is GET /api/v1/auth/me as the API key sees it: the owner account.
const me = `{"permissions":2,"warnings":[],"id":1,"email":"alice@example.com","plexUsername":"alice","username":null,"userType":1,"avatar":"/os_logo_square.png","movieQuotaLimit":null,"tvQuotaLimit":null,"createdAt":"2024-01-01T00:00:00.000Z","updatedAt":"2026-11-21T13:00:00.000Z","requestCount":5,"displayName":"alice","settings":{"id":1,"locale":"","discoverRegion":""}}`

// TestHealth: the probe is one GET /api/v1/auth/me with the key (/status
// would answer without it); a refused key and a server that is not there
// each say what to check.
func TestHealth(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc // nil: nothing listens
		want    string           // in the problem; "": healthy
	}{
		{"answers", reply(200, me), ""},
		// What Seerr answers a key that is not its own.
		{"403", reply(403, `{"status":403,"error":"You do not have permission to access this endpoint"}`), "Seerr refused the credentials (403): You do not have permission to access this endpoint; check MMCP_PLUGIN_SEERR_API_KEY"},
		{"401", reply(401, `{"message":"Unauthorized"}`), "Seerr refused the credentials (401): Unauthorized; check MMCP_PLUGIN_SEERR_API_KEY"},
		{"another app", reply(404, ""), "check that MMCP_PLUGIN_SEERR_URL is the address of Jellyseerr or Overseerr"},
		{"nothing listens", nil, "Seerr is unreachable at http://127.0.0.1:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var base string
			var f *fake
			if c.handler != nil {
				f = newFake(t, map[string]http.HandlerFunc{"GET /api/v1/auth/me": c.handler})
				base = f.URL
			} else {
				gone := httptest.NewServer(http.NotFoundHandler())
				gone.Close()
				base = gone.URL
			}
			s := server(t, base, time.Second)
			r, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Ok != (c.want == "") || !strings.Contains(r.Problem, c.want) || strings.Contains(r.Problem, apiKey) {
				t.Errorf("ok %v, problem %q; want %q", r.Ok, r.Problem, c.want)
			}
			if f != nil {
				wantRequests(t, f, "GET /api/v1/auth/me")
			}
		})
	}
}
