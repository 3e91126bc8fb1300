package plugins_test

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// TestToolTakeover: a plugin that declares another plugin's tool without
// its approval must neither run it nor lower the approval.
func TestToolTakeover(t *testing.T) {
	h, _, _ := startHost(t, plugins.Options{}, "works", "guard", "aaa")
	want := "refused: plugins aaa and guard both declare a tool named guard_remove; remove or rename one of them"
	var found bool
	for _, tl := range h.Tools() {
		if tl.Name != "guard_remove" {
			continue
		}
		found = true
		if tl.Disabled != want || !tl.NeedsApproval {
			t.Errorf("guard_remove: disabled %q, needs approval %v; want %q and true", tl.Disabled, tl.NeedsApproval, want)
		}
	}
	if !found {
		t.Error("guard_remove is not listed at all: the user would not learn why it is missing")
	}
	for _, p := range []string{"aaa", "guard"} {
		if ti := toolInfo(t, info(t, h, p), "guard_remove"); ti.Disabled != want {
			t.Errorf("%s's guard_remove: %+v", p, ti)
		}
	}
	if _, err := call(h, "guard_remove", `{"text":"everything"}`, 5*time.Second); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("guard_remove ran or failed otherwise: %v", err)
	}
	worksServes(t, h)

	// Alone, the genuine tool is usable and asks first.
	h2, _, _ := startHost(t, plugins.Options{}, "guard")
	for _, tl := range h2.Tools() {
		if tl.Name == "guard_remove" && (tl.Disabled != "" || !tl.NeedsApproval) {
			t.Errorf("guard alone: %+v", tl)
		}
	}
	if ti := toolInfo(t, info(t, h2, "guard"), "guard_remove"); !ti.NeedsApproval || ti.Disabled != "" {
		t.Errorf("guard alone, as listed: %+v", ti)
	}
}

// TestToolLimits: an oversized tool is refused alone, and tools past the
// daemon's count are refused, each with why; the plugin's other tools serve.
func TestToolLimits(t *testing.T) {
	h, logs, _ := startHost(t, plugins.Options{Limits: plugins.ToolLimits{Tools: 10, DescriptionChars: 1000, SchemaBytes: 8 << 10}}, "bloat", "many", "works")
	p := info(t, h, "bloat")
	if p.Status != plugins.StatusReady {
		t.Fatalf("bloat: %+v", p)
	}
	for tool, want := range map[string]string{
		"bloat_big":  "refused: its description has 5242872 characters, over the limit of 1000 (MMCP_TOOL_MAX_DESCRIPTION_CHARS)",
		"bloat_wide": "refused: its argument schema has ",
	} {
		if ti := toolInfo(t, p, tool); !strings.HasPrefix(ti.Disabled, want) {
			t.Errorf("%s: disabled %q, want %q...", tool, ti.Disabled, want)
		}
		if listed, _ := disabled(h, tool); listed {
			t.Errorf("%s is offered to the model", tool)
		}
	}
	if out := mustCall(t, h, "bloat_echo", `{"text":"small"}`); !strings.Contains(out, "small") {
		t.Errorf("bloat_echo = %s", out)
	}
	// bloat_echo and nine of many's 101 tools make ten.
	if n := len(h.Tools()); n != 10 {
		t.Errorf("%d tools offered, want 10", n)
	}
	if ti := toolInfo(t, info(t, h, "works"), "works_echo"); ti.Disabled != "refused: the daemon already offers 10 tools, its limit (MMCP_TOOLS_MAX)" {
		t.Errorf("works_echo: %+v", ti)
	}
	if !strings.Contains(logs.String(), "tool refused") {
		t.Errorf("no log line:\n%s", logs)
	}
}

// TestGrandchildrenDie: what a plugin forks dies with it, whether the plugin
// crashes or the host stops it; in its own pid namespace even a child that
// left the process group with setsid does.
func TestGrandchildrenDie(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noNS   bool
		escape bool // the setsid child dies too
	}{
		{"pid namespace", false, true},
		{"process group only", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, how := range []string{"crash", "close"} {
				t.Run(how, func(t *testing.T) {
					h, _, dir := startHost(t, plugins.Options{NoPIDNamespace: tc.noNS}, "fork")
					child := childPID(t, h, "fork_child")
					escapee := childPID(t, h, "fork_escape")
					t.Cleanup(func() { _ = syscall.Kill(escapee, syscall.SIGKILL) })
					switch how {
					case "crash":
						if err := syscall.Kill(pidOf(t, dir, "fork"), syscall.SIGKILL); err != nil {
							t.Fatal(err)
						}
					case "close":
						h.Close()
					}
					if !eventually(5*time.Second, func() bool { return !alive(child) }) {
						t.Errorf("the plugin's child %d outlived it", child)
					}
					if tc.escape && !eventually(5*time.Second, func() bool { return !alive(escapee) }) {
						t.Errorf("the plugin's setsid child %d outlived it", escapee)
					}
				})
			}
		})
	}
}

func childPID(t *testing.T, h *plugins.Host, tool string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := h.Call(ctx, tool, []byte(`{}`))
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	pid, err := strconv.Atoi(out)
	if err != nil || !alive(pid) {
		t.Fatalf("%s = %q: no live child", tool, out)
	}
	return pid
}
