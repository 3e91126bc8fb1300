package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// The daemon is killed with SIGKILL while 50 turns run. After a restart on
// the same data folder every turn that was answered with 200 is in its
// session, every other one is interrupted (or, if its commit landed just
// before the kill, done in full), nothing is left running or half written,
// and the database passes SQLite's integrity check.
//
// It never depends on timing: the fake model answers each question after a
// random 0-300 ms, but stops answering for good at the moment every one of
// the 50 requests has reached it (so every turn is recorded as started) and
// at least 10 have been answered; the kill comes after that, once a few 200s
// are back. So some turns always finish and some never can.
func TestCrashRecovery(t *testing.T) {
	const turns = 50
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MMCP_CRASH_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("MMCP_CRASH_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (MMCP_CRASH_SEED=%d reproduces the delays)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6d6d637064))
	var rngMu sync.Mutex
	random := func(n int) time.Duration {
		rngMu.Lock()
		defer rngMu.Unlock()
		return time.Duration(rng.IntN(n))
	}

	fake := ollamatest.New(t)
	var (
		mu       sync.Mutex
		arrived  int
		answered int
		holding  bool
	)
	hold := make(chan struct{})          // closed once the model stops answering
	release := make(chan struct{})       // closed when the test ends, to free held handlers
	t.Cleanup(func() { close(release) }) // runs before the fake's Close, which waits for them
	check := func() {                    // with mu held
		if !holding && arrived == turns && answered >= 10 {
			holding = true
			close(hold)
		}
	}
	fake.Handle(func(req api.ChatRequest) ollamatest.Reply {
		q := crashLastUser(req)
		mu.Lock()
		arrived++
		check()
		mu.Unlock()
		select {
		case <-time.After(random(300) * time.Millisecond):
		case <-hold:
		}
		mu.Lock()
		if holding {
			mu.Unlock()
			<-release
			return ollamatest.Reply{Status: http.StatusServiceUnavailable, Error: "test over"}
		}
		answered++
		check()
		mu.Unlock()
		return ollamatest.Reply{Content: crashFinal(crashAnswerTo(q))}
	})

	data := t.TempDir()
	env := []string{
		"MMCP_OLLAMA_HOST=" + fake.URL,
		"MMCP_DATA_DIR=" + data,
		"MMCP_PLUGINS_DIR=" + t.TempDir(),
		"MMCP_MAX_CONCURRENT_TURNS=64",
		"MMCP_LLM_RATE_LIMIT_RETRIES=0",
	}
	addr, logs, daemon := startDaemon(t, env)

	type outcome struct {
		status  int // 0: no answer (the connection died)
		session string
		answer  string
		err     error
	}
	outcomes := make([]outcome, turns)
	var okMu sync.Mutex
	okCount := 0
	gotOK := make(chan struct{}, turns)
	client := &http.Client{Timeout: 2 * time.Minute}
	var wg sync.WaitGroup
	for i := range turns {
		wg.Go(func() {
			body, _ := json.Marshal(server.ChatRequest{Message: crashQuestion(i)})
			resp, err := client.Post("http://"+addr+"/v1/chat", "application/json", bytes.NewReader(body))
			if err != nil {
				outcomes[i] = outcome{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			o := outcome{status: resp.StatusCode, err: err}
			if err == nil && resp.StatusCode == http.StatusOK {
				var cr server.ChatResponse
				if err := json.Unmarshal(b, &cr); err != nil {
					o.err = fmt.Errorf("decoding %s: %w", b, err)
				}
				o.session, o.answer = cr.SessionID, cr.Answer
			} else if err == nil {
				o.err = fmt.Errorf("%s", b)
			}
			outcomes[i] = o
			if o.status == http.StatusOK && o.err == nil {
				okMu.Lock()
				okCount++
				okMu.Unlock()
				gotOK <- struct{}{}
			}
		})
	}

	select {
	case <-hold:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		t.Fatalf("the model never stopped answering: %d arrived, %d answered\n%s", arrived, answered, logs)
	}
	// A few answers back (at least 10 were given, so they come), then kill
	// while the rest of the answered turns may still be committing.
	for range 3 {
		select {
		case <-gotOK:
		case <-time.After(2 * time.Minute):
			t.Fatalf("no 200 came back\n%s", logs)
		}
	}
	time.Sleep(random(30) * time.Millisecond)
	if err := daemon.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = daemon.Wait()
	wg.Wait()

	okMu.Lock()
	mu.Lock()
	t.Logf("at the kill: %d questions reached the model, %d answered by it, %d turns answered with 200", arrived, answered, okCount)
	mu.Unlock()
	okMu.Unlock()
	for i, o := range outcomes {
		if o.status != 0 && o.status != http.StatusOK {
			t.Errorf("question %d: HTTP %d before the kill: %v", i, o.status, o.err)
		}
		if o.status == http.StatusOK && (o.err != nil || o.answer != crashAnswerTo(crashQuestion(i))) {
			t.Errorf("question %d: 200 with answer %q, %v", i, o.answer, o.err)
		}
	}

	// Restart on the same data folder.
	addr, logs, daemon = startDaemon(t, env)
	views := map[string]server.SessionView{}
	listed := crashListSessions(t, addr)
	for _, s := range listed {
		code, body := crashGet(t, addr, "/v1/sessions/"+url.PathEscape(s.ID))
		var v server.SessionView
		if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
			t.Fatalf("GET session %s: %d %s", s.ID, code, body)
		}
		views[s.ID] = v
	}
	if len(listed) != len(views) {
		t.Errorf("the session pages list %d sessions, %d distinct", len(listed), len(views))
	}
	if len(views) != turns {
		t.Errorf("%d sessions after the restart, want %d (every request reached the model, so every session has its turn)", len(views), turns)
	}

	// Every session: one turn, either done with its answer or interrupted
	// with nothing but its question.
	statuses := map[string]int{}
	for id, v := range views {
		if len(v.Turns) != 1 {
			t.Errorf("session %s (%q): %d turns, want 1: %+v", id, v.Title, len(v.Turns), v.Turns)
			continue
		}
		tv := v.Turns[0]
		statuses[tv.Status]++
		q := v.Title // the title is the whole question: it is short
		if !strings.HasPrefix(q, "question ") {
			t.Errorf("session %s: title %q", id, q)
		}
		if len(tv.Items) == 0 || tv.Items[0].Type != "user" || tv.Items[0].Content != q {
			t.Errorf("session %s: turn does not start with its question: %+v", id, tv.Items)
			continue
		}
		switch tv.Status {
		case store.TurnDone:
			if len(tv.Items) != 2 || tv.Items[1].Type != "assistant" || tv.Items[1].Content != crashAnswerTo(q) || tv.Ended == nil || tv.Error != "" {
				t.Errorf("session %s: a done turn is not whole: %+v", id, tv)
			}
		case store.TurnInterrupted:
			if len(tv.Items) != 1 || tv.Ended == nil {
				t.Errorf("session %s: an interrupted turn has more than its question: %+v", id, tv)
			}
		default:
			t.Errorf("session %s: turn %s after the restart: %+v", id, tv.Status, tv)
		}
	}
	t.Logf("after the restart: %v", statuses)

	// Every 200 is in its session's history.
	ok := 0
	for i, o := range outcomes {
		if o.status != http.StatusOK {
			continue
		}
		ok++
		v, found := views[o.session]
		switch {
		case !found:
			t.Errorf("question %d got 200 in session %s, which is gone after the restart", i, o.session)
		case len(v.Turns) != 1 || v.Turns[0].Status != store.TurnDone:
			t.Errorf("question %d got 200, but its session shows %+v", i, v.Turns)
		case v.Title != crashQuestion(i):
			t.Errorf("question %d got 200 in session %s titled %q", i, o.session, v.Title)
		}
	}
	if ok == 0 || statuses[store.TurnInterrupted] == 0 {
		t.Errorf("the kill came at the wrong time: %d turns answered with 200, %d interrupted; want some of each", ok, statuses[store.TurnInterrupted])
	}
	if t.Failed() {
		t.Logf("daemon log after the restart:\n%s", logs)
	}

	// Stop the daemon, then check the file itself.
	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := daemon.Wait(); err != nil {
		t.Errorf("daemon exit after SIGTERM: %v\n%s", err, logs)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
	if n, err := st.SessionCount(ctx); err != nil || n != turns {
		t.Errorf("SessionCount = %d, %v", n, err)
	}
	for id := range views {
		trs, err := st.Turns(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			if tr.Status == store.TurnRunning || tr.Status == store.TurnInterrupted && len(tr.Messages) != 0 {
				t.Errorf("session %s in the file: %+v", id, tr)
			}
		}
	}
}

func crashQuestion(i int) string { return "question " + strconv.Itoa(i) }

func crashAnswerTo(q string) string { return "answer to " + q }

func crashFinal(answer string) string {
	b, _ := json.Marshal(map[string]any{"thought": "known", "action": "final_response", "args": map[string]string{"answer": answer}})
	return string(b)
}

// crashLastUser is the newest user message of a model request: the
// question, in a fresh session.
func crashLastUser(req api.ChatRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i].Content
		}
	}
	return ""
}

func crashGet(t *testing.T, addr, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, b
}

// crashListSessions pages through GET /v1/sessions.
func crashListSessions(t *testing.T, addr string) []store.Session {
	t.Helper()
	var all []store.Session
	cursor := ""
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("session pages do not end")
		}
		path := "/v1/sessions?limit=7"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		code, body := crashGet(t, addr, path)
		var l server.SessionList
		if code != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		all = append(all, l.Sessions...)
		if l.NextCursor == "" {
			return all
		}
		cursor = l.NextCursor
	}
}
