package plugins_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// probeEnv is a daemon environment for the probe plugin: its FLAG file in a
// fresh folder (absent: the probe succeeds) and the canary as its KEY.
func probeEnv(t *testing.T) (environ []string, flag string) {
	t.Helper()
	flag = filepath.Join(t.TempDir(), "down")
	return append(baseEnviron(), "MMCP_PLUGIN_PROBE_FLAG="+flag, "MMCP_PLUGIN_PROBE_KEY="+canary), flag
}

func writeFlag(t *testing.T, flag, content string) {
	t.Helper()
	if err := os.WriteFile(flag, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func removeFlag(t *testing.T, flag string) {
	t.Helper()
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
}

// noCanary fails the test if the probe plugin's secret shows in the
// plugins' listing or the log.
func noCanary(t *testing.T, h *plugins.Host, logs *logBuffer) {
	t.Helper()
	listed, err := json.Marshal(h.Plugins())
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{string(listed), logs.String()} {
		if strings.Contains(out, canary) {
			t.Errorf("the probe's secret shows: %s", out)
		}
	}
}

// TestProbeAtStart: a plugin whose probe fails at start is unreachable, with
// the probe's reason (its secret blanked out), and its tools are listed as
// disabled; a plugin without a probe is not held back by it.
func TestProbeAtStart(t *testing.T) {
	cases := []struct {
		name   string
		flag   string // the FLAG file's content; "" leaves it absent
		status string
		reason string
	}{
		{"answers", "", plugins.StatusReady, ""},
		{"refuses", "connection refused", plugins.StatusUnreachable, "cannot reach the test service (connection refused) with key [secret]"},
		{"hangs", "hang", plugins.StatusUnreachable, "its health probe did not answer within 300ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			environ, flag := probeEnv(t)
			if c.flag != "" {
				writeFlag(t, flag, c.flag)
			}
			began := time.Now()
			h, logs, _ := startHost(t, plugins.Options{Environ: environ, Probe: plugins.ProbeOptions{Timeout: 300 * time.Millisecond, Backoff: time.Hour}}, "works", "probe")
			if p := info(t, h, "probe"); p.Status != c.status || p.Reason != c.reason {
				t.Errorf("probe: status %q reason %q; want %q %q", p.Status, p.Reason, c.status, c.reason)
			}
			want := ""
			if c.reason != "" {
				want = "plugin probe is unreachable: " + c.reason
			}
			if listed, why := disabled(h, "probe_echo"); !listed || why != want {
				t.Errorf("probe_echo listed %v, disabled %q; want %q", listed, why, want)
			}
			if ti := toolInfo(t, info(t, h, "probe"), "probe_echo"); ti.Disabled != want {
				t.Errorf("probe_echo in the plugins' listing: disabled %q; want %q", ti.Disabled, want)
			}
			if p := info(t, h, "works"); p.Status != plugins.StatusReady {
				t.Errorf("works, which has no probe: %+v", p)
			}
			if _, why := disabled(h, "works_echo"); why != "" {
				t.Errorf("works_echo disabled: %q", why)
			}
			if took := time.Since(began); took > 5*time.Second {
				t.Errorf("start took %s: the probe's timeout did not bound it", took)
			}
			noCanary(t, h, logs)
		})
	}
}

// TestProbeRecoversInTheBackground: an unreachable plugin is probed again on
// its own, and is ready once its service answers.
func TestProbeRecoversInTheBackground(t *testing.T) {
	environ, flag := probeEnv(t)
	writeFlag(t, flag, "connection refused")
	// MaxAge is long, so only the background schedule can bring it back.
	h, logs, _ := startHost(t, plugins.Options{Environ: environ, Probe: plugins.ProbeOptions{Backoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxAge: time.Hour}}, "probe")
	if p := info(t, h, "probe"); p.Status != plugins.StatusUnreachable {
		t.Fatalf("at start: %+v", p)
	}
	// Probed again and again while it fails, still unreachable.
	time.Sleep(500 * time.Millisecond)
	if p := info(t, h, "probe"); p.Status != plugins.StatusUnreachable {
		t.Fatalf("while failing: %+v", p)
	}
	removeFlag(t, flag)
	// info (GET /v1/plugins) does not probe: only the schedule does.
	if !eventually(5*time.Second, func() bool { return info(t, h, "probe").Status == plugins.StatusReady }) {
		t.Fatalf("never ready again: %+v", info(t, h, "probe"))
	}
	if p := info(t, h, "probe"); p.Reason != "" {
		t.Errorf("ready with a reason: %q", p.Reason)
	}
	if _, why := disabled(h, "probe_echo"); why != "" {
		t.Errorf("probe_echo disabled: %q", why)
	}
	mustCall(t, h, "probe_echo", `{"text":"x"}`)
	if !strings.Contains(logs.String(), "plugin reachable again") {
		t.Errorf("no log line says it is back:\n%s", logs)
	}
}

// TestProbeOnListing: a listing of the tools probes again a plugin whose last
// answer is stale, both ways.
func TestProbeOnListing(t *testing.T) {
	environ, flag := probeEnv(t)
	// Backoff is long, so only listings can change the state.
	h, _, _ := startHost(t, plugins.Options{Environ: environ, Probe: plugins.ProbeOptions{MaxAge: 100 * time.Millisecond, Backoff: time.Hour}}, "probe")
	if p := info(t, h, "probe"); p.Status != plugins.StatusReady {
		t.Fatalf("at start: %+v", p)
	}
	writeFlag(t, flag, "service stopped")
	const want = "plugin probe is unreachable: cannot reach the test service (service stopped) with key [secret]"
	if !eventually(5*time.Second, func() bool { _, why := disabled(h, "probe_echo"); return why == want }) {
		_, why := disabled(h, "probe_echo")
		t.Fatalf("probe_echo disabled %q; want %q", why, want)
	}
	removeFlag(t, flag)
	if !eventually(5*time.Second, func() bool { _, why := disabled(h, "probe_echo"); return why == "" }) {
		t.Fatalf("never ready again: %+v", info(t, h, "probe"))
	}
}

// TestProbeFreshAnswerHolds: within MaxAge a listing does not probe again.
func TestProbeFreshAnswerHolds(t *testing.T) {
	environ, flag := probeEnv(t)
	h, _, _ := startHost(t, plugins.Options{Environ: environ, Probe: plugins.ProbeOptions{MaxAge: time.Hour, Backoff: time.Hour}}, "probe")
	writeFlag(t, flag, "service stopped")
	for range 10 {
		if _, why := disabled(h, "probe_echo"); why != "" {
			t.Fatalf("probed again within MaxAge: %q", why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCallMakesUnreachableReady: a call still reaches an unreachable plugin,
// and one that succeeds proves the service answers.
func TestCallMakesUnreachableReady(t *testing.T) {
	environ, flag := probeEnv(t)
	writeFlag(t, flag, "connection refused")
	h, _, _ := startHost(t, plugins.Options{Environ: environ, Probe: plugins.ProbeOptions{MaxAge: time.Hour, Backoff: time.Hour}}, "probe")
	if p := info(t, h, "probe"); p.Status != plugins.StatusUnreachable {
		t.Fatalf("at start: %+v", p)
	}
	if out := mustCall(t, h, "probe_echo", `{"text":"x"}`); out != `{"echo":"x","plugin":"probe"}` {
		t.Errorf("probe_echo = %s", out)
	}
	if p := info(t, h, "probe"); p.Status != plugins.StatusReady || p.Reason != "" {
		t.Errorf("after a successful call: %+v", p)
	}
}

// TestProbeUnimplemented: a plugin that claims a probe but does not serve
// the RPC is taken as one without a probe.
func TestProbeUnimplemented(t *testing.T) {
	h, logs, _ := startHost(t, plugins.Options{}, "noprobe")
	if p := info(t, h, "noprobe"); p.Status != plugins.StatusReady || p.Reason != "" {
		t.Errorf("noprobe: %+v", p)
	}
	mustCall(t, h, "noprobe_echo", `{"text":"x"}`)
	if !strings.Contains(logs.String(), "does not serve it") {
		t.Errorf("no log line about the missing probe:\n%s", logs)
	}
}
