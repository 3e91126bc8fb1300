package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// TestURLSettingCredentialsScrubbed: the credentials inside a plain URL
// setting (user:pass@, ?apikey=) are blanked out of tool errors, panics and
// context errors, however the plugin's own code quotes the URL.
func TestURLSettingCredentialsScrubbed(t *testing.T) {
	const pass, key = "p@ss-6f2a", "key+9c4e/b"
	raw := "http://bob:" + url.PathEscape(pass) + "@svc:8080/api?apikey=" + url.QueryEscape(key)
	t.Setenv("MMCP_PLUGIN_URLS_BASE_URL", raw)

	quotes := []struct {
		tool string
		err  func(base string) error
	}{
		{"as_written", func(base string) error { return errors.New("cannot reach " + base) }},
		{"as_url_error", func(base string) error { return &url.Error{Op: "Get", URL: base, Err: errors.New("refused")} }},
		{"unescaped", func(base string) error {
			u, _ := url.Parse(base)
			p, _ := u.User.Password()
			return fmt.Errorf("login %s with %s, key %s", u.User.Username(), p, u.Query().Get("apikey"))
		}},
	}
	p := New("urls", "1.0.0")
	p.log = hclog.NewNullLogger() // the panic is on purpose
	var cfg struct {
		BaseURL string `split_words:"true" desc:"the service"`
	}
	p.Settings(&cfg)
	for _, q := range quotes {
		Tool(p, q.tool, "Fails", func(context.Context, searchArgs) (string, error) {
			return "", q.err(cfg.BaseURL)
		})
	}
	Tool(p, "boom", "Panics", func(context.Context, searchArgs) (string, error) { panic(cfg.BaseURL) })
	p.Context("base", "Fails", func(context.Context) (string, error) { return "", errors.New(cfg.BaseURL) })
	s := p.Server()

	leaks := func(msg string) bool {
		for _, secret := range []string{pass, key, url.PathEscape(pass), url.QueryEscape(key)} {
			if strings.Contains(msg, secret) {
				return true
			}
		}
		return false
	}
	for _, q := range quotes {
		if r := call(t, s, q.tool, `{"query":"x"}`); leaks(r.Error) || !strings.Contains(r.Error, "[secret]") || !strings.Contains(r.Error, "bob") {
			t.Errorf("%s: %q", q.tool, r.Error)
		}
	}
	if r := call(t, s, "boom", `{"query":"x"}`); leaks(r.Error) || !strings.Contains(r.Error, "[secret]") {
		t.Errorf("panic: %q", r.Error)
	}
	if _, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "base"}); err == nil || leaks(err.Error()) {
		t.Errorf("context error: %v", err)
	}
	if d := describe(t, s); leaks(fmt.Sprint(d.Settings)) {
		t.Errorf("Describe: %v", d.Settings)
	}
}
