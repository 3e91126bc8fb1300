package plugins_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// flakyService answers GET /data with each status of statuses in turn, then
// 200 {"value": "fresh"}; it counts the requests.
func flakyService(t *testing.T, statuses ...int) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1))
		if i <= len(statuses) {
			w.WriteHeader(statuses[i-1])
			_, _ = io.WriteString(w, `{"message":"busy"}`)
			return
		}
		_, _ = io.WriteString(w, `{"value":"fresh"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func flakyHost(t *testing.T, url string) *plugins.Host {
	t.Helper()
	h, _, _ := startHost(t, plugins.Options{Environ: append(baseEnviron(), "MMCP_PLUGIN_FLAKY_URL="+url)}, "flaky")
	return h
}

// TestTransientOverTheProtocol: an httpapi error of the kinds that pass
// (5xx, 429, unreachable) reaches the host marked transient, through the
// SDK and the plugin protocol; the others do not. Changes travels too.
func TestTransientOverTheProtocol(t *testing.T) {
	for _, tc := range []struct {
		status    int
		transient bool
	}{
		{http.StatusServiceUnavailable, true},
		{http.StatusTooManyRequests, true},
		{http.StatusInternalServerError, true},
		{http.StatusNotFound, false},
		{http.StatusUnauthorized, false},
	} {
		srv, _ := flakyService(t, tc.status)
		h := flakyHost(t, srv.URL)
		_, err := call(h, "flaky_fetch", `{}`, 10*time.Second)
		var tr loop.Transient
		if err == nil || (errors.As(err, &tr) && tr.Transient()) != tc.transient {
			t.Errorf("%d: err %v, transient %v", tc.status, err, tc.transient)
		}
	}
	// Nothing listening: unreachable, transient.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := call(flakyHost(t, url), "flaky_fetch", `{}`, 10*time.Second)
	var tr loop.Transient
	if !errors.As(err, &tr) || !tr.Transient() || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("unreachable: %v", err)
	}
	h := flakyHost(t, url)
	for _, tl := range h.Tools() {
		if want := tl.Name == "flaky_change"; tl.Changes != want {
			t.Errorf("%s: Changes %v", tl.Name, tl.Changes)
		}
	}
	for _, tl := range info(t, h, "flaky").Tools {
		if want := tl.Name == "flaky_change"; tl.Changes != want {
			t.Errorf("/v1/plugins %s: changes %v", tl.Name, tl.Changes)
		}
	}
}

// TestRetryWithRealPlugin runs turns through the loop with the plugin host:
// a read-only tool whose service answered 503 once is called again and the
// model reads its result; a tool declared as changing, or an error that is
// not transient, is not called again and the model reads the failure.
func TestRetryWithRealPlugin(t *testing.T) {
	srv, requests := flakyService(t, http.StatusServiceUnavailable)
	h := flakyHost(t, srv.URL)
	model := func(fake *ollamatest.Server) loop.Model {
		m, err := llm.New(llm.Options{Host: fake.URL, Model: "test-model", Retries: 1, Backoff: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	cfg := loop.DefaultConfig
	cfg.RetryWait = 10 * time.Millisecond
	for _, tc := range []struct {
		tool, saw string
		attempts  int
	}{
		{"flaky_fetch", "Result of flaky_fetch:\nfresh", 2},
		{"flaky_change", "flaky_change failed: the service answered 503", 0},
		{"flaky_broken", "flaky_broken failed: no such thing", 0},
	} {
		fake := ollamatest.New(t,
			ollamatest.Reply{Content: `{"thought":"t","action":"` + tc.tool + `","args":{}}`},
			ollamatest.Reply{Content: `{"thought":"t","action":"final_response","args":{"answer":"ok"}}`},
		)
		r := &loop.Runner{Model: model(fake), Tools: h, Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		res, err := r.Run(context.Background(), &convo.Conversation{}, "q", nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs := fake.Requests()[1].Messages
		if got := msgs[len(msgs)-1].Content; got != tc.saw || len(res.Steps[0].Attempts) != tc.attempts {
			t.Errorf("%s: the model read %q; attempts %+v", tc.tool, got, res.Steps[0].Attempts)
		}
	}
	if n := requests.Load(); n != 2 {
		t.Errorf("the service got %d requests, want 2", n)
	}
}
