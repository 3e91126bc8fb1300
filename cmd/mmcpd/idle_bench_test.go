package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// bundled holds every bundled plugin (plugins/<name>/ with Go sources), built
// once next to the daemon's binary.
var bundled struct {
	once   sync.Once
	dir    string
	err    error
	output []byte
}

func bundledPluginsDir(b *testing.B) string {
	b.Helper()
	bundled.once.Do(func() {
		bundled.dir = filepath.Join(filepath.Dir(binary), "bundled-plugins")
		if bundled.err = os.MkdirAll(bundled.dir, 0o755); bundled.err != nil {
			return
		}
		srcs, _ := filepath.Glob("../../plugins/*/*.go")
		seen := map[string]bool{}
		for _, src := range srcs {
			name := filepath.Base(filepath.Dir(src))
			if seen[name] || name == "internal" {
				continue
			}
			seen[name] = true
			out := filepath.Join(bundled.dir, plugins.FilePrefix+name)
			if bundled.output, bundled.err = exec.Command("go", "build", "-o", out, "../../plugins/"+name).CombinedOutput(); bundled.err != nil {
				return
			}
		}
	})
	if bundled.err != nil {
		b.Fatalf("building the bundled plugins: %v\n%s", bundled.err, bundled.output)
	}
	return bundled.dir
}

// treeRSS sums VmRSS, in bytes, of the daemon and of the plugin processes
// run from dir (an MCP server's would count too; there is none here).
func treeRSS(b *testing.B, daemon int, dir string) (bytes int64, plugins int) {
	b.Helper()
	bytes = rssOf(daemon)
	for pid := range pluginProcs(dir) {
		bytes += rssOf(pid)
		plugins++
	}
	return bytes, plugins
}

func rssOf(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// readyDaemon starts the daemon and returns it with the time from its start
// to /readyz answering 200.
func readyDaemon(b *testing.B, env []string) (*loadDaemon, time.Duration) {
	b.Helper()
	start := time.Now()
	d := startLoadDaemon(b, loadBinary(b), append([]string{"MMCP_OLLAMA_HOST=http://127.0.0.1:1", "MMCP_LOG_LEVEL=warn"}, env...))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		resp, err := http.Get("http://" + d.addr + "/readyz")
		if err == nil {
			body := make([]byte, 4096)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			// No model server: /readyz says only that; the plugins must
			// not be starting any more.
			if !strings.Contains(string(body[:n]), "starting") {
				return d, time.Since(start)
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("daemon not ready:\n%s", d.logs)
		}
	}
}

func stopDaemon(d *loadDaemon) {
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
}

func loadAvg() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// BenchmarkIdleFootprint: resident memory of the daemon and its plugin
// processes with every bundled plugin and no settings: with
// MMCP_PLUGINS_IDLE=0 (every plugin running, the old behaviour), and after
// the idle period with MMCP_PLUGINS_IDLE=1s; and of the daemon with no
// plugins. ratio = after / alone.
func BenchmarkIdleFootprint(b *testing.B) {
	dir := bundledPluginsDir(b)
	empty := b.TempDir()
	var before, after, alone int64
	var resident int
	for range b.N {
		d, _ := readyDaemon(b, []string{"MMCP_PLUGINS_DIR=" + dir, "MMCP_PLUGINS_IDLE=0", "MMCP_DATA_DIR=" + b.TempDir()})
		time.Sleep(2 * time.Second) // settled
		rss, _ := treeRSS(b, d.cmd.Process.Pid, dir)
		before += rss
		stopDaemon(d)

		d, _ = readyDaemon(b, []string{"MMCP_PLUGINS_DIR=" + dir, "MMCP_PLUGINS_IDLE=1s", "MMCP_DATA_DIR=" + b.TempDir()})
		time.Sleep(3 * time.Second) // the idle period, and the stops
		rss, n := treeRSS(b, d.cmd.Process.Pid, dir)
		after += rss
		resident = max(resident, n)
		stopDaemon(d)

		d, _ = readyDaemon(b, []string{"MMCP_PLUGINS_DIR=" + empty, "MMCP_DATA_DIR=" + b.TempDir()})
		time.Sleep(2 * time.Second)
		rss, _ = treeRSS(b, d.cmd.Process.Pid, empty)
		alone += rss
		stopDaemon(d)
	}
	n := float64(b.N) * (1 << 20)
	b.ReportMetric(float64(before)/n, "all-running-MB")
	b.ReportMetric(float64(after)/n, "after-idle-MB")
	b.ReportMetric(float64(alone)/n, "daemon-alone-MB")
	b.ReportMetric(float64(resident), "resident-plugins")
	b.ReportMetric(float64(after)/float64(alone), "ratio")
	b.ReportMetric(loadAvg(), "load1")
}

// BenchmarkStartToReady: from the daemon's start to /readyz without
// starting plugins, with every bundled plugin described from the cache (a
// daemon started before on the same data folder) against the daemon with no
// plugins, and, for comparison, with no cache (every plugin started and
// described). ratio = cached / alone.
func BenchmarkStartToReady(b *testing.B) {
	dir := bundledPluginsDir(b)
	empty := b.TempDir()
	data := b.TempDir()
	d, _ := readyDaemon(b, []string{"MMCP_PLUGINS_DIR=" + dir, "MMCP_DATA_DIR=" + data})
	stopDaemon(d) // fills the cache
	var cached, cold, alone time.Duration
	b.ResetTimer()
	for range b.N {
		d, took := readyDaemon(b, []string{"MMCP_PLUGINS_DIR=" + dir, "MMCP_DATA_DIR=" + data})
		cached += took
		stopDaemon(d)
		d, took = readyDaemon(b, []string{"MMCP_PLUGINS_DIR=" + empty, "MMCP_DATA_DIR=" + b.TempDir()})
		alone += took
		stopDaemon(d)
		d, took = readyDaemon(b, []string{"MMCP_PLUGINS_DIR=" + dir, "MMCP_DATA_DIR=" + b.TempDir()})
		cold += took
		stopDaemon(d)
	}
	b.StopTimer()
	n := float64(b.N) * float64(time.Millisecond)
	b.ReportMetric(float64(cached)/n, "cached-ms")
	b.ReportMetric(float64(alone)/n, "alone-ms")
	b.ReportMetric(float64(cold)/n, "no-cache-ms")
	b.ReportMetric(float64(cached)/float64(alone), "ratio")
	b.ReportMetric(loadAvg(), "load1")
}
