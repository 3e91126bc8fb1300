package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// configuration is GET /3/configuration, shortened.
const configuration = `{"change_keys":["adult","air_date"],"images":{"base_url":"http://image.tmdb.org/t/p/","secure_base_url":"https://image.tmdb.org/t/p/","poster_sizes":["w92","w154","original"]}}`

// TestHealth: the probe is one GET /configuration with the key, either kind;
// a refused key and a TMDB that is not there each say what to check.
func TestHealth(t *testing.T) {
	cases := []struct {
		name    string
		key     string
		handler http.HandlerFunc
		down    bool   // nothing listens
		want    string // in the problem; "": healthy
	}{
		{"v4 token", v4Token, answer(200, configuration), false, ""},
		{"v3 key", testV3Key, answer(200, configuration), false, ""},
		{"refused key", testV3Key, answer(401, invalidKey), false, "TMDB refused the credentials (401): Invalid API key: You must be granted a valid key.; check MMCP_PLUGIN_TMDB_API_KEY"},
		{"nothing listens", v4Token, answer(200, configuration), true, "TMDB is unreachable at http://127.0.0.1:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, c.handler)
			if c.down {
				f.Close()
			}
			s := plugin(t, f.URL, map[string]string{"API_KEY": c.key})
			if d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{}); err != nil || !d.HasHealth {
				t.Errorf("has_health not declared (%v)", err)
			}
			r, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Ok != (c.want == "") || !strings.Contains(r.Problem, c.want) || strings.Contains(r.Problem, c.key) {
				t.Errorf("ok %v, problem %q; want %q", r.Ok, r.Problem, c.want)
			}
			if c.down {
				return
			}
			req := f.only(t)
			sentKey := req.Query.Get("api_key") == c.key || req.Header.Get("Authorization") == "Bearer "+c.key
			if req.Method != "GET" || req.Path != "/3/configuration" || !sentKey {
				t.Errorf("the probe asked %s %s %v without the key", req.Method, req.Path, req.Query)
			}
		})
	}
}
