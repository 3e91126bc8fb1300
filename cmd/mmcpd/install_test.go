package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// TestHealthCommand runs "mmcpd health" as a container runtime would: it
// needs no token from a daemon that has one, finds the daemon from
// MMCP_LISTEN_ADDR (a wildcard address included), and exits 1, never 2,
// for anything but a healthy daemon.
func TestHealthCommand(t *testing.T) {
	fake := ollamatest.New(t)
	addr, logs, daemon := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary})

	out, err := command([]string{"MMCP_LISTEN_ADDR=" + addr}, "health").CombinedOutput()
	if err != nil || string(out) != "ok\n" {
		t.Errorf("health: %v\n%s\nlogs:\n%s", err, out, logs)
	}
	_, port, _ := strings.Cut(addr, ":")
	out, err = command(nil, "health", "--addr", "0.0.0.0:"+port).CombinedOutput()
	if err != nil || string(out) != "ok\n" {
		t.Errorf("health --addr 0.0.0.0:%s: %v\n%s", port, err, out)
	}

	// Something answers, but not a healthy mmcpd.
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"status":"starting"}`, http.StatusServiceUnavailable)
	}))
	defer sick.Close()
	out, err = command(nil, "health", "--addr", strings.TrimPrefix(sick.URL, "http://")).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "unhealthy") {
		t.Errorf("health against a 503: exit %d\n%s", code, out)
	}

	_ = daemon.Process.Kill()
	_ = daemon.Wait()
	out, err = command([]string{"MMCP_LISTEN_ADDR=" + addr}, "health").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "no healthy daemon at "+addr) {
		t.Errorf("health with no daemon: exit %d\n%s", code, out)
	}
	// An invalid setting is still exit 1: Docker reserves 2.
	out, err = command([]string{"MMCP_LOOP_MAX_STEPS=0"}, "health").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "MMCP_LOOP_MAX_STEPS") {
		t.Errorf("health with a bad setting: exit %d\n%s", code, out)
	}
}

func TestVersionLine(t *testing.T) {
	out, err := command(nil, "version").Output()
	want := regexp.MustCompile(`^mmcpd \S+ \(commit \S+, ` + regexp.QuoteMeta(runtime.Version()) + `, ` + runtime.GOOS + `/` + runtime.GOARCH + `\)\n$`)
	if err != nil || !want.Match(out) {
		t.Errorf("version: %v\n%q, want %s", err, out, want)
	}
}

// TestConfigEnvExample: the settings file is printed whatever the
// environment holds, since it documents defaults, not this machine.
func TestConfigEnvExample(t *testing.T) {
	out, err := command([]string{"MMCP_LOOP_MAX_STEPS=0", "MMCP_API_TOKEN=" + canary}, "config", "--env-example").Output()
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("../../deploy/mmcpd.env.example")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(committed) {
		t.Error("config --env-example differs from deploy/mmcpd.env.example (TestEnvExample in pkg/config says how to regenerate it)")
	}
	if strings.Contains(string(out), canary) {
		t.Error("the token reached the example")
	}
	if out, err := command(nil, "config", "--bogus").CombinedOutput(); exitCode(err) != 2 {
		t.Errorf("config --bogus: %v\n%s", err, out)
	}
}
