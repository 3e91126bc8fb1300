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

// sections is GET /library/sections, shortened.
const sections = `{"MediaContainer":{"size":2,"allowSync":false,"title1":"Plex Library","Directory":[
	{"allowSync":true,"art":"/:/resources/movie-fanart.jpg","key":"1","type":"movie","title":"Films","agent":"tv.plex.agents.movie","scanner":"Plex Movie","language":"en-US","uuid":"1b9b1c4e-0f4f-4a4f-9b57-2f1f7c0e5a11","updatedAt":1737212400,"scannedAt":1737212400},
	{"allowSync":true,"key":"2","type":"show","title":"TV Shows","agent":"tv.plex.agents.series","scanner":"Plex TV Series","language":"en-US","uuid":"8c3f2f0a-3f7e-4d1b-a5d6-6a9e2b4c7d22"}]}}`

// TestHealth: the probe is one GET /library/sections with the token (the
// identity endpoint would answer without it); a refused token and a server
// that is not there each say what to check.
func TestHealth(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc // nil: nothing listens
		want    string           // in the problem; "": healthy
	}{
		{"answers", reply(200, sections), ""},
		{"401", reply(401, `<html><head><title>Unauthorized</title></head><body><h1>401 Unauthorized</h1></body></html>`), "Plex refused the credentials (401); check MMCP_PLUGIN_PLEX_TOKEN"},
		{"another app", reply(404, ""), "check that MMCP_PLUGIN_PLEX_URL is the address of Plex Media Server"},
		{"nothing listens", nil, "Plex is unreachable at http://127.0.0.1:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var base string
			var f *fake
			if c.handler != nil {
				f = newFake(t, map[string]http.HandlerFunc{"GET /library/sections": c.handler})
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
			if r.Ok != (c.want == "") || !strings.Contains(r.Problem, c.want) || strings.Contains(r.Problem, token) {
				t.Errorf("ok %v, problem %q; want %q", r.Ok, r.Problem, c.want)
			}
			if f != nil {
				wantRequests(t, f, request{Method: "GET", Path: "/library/sections"})
			}
		})
	}
}
