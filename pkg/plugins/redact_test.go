package plugins_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// TestURLSettingCredentialsMasked: a plain (not secret) setting holding a URL
// with user:pass@ and ?apikey= is listed with both masked, as GET /v1/plugins
// shows it, and neither reaches the log.
func TestURLSettingCredentialsMasked(t *testing.T) {
	const pass, key = "pw-3e9b1c", "url-secret-5a1c7d"
	note := "http://u:" + pass + "@h/?apikey=" + key + "&lang=fr"
	h, logs, _ := startHost(t, plugins.Options{Environ: append(baseEnviron(), "MMCP_PLUGIN_WORKS_NOTE="+note)}, "works")

	var got plugins.SettingInfo
	for _, s := range info(t, h, "works").Settings {
		if s.Variable == "MMCP_PLUGIN_WORKS_NOTE" {
			got = s
		}
	}
	if want := "http://u:***@h/?apikey=***&lang=fr"; !got.Set || got.Value != want {
		t.Errorf("NOTE listed as %+v, want the value %q", got, want)
	}
	listed, err := json.Marshal(h.Plugins())
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{string(listed), logs.String()} {
		if strings.Contains(out, pass) || strings.Contains(out, key) {
			t.Errorf("a credential of the URL setting shows: %s", out)
		}
	}
}
