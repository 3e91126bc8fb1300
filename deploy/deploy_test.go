package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/internal/needs"
	"github.com/mmcpd/mmcpd/pkg/config"
)

// unitKeys reads a unit file's Key=Value lines per section; a key set twice
// keeps every value, as systemd does for list settings.
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, _ := strings.Cut(line, "=")
			keys[section+"."+k] = append(keys[section+"."+k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// installedUnit is the unit as systemd would load it on a machine where the
// daemon is installed: systemd-analyze checks that ExecStart is an
// executable, so this test's own binary stands in for /usr/local/bin/mmcpd.
func installedUnit(t *testing.T) string {
	t.Helper()
	unit, err := os.ReadFile("mmcpd.service")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/mmcpd serve")) {
		t.Fatal("mmcpd.service no longer starts /usr/local/bin/mmcpd serve: update this test and the README's install steps")
	}
	path := filepath.Join(t.TempDir(), "mmcpd.service")
	unit = bytes.ReplaceAll(unit, []byte("/usr/local/bin/mmcpd"), []byte(self))
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestUnitVerifies(t *testing.T) {
	analyze := needs.Program(t, "systemd-analyze", "systemd")
	// verify exits 0 on an unknown key or a bad value, which it only
	// reports ("Unknown key ..., ignoring"): any output is a failure.
	out, err := exec.Command(analyze, "verify", installedUnit(t)).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestUnitSecurity holds the unit to the exposure score it has (1.5 of 10
// on systemd 252): a hardening line lost in an edit shows here.
func TestUnitSecurity(t *testing.T) {
	analyze := needs.Program(t, "systemd-analyze", "systemd")
	// --offline reads the file alone: no running systemd is needed.
	out, err := exec.Command(analyze, "security", "--offline=yes", "--no-pager", installedUnit(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for mmcpd\.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security: exposure %.1f", score)
	if score > 2.0 {
		t.Errorf("exposure %.1f is over 2.0; what is exposed:\n%s", score, out)
	}
}

// TestUnitSettings pins what the hardening must leave the daemon: the
// namespaces its plugins are isolated with, the unix sockets go-plugin
// talks over, a folder of its own to write, and SIGTERM for the daemon
// alone so that it stops its plugins itself.
func TestUnitSettings(t *testing.T) {
	k := unitKeys(t, "mmcpd.service")
	want := map[string]string{
		"Service.DynamicUser":              "yes",
		"Service.StateDirectory":           "mmcpd",
		"Service.ProtectSystem":            "strict",
		"Service.NoNewPrivileges":          "yes",
		"Service.PrivateTmp":               "yes",
		"Service.RestrictNamespaces":       "user pid",
		"Service.RestrictAddressFamilies":  "AF_UNIX AF_INET AF_INET6",
		"Service.KillMode":                 "mixed",
		"Service.EnvironmentFile":          "-/etc/mmcpd/mmcpd.env",
		"Service.RestartPreventExitStatus": "2",
		"Install.WantedBy":                 "multi-user.target",
	}
	for key, v := range want {
		if got := k[key]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", key, got, v)
		}
	}
	env := strings.Join(k["Service.Environment"], " ")
	for _, v := range []string{"MMCP_DATA_DIR=%S/mmcpd", "MMCP_PLUGINS_DIR=/usr/local/lib/mmcpd/plugins"} {
		if !strings.Contains(env, v) {
			t.Errorf("the unit does not set %s (Environment=%s)", v, env)
		}
	}
}

// settings is every variable the daemon reads, from the same source as the
// env example.
func settings(t *testing.T) map[string]bool {
	t.Helper()
	var b bytes.Buffer
	if err := config.EnvExample(&b); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#(MMCP_[A-Z0-9_]+)=`).FindAllStringSubmatch(b.String(), -1) {
		names[m[1]] = true
	}
	if len(names) < 30 {
		t.Fatalf("only %d settings in the env example", len(names))
	}
	return names
}

// TestVariablesExist catches a misspelt setting in the install files, which
// the daemon would silently ignore.
func TestVariablesExist(t *testing.T) {
	known := settings(t)
	name := regexp.MustCompile(`MMCP_[A-Z0-9_]*[A-Z0-9]`)
	for _, file := range []string{"../Dockerfile", "compose.yaml", "mmcpd.service"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range name.FindAllString(string(b), -1) {
			if !known[v] && !strings.HasPrefix(v, "MMCP_PLUGIN_") {
				t.Errorf("%s names %s, which is no setting of the daemon", file, v)
			}
		}
	}
}
