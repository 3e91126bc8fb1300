package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/server"
)

// BenchmarkLoad drives the real daemon (built without -race, unlike the one
// the tests use) with 200 concurrent sessions against a model that answers
// at once, for MMCP_LOAD_DURATION (10s) per iteration: each session starts
// with its first message, then sends the next as soon as the previous is
// answered. It reports turns/s, p50 and p99 latency, errors (any is a
// failure), and the daemon's goroutines (from /metrics, when it has one),
// open files and threads before and after the load, each after a settle
// period, plus how many connections the daemon opened to Ollama per turn.
//
//	go test -run='^$' -bench=BenchmarkLoad -benchtime=1x ./cmd/mmcpd
func BenchmarkLoad(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads the daemon's figures from /proc")
	}
	const sessions = 200
	duration := 10 * time.Second
	if v := os.Getenv("MMCP_LOAD_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("MMCP_LOAD_DURATION: %v", err)
		}
		duration = d
	}
	const settle = 3 * time.Second
	const idleWait = 15 * time.Second // beyond pkg/llm's idle connection timeout

	fake := newLoadModel(b)
	bin := loadBinary(b)
	d := startLoadDaemon(b, bin, []string{
		"MMCP_OLLAMA_HOST=" + fake.url,
		"MMCP_PLUGINS_DIR=" + b.TempDir(),
		"MMCP_DATA_DIR=" + b.TempDir(),
		"MMCP_MAX_CONCURRENT_TURNS=256",
		"MMCP_LOG_LEVEL=warn", // a step line per turn would only measure the log
	})
	transport := &http.Transport{MaxIdleConnsPerHost: 2 * sessions, MaxConnsPerHost: 2 * sessions}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: time.Minute}

	// Warm up (first connections, first turn), then settle.
	if _, err := loadTurn(client, d.addr, "", "warm up"); err != nil {
		b.Fatalf("first turn: %v\n%s", err, d.logs)
	}
	transport.CloseIdleConnections()
	time.Sleep(settle)
	before := d.sample(b)
	connsBefore := fake.conns.Load()

	var total loadResult
	for b.Loop() {
		total.add(runLoad(client, d.addr, sessions, duration))
	}
	b.StopTimer()

	transport.CloseIdleConnections()
	// Idle keep-alive connections to the model close after the llm
	// client's idle timeout: wait for the counts to come back (or not).
	time.Sleep(settle)
	after := d.sample(b)
	for deadline := time.Now().Add(idleWait); after.goroutines > before.goroutines && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		after = d.sample(b)
	}
	if err := d.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		b.Errorf("the daemon died under load: %v\n%s", err, d.logs)
	}

	lat := slices.Clone(total.latencies)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	turns := float64(len(total.latencies))
	b.ReportMetric(0, "ns/op") // an op is a fixed-length run: the figures below say how it went
	b.ReportMetric(turns/total.elapsed.Seconds(), "turns/s")
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(float64(total.errors), "errors")
	if turns > 0 {
		b.ReportMetric(float64(fake.conns.Load()-connsBefore)/turns, "ollama_conns/turn")
	}
	b.ReportMetric(float64(before.fds), "fds_before")
	b.ReportMetric(float64(after.fds), "fds_after")
	b.ReportMetric(float64(before.threads), "threads_before")
	b.ReportMetric(float64(after.threads), "threads_after")
	b.ReportMetric(before.rssMB, "rss_MB_before")
	b.ReportMetric(after.rssMB, "rss_MB_after")
	if before.goroutines >= 0 && after.goroutines >= 0 {
		b.ReportMetric(float64(before.goroutines), "goroutines_before")
		b.ReportMetric(float64(after.goroutines), "goroutines_after")
	} else {
		b.Log("the daemon has no /metrics with go_goroutines: goroutines not reported")
	}
	b.Logf("open files before: %v; after: %v", before.fdKinds, after.fdKinds)
	b.Logf("%d turns in %s by %d sessions; %d errors", len(total.latencies), total.elapsed.Round(time.Millisecond), sessions, total.errors)
	for _, e := range total.firstErrors {
		b.Log("error:", e)
	}
	if total.errors > 0 {
		b.Errorf("%d turns failed under load", total.errors)
	}
}

// loadResult is what one run of the load measured.
type loadResult struct {
	elapsed     time.Duration
	latencies   []time.Duration // of the turns answered with 200
	errors      int
	firstErrors []string
}

func (r *loadResult) add(o loadResult) {
	r.elapsed += o.elapsed
	r.latencies = append(r.latencies, o.latencies...)
	r.errors += o.errors
	for _, e := range o.firstErrors {
		if len(r.firstErrors) < 5 {
			r.firstErrors = append(r.firstErrors, e)
		}
	}
}

// runLoad runs sessions conversations at once for d: each its first
// message (which creates the session), then one message after another.
func runLoad(client *http.Client, addr string, sessions int, d time.Duration) loadResult {
	results := make([]loadResult, sessions)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for g := range sessions {
		wg.Go(func() {
			r := &results[g]
			id := ""
			for n := 0; time.Now().Before(deadline); n++ {
				t0 := time.Now()
				sid, err := loadTurn(client, addr, id, fmt.Sprintf("what is downloading? (session %d, message %d)", g, n))
				if err != nil {
					r.errors++
					if len(r.firstErrors) < 5 {
						r.firstErrors = append(r.firstErrors, err.Error())
					}
					if id == "" {
						time.Sleep(10 * time.Millisecond) // no session yet: do not spin on a failing start
					}
					continue
				}
				r.latencies = append(r.latencies, time.Since(t0))
				id = sid
			}
		})
	}
	wg.Wait()
	total := loadResult{elapsed: time.Since(start)}
	for _, r := range results {
		total.add(r)
	}
	return total
}

// loadTurn sends one message and returns the session it ran in.
func loadTurn(client *http.Client, addr, session, message string) (string, error) {
	body, _ := json.Marshal(server.ChatRequest{Message: message, SessionID: session})
	resp, err := client.Post("http://"+addr+"/v1/chat", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var cr server.ChatResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		return "", err
	}
	if cr.Answer != "ok" || cr.SessionID == "" || session != "" && cr.SessionID != session {
		return "", fmt.Errorf("unexpected answer: %s", b)
	}
	return cr.SessionID, nil
}

// loadModel is a fake Ollama that answers every chat with final_response at
// once. Unlike ollamatest it records nothing, so a long run does not grow
// the benchmark's memory; it counts the connections the daemon opens.
type loadModel struct {
	url   string
	conns atomic.Int64
}

func newLoadModel(tb testing.TB) *loadModel {
	tb.Helper()
	reply, err := json.Marshal(api.ChatResponse{
		Model:      "bench",
		CreatedAt:  time.Now().UTC(),
		Message:    api.Message{Role: "assistant", Content: `{"thought":"easy","action":"final_response","args":{"answer":"ok"}}`},
		Done:       true,
		DoneReason: "stop",
		Metrics:    api.Metrics{TotalDuration: time.Millisecond, PromptEvalCount: 10, EvalCount: 5},
	})
	if err != nil {
		tb.Fatal(err)
	}
	reply = append(reply, '\n')
	m := &loadModel{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write(reply)
	})
	mux.HandleFunc("POST /api/show", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = io.WriteString(w, `{"details":{"format":"gguf","family":"bench"}}`)
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			m.conns.Add(1)
		}
	}
	srv.Start()
	tb.Cleanup(srv.Close)
	m.url = srv.URL
	return m
}

// loadBuild is the daemon built as it ships (no -race), once.
var loadBuild struct {
	once   sync.Once
	path   string
	err    error
	output []byte
}

func loadBinary(tb testing.TB) string {
	tb.Helper()
	loadBuild.once.Do(func() {
		loadBuild.path = filepath.Join(filepath.Dir(binary), "mmcpd-load")
		loadBuild.output, loadBuild.err = exec.Command("go", "build", "-o", loadBuild.path, ".").CombinedOutput()
	})
	if loadBuild.err != nil {
		tb.Fatalf("building mmcpd: %v\n%s", loadBuild.err, loadBuild.output)
	}
	return loadBuild.path
}

type loadDaemon struct {
	addr string
	cmd  *exec.Cmd
	logs *syncBuffer
}

func startLoadDaemon(tb testing.TB, bin string, env []string) *loadDaemon {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	d := &loadDaemon{addr: addr, logs: &syncBuffer{}}
	d.cmd = exec.Command(bin, "serve")
	d.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "MMCP_LISTEN_ADDR=" + addr, "MMCP_LOG_FORMAT=json"}, env...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = d.cmd.Process.Kill(); _ = d.cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return d
		}
		if time.Now().After(deadline) {
			tb.Fatalf("daemon did not come up:\n%s", d.logs)
		}
	}
}

// loadSample is what can be seen of the daemon from outside.
type loadSample struct {
	fds, threads int
	fdKinds      map[string]int // what the open files are: socket, mmcpd.db-wal, ...
	rssMB        float64
	goroutines   int // -1: no /metrics
}

func (d *loadDaemon) sample(tb testing.TB) loadSample {
	tb.Helper()
	pid := d.cmd.Process.Pid
	s := loadSample{goroutines: -1}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		tb.Fatal(err)
	}
	s.fds = len(fds)
	s.fdKinds = map[string]int{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil {
			continue
		}
		kind, _, _ := strings.Cut(target, ":") // socket:[123], pipe:[456], anon_inode:[eventpoll]
		if strings.HasPrefix(target, "/") {
			kind = filepath.Base(target)
		}
		s.fdKinds[kind]++
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "Threads":
			s.threads, _ = strconv.Atoi(f[0])
		case "VmRSS": // in kB
			kb, _ := strconv.Atoi(f[0])
			s.rssMB = float64(kb) / 1024
		}
	}
	resp, err := http.Get("http://" + d.addr + "/metrics")
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				s.goroutines = int(f)
			}
		}
	}
	return s
}
