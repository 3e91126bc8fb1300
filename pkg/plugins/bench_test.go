package plugins_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

// The echo of the test plugin, as its works_echo runs it.
type benchEchoArgs struct {
	Text string `json:"text" jsonschema:"description=What to echo"`
}

type benchEchoResult struct {
	Echo   string `json:"echo"`
	Plugin string `json:"plugin"`
}

func benchEcho(_ context.Context, a benchEchoArgs) (benchEchoResult, error) {
	return benchEchoResult{Echo: a.Text, Plugin: "works"}, nil
}

// reportPercentiles adds p50 and p99 of the per-call durations.
func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	b.ReportMetric(float64(at(0.50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(at(0.99).Nanoseconds()), "p99-ns")
}

// BenchmarkCall compares a round trip of works_echo through the host (gRPC to
// another process) with the same echo in-process: the bare function (decode
// the arguments, run, encode the result), and the SDK's server called
// directly (its own schema check and guard goroutine, no transport).
func BenchmarkCall(b *testing.B) {
	h, _, _ := startHost(b, plugins.Options{Log: slog.New(slog.DiscardHandler)}, "works")
	args := []byte(`{"text":"hello, plugin"}`)
	want := `{"echo":"hello, plugin","plugin":"works"}`

	b.Run("plugin", func(b *testing.B) {
		durs := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			out, err := h.Call(ctx, "works_echo", args)
			cancel()
			durs = append(durs, time.Since(start))
			if err != nil || out != want {
				b.Fatalf("%s, %v", out, err)
			}
		}
		b.StopTimer()
		reportPercentiles(b, durs)
	})

	b.Run("direct", func(b *testing.B) {
		durs := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			var a benchEchoArgs
			dec := json.NewDecoder(bytes.NewReader(args))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&a); err != nil {
				b.Fatal(err)
			}
			r, _ := benchEcho(context.Background(), a)
			out, err := json.Marshal(r)
			durs = append(durs, time.Since(start))
			if err != nil || string(out) != want {
				b.Fatalf("%s, %v", out, err)
			}
		}
		b.StopTimer()
		reportPercentiles(b, durs)
	})

	b.Run("sdk-in-process", func(b *testing.B) {
		p := sdk.New("works", "0.1.0")
		sdk.Tool(p, "works_echo", "Echoes text", benchEcho)
		srv := p.Server()
		req := &pluginpb.CallRequest{Tool: "works_echo", Args: args, TimeoutMs: 10000, MaxResultBytes: plugins.MaxResultBytes}
		durs := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			resp, err := srv.Call(context.Background(), req)
			durs = append(durs, time.Since(start))
			if err != nil || string(resp.Result) != want {
				b.Fatalf("%v, %v", resp, err)
			}
		}
		b.StopTimer()
		reportPercentiles(b, durs)
	})
}

// healthySix start cleanly and have no context providers or settings that
// would slow a start.
var healthySix = []string{"works", "slow", "panic", "exit", "envdump", "huge"}

// startOnce starts a host over dir, checks every plugin is ready, and
// returns how long Start took and how to close the host.
func startOnce(b *testing.B, dir string) (time.Duration, func()) {
	h, err := plugins.New(plugins.Options{Dir: dir, Environ: baseEnviron(), StartTimeout: 30 * time.Second, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	h.Start(context.Background())
	took := time.Since(start)
	for _, p := range h.Plugins() {
		if p.Status != plugins.StatusReady {
			h.Close()
			b.Fatalf("%s: %s %s", p.Name, p.Status, p.Reason)
		}
	}
	return took, h.Close
}

// BenchmarkStart measures a host start to all ready with six plugins (ns/op),
// and in the same run the slowest of the six started alone; ratio is the
// first over the second (the target is under 2: starts run in parallel).
func BenchmarkStart(b *testing.B) {
	all := pluginDir(b, healthySix...)
	singles := make([]string, len(healthySix))
	for i, n := range healthySix {
		singles[i] = pluginDir(b, n)
	}
	var total, slowest time.Duration
	b.ResetTimer()
	for range b.N {
		took, closeAll := startOnce(b, all)
		b.StopTimer() // Close and the single starts are not the measure
		total += took
		closeAll()
		var worst time.Duration
		for _, d := range singles {
			took, closeOne := startOnce(b, d)
			closeOne()
			worst = max(worst, took)
		}
		slowest += worst
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(total.Milliseconds())/n, "six-ms")
	b.ReportMetric(float64(slowest.Milliseconds())/n, "slowest-single-ms")
	b.ReportMetric(float64(total)/float64(slowest), "ratio")
}

// BenchmarkIdleMemory reports the resident memory of six idle plugin
// processes, summed from /proc/<pid>/status (VmRSS), and the CPU time each
// used (/proc/<pid>/stat), which is nearly all its start. ns/op is the cost
// of reading the memory figures.
func BenchmarkIdleMemory(b *testing.B) {
	_, _, dir := startHost(b, plugins.Options{Log: slog.New(slog.DiscardHandler)}, healthySix...)
	time.Sleep(500 * time.Millisecond) // let the start settle
	var kb int
	b.ResetTimer()
	for range b.N {
		pids := procs(dir)
		if len(pids) != len(healthySix) {
			b.Fatalf("want %d plugin processes, found %v", len(healthySix), pids)
		}
		kb = 0
		for pid := range pids {
			kb += vmRSS(b, pid)
		}
	}
	b.StopTimer()
	var ticks int
	for pid := range procs(dir) {
		ticks += cpuTicks(b, pid)
	}
	// Mostly the start: Go's runtime, the TLS certificate, the handshake.
	b.ReportMetric(float64(ticks)*10/float64(len(healthySix)), "per-plugin-cpu-ms")
	b.ReportMetric(float64(kb)/1024, "plugins-rss-MB")
	b.ReportMetric(float64(kb)/1024/float64(len(healthySix)), "per-plugin-rss-MB")
}

// cpuTicks reads the user and system time a process has used, in clock
// ticks (USER_HZ, 100 a second on Linux).
func cpuTicks(b *testing.B, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// fields[0] is the state (field 3); utime and stime are fields 14 and 15.
	utime, err1 := strconv.Atoi(fields[11])
	stime, err2 := strconv.Atoi(fields[12])
	if err1 != nil || err2 != nil {
		b.Fatalf("stat of %d: %s", pid, s)
	}
	return utime + stime
}

// vmRSS reads a process's resident set size in kB.
func vmRSS(b *testing.B, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				b.Fatal(err)
			}
			return kb
		}
	}
	b.Fatalf("no VmRSS for %d", pid)
	return 0
}

// BenchmarkFirstCall compares a call of works_echo that has to start its
// stopped plugin (MMCP_PLUGINS_IDLE at 1ms stops it after every call) with a
// call of the running plugin; p50/p99 per call, and added-ms, the p50 a
// start adds.
func BenchmarkFirstCall(b *testing.B) {
	args := []byte(`{"text":"hello, plugin"}`)
	measure := func(b *testing.B, h *plugins.Host, stopped bool) time.Duration {
		durs := make([]time.Duration, 0, b.N)
		for range b.N {
			if stopped {
				b.StopTimer()
				for h.Running() != 0 {
					time.Sleep(time.Millisecond)
				}
				b.StartTimer()
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := h.Call(ctx, "works_echo", args)
			cancel()
			durs = append(durs, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reportPercentiles(b, durs)
		slices.Sort(durs)
		return durs[len(durs)/2]
	}
	var cold, warm time.Duration
	b.Run("stopped", func(b *testing.B) {
		h, _, _ := startHost(b, plugins.Options{Log: slog.New(slog.DiscardHandler), Idle: time.Millisecond}, "works")
		cold = measure(b, h, true)
	})
	b.Run("running", func(b *testing.B) {
		h, _, _ := startHost(b, plugins.Options{Log: slog.New(slog.DiscardHandler), Idle: time.Hour}, "works")
		warm = measure(b, h, false)
		b.ReportMetric(float64(cold-warm)/float64(time.Millisecond), "added-ms")
	})
}
