package sdk

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// TestHealth: what a probe answers, and what the host reads of it.
func TestHealth(t *testing.T) {
	release := make(chan struct{}) // what the stubborn probe waits for
	t.Cleanup(func() { close(release) })
	cases := []struct {
		name    string
		key     string                          // API_KEY; "" leaves the plugin on standby
		probe   func(ctx context.Context) error // nil: none declared
		code    codes.Code                      // of the RPC
		problem string                          // when the RPC answers; "": ok
	}{
		{"none", canary, nil, codes.Unimplemented, ""},
		{"answers", canary, func(context.Context) error { return nil }, codes.OK, ""},
		{"fails", canary, func(context.Context) error {
			return errors.New("cannot reach TMDB at https://api.example/3?api_key=" + canary + "\n(connection refused)")
		}, codes.OK, "cannot reach TMDB at https://api.example/3?api_key=[secret] (connection refused)"},
		{"fails silently", canary, func(context.Context) error { return errors.New(" ") }, codes.OK, "the health probe failed without saying why"},
		{"panics", canary, func(context.Context) error { panic("key " + canary) }, codes.OK, "health probe panicked: key [secret]"},
		{"ignores its deadline", canary, func(context.Context) error { <-release; return nil }, codes.DeadlineExceeded, ""},
		{"on standby", "", func(context.Context) error { t.Error("probed on standby"); return nil }, codes.OK,
			"its settings need fixing: MMCP_PLUGIN_TMDB_API_KEY is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env(t, map[string]string{"API_KEY": c.key, "REGION": "FR"})
			p := New("tmdb", "1.0.0")
			p.log = hclog.NewNullLogger() // the panic is on purpose
			var cfg tmdbSettings
			p.Settings(&cfg)
			if c.probe != nil {
				p.Health(c.probe)
			}
			s := p.Server()
			if d := describe(t, s); d.HasHealth != (c.probe != nil) {
				t.Errorf("has_health %v", d.HasHealth)
			}
			// Room for a loaded machine; only the probe that ignores it waits it out.
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			r, err := s.Health(ctx, &pluginpb.HealthRequest{})
			if status.Code(err) != c.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, c.code)
			}
			if err != nil {
				return
			}
			if r.Ok != (c.problem == "") || r.Problem != c.problem {
				t.Errorf("ok %v, problem %q; want %q", r.Ok, r.Problem, c.problem)
			}
		})
	}
}

func TestHealthDeclarationMistakes(t *testing.T) {
	ok := func(context.Context) error { return nil }
	cases := map[string]func(p *Plugin){
		"function is nil": func(p *Plugin) { p.Health(nil) },
		"declared twice":  func(p *Plugin) { p.Health(ok); p.Health(ok) },
	}
	for want, declare := range cases {
		p := New("test", "1")
		declare(p)
		if _, err := p.build(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error with %q, got %v", want, err)
		}
	}
}
