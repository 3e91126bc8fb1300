package sdk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/encoding/prototext"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

type tmdbSettings struct {
	APIKey     string        `split_words:"true" required:"true" secret:"true" desc:"TMDB API key"`
	BaseURL    string        `split_words:"true" default:"https://api.themoviedb.org/3" desc:"API base URL"`
	Timeout    time.Duration `split_words:"true" default:"10s" desc:"Per request"`
	MaxResults int           `split_words:"true" default:"5"`
	Region     string        `required:"true"`
	PIN        int           `secret:"true"`
	Cache      struct {
		Dir string `split_words:"true"`
	}
}

var tmdbVars = []string{"API_KEY", "BASE_URL", "TIMEOUT", "MAX_RESULTS", "REGION", "PIN", "CACHE_DIR"}

const canary = "canary-secret-7f3a9"

// env sets the plugin's variables to exactly vals; every other one of
// tmdbVars is unset for the test.
func env(t *testing.T, vals map[string]string) {
	t.Helper()
	for _, k := range tmdbVars {
		key := "MMCP_PLUGIN_TMDB_" + k
		t.Setenv(key, "") // restores the old value afterwards
		if v, ok := vals[k]; ok {
			os.Setenv(key, v)
		} else {
			os.Unsetenv(key)
		}
	}
}

func describe(t *testing.T, s pluginpb.PluginServer) *pluginpb.DescribeResponse {
	t.Helper()
	d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSettingsDescribed(t *testing.T) {
	env(t, map[string]string{"API_KEY": canary, "REGION": "FR", "MAX_RESULTS": "7"})
	p := New("tmdb", "1.0.0")
	var cfg tmdbSettings
	p.Settings(&cfg)
	d := describe(t, p.Server())

	want := []*pluginpb.Setting{
		{Key: "API_KEY", Description: "TMDB API key", Required: true, Secret: true},
		{Key: "BASE_URL", Description: "API base URL", Default: "https://api.themoviedb.org/3"},
		{Key: "TIMEOUT", Description: "Per request", Default: "10s"},
		{Key: "MAX_RESULTS", Default: "5"},
		{Key: "REGION", Required: true},
		{Key: "PIN", Secret: true},
		{Key: "CACHE_DIR"},
	}
	if len(d.Settings) != len(want) {
		t.Fatalf("settings: %v", d.Settings)
	}
	for i, w := range want {
		if g := d.Settings[i]; prototext.Format(g) != prototext.Format(w) {
			t.Errorf("setting %d: got {%v}, want {%v}", i, g, w)
		}
	}
	if len(d.SettingProblems) > 0 {
		t.Errorf("problems: %q", d.SettingProblems)
	}
	if cfg.APIKey != canary || cfg.MaxResults != 7 || cfg.Timeout != 10*time.Second || cfg.BaseURL != "https://api.themoviedb.org/3" || cfg.Region != "FR" {
		t.Errorf("values read: %+v", cfg)
	}
	if strings.Contains(prototext.Format(d), canary) {
		t.Error("Describe shows the secret")
	}
}

func TestSettingsProblems(t *testing.T) {
	env(t, map[string]string{
		"REGION":      "", // required but empty
		"TIMEOUT":     "abc",
		"MAX_RESULTS": "many",
		"PIN":         canary, // a secret that does not parse
		"CACHE_DIR":   "/tmp/c",
	})
	p := New("tmdb", "1.0.0")
	var cfg tmdbSettings
	p.Settings(&cfg)
	s := p.Server()
	d := describe(t, s)
	want := []string{
		"MMCP_PLUGIN_TMDB_API_KEY is required",
		`MMCP_PLUGIN_TMDB_TIMEOUT: invalid duration "abc"`,
		`MMCP_PLUGIN_TMDB_MAX_RESULTS: invalid integer "many"`,
		"MMCP_PLUGIN_TMDB_REGION is required",
		"MMCP_PLUGIN_TMDB_PIN: invalid value (a secret, not shown)",
	}
	if !slices.Equal(d.SettingProblems, want) {
		t.Errorf("problems:\n got %q\nwant %q", d.SettingProblems, want)
	}
	if strings.Contains(prototext.Format(d), canary) {
		t.Error("Describe shows the secret")
	}
	// What parsed is there for providers that do not need the rest.
	if cfg.Cache.Dir != "/tmp/c" || cfg.BaseURL != "https://api.themoviedb.org/3" {
		t.Errorf("good values not read: %+v", cfg)
	}
}

func TestSettingsStandby(t *testing.T) {
	env(t, map[string]string{"REGION": "FR"})
	p := New("tmdb", "1.0.0")
	var cfg tmdbSettings
	p.Settings(&cfg)
	called := false
	Tool(p, "tmdb_search", "Search", func(context.Context, searchArgs) (string, error) { called = true; return "", nil })
	p.Context("region", "The region", func(context.Context) (string, error) { return cfg.Region, nil })
	s := p.Server()
	r := call(t, s, "tmdb_search", `{"query":"Dune"}`)
	if called || !strings.Contains(r.Error, "tool tmdb_search is unavailable") || !strings.Contains(r.Error, "MMCP_PLUGIN_TMDB_API_KEY is required") {
		t.Errorf("standby call: %q (called %v)", r.Error, called)
	}
	c, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "region"})
	if err != nil || c.Text != "FR" {
		t.Errorf("context in standby: %v, %v", c, err)
	}
}

func TestSecretScrubbed(t *testing.T) {
	env(t, map[string]string{"API_KEY": canary, "REGION": "FR"})
	p := New("tmdb", "1.0.0")
	p.log = hclog.NewNullLogger()
	var cfg tmdbSettings
	p.Settings(&cfg)
	Tool(p, "tmdb_search", "Search", func(context.Context, searchArgs) (string, error) {
		return "", fmt.Errorf(`Get "%s/search?api_key=%s": dial tcp: refused`, cfg.BaseURL, cfg.APIKey)
	})
	Tool(p, "tmdb_panic", "Panic", func(context.Context, searchArgs) (string, error) { panic("key " + cfg.APIKey) })
	p.Context("key", "Leaks", func(context.Context) (string, error) { return "", errors.New("bad key " + cfg.APIKey) })
	s := p.Server()
	for _, tool := range []string{"tmdb_search", "tmdb_panic"} {
		r := call(t, s, tool, `{"query":"Dune"}`)
		if strings.Contains(r.Error, canary) || !strings.Contains(r.Error, "[secret]") {
			t.Errorf("%s error: %q", tool, r.Error)
		}
	}
	_, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "key"})
	if err == nil || strings.Contains(err.Error(), canary) {
		t.Errorf("context error: %v", err)
	}
}

func TestSettingsMistakes(t *testing.T) {
	env(t, nil)
	cases := map[string]func(p *Plugin){
		"pointer to a struct":  func(p *Plugin) { var s string; p.Settings(&s) },
		"got sdk.tmdbSettings": func(p *Plugin) { p.Settings(tmdbSettings{}) },
		"called twice": func(p *Plugin) {
			var a, b tmdbSettings
			p.Settings(&a)
			p.Settings(&b)
		},
		"is not a boolean": func(p *Plugin) {
			var s struct {
				Key string `secret:"yes"`
			}
			p.Settings(&s)
		},
	}
	for want, declare := range cases {
		p := New("tmdb", "1.0.0")
		declare(p)
		if _, err := p.build(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error with %q, got %v", want, err)
		}
	}
}

func TestSettingProblem(t *testing.T) {
	p := New("tmdb", "1.0.0")
	p.SettingProblem("MMCP_PLUGIN_TMDB_BASE_URL: \"ftp://x\" is not an http(s) URL")
	Tool(p, "tmdb_ping", "ping", func(context.Context, struct{}) (string, error) { return "pong", nil })
	d, err := p.Server().Describe(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.SettingProblems) != 1 || d.SettingProblems[0] != "MMCP_PLUGIN_TMDB_BASE_URL: \"ftp://x\" is not an http(s) URL" {
		t.Errorf("problems = %q", d.SettingProblems)
	}
	r, err := p.Server().Call(context.Background(), &pluginpb.CallRequest{Tool: "tmdb_ping", Args: []byte(`{}`)})
	if err != nil || !strings.Contains(r.Error, "its settings need fixing: MMCP_PLUGIN_TMDB_BASE_URL") {
		t.Errorf("call on standby: %v %v", r, err)
	}
}

// A value that did not parse is the problem to fix first: the plugin's own
// check of its zero value is not reported beside it.
func TestSettingProblemAfterAParseProblem(t *testing.T) {
	t.Setenv("MMCP_PLUGIN_WEB_TIMEOUT", "soon")
	p := New("web", "1.0.0")
	var cfg struct {
		Timeout time.Duration `default:"15s"`
	}
	p.Settings(&cfg)
	p.SettingProblem("MMCP_PLUGIN_WEB_TIMEOUT must be a positive duration")
	Tool(p, "web_ping", "ping", func(context.Context, struct{}) (string, error) { return "pong", nil })
	d, _ := p.Server().Describe(context.Background(), nil)
	if len(d.SettingProblems) != 1 || !strings.Contains(d.SettingProblems[0], `invalid duration "soon"`) {
		t.Errorf("problems = %q", d.SettingProblems)
	}
}
