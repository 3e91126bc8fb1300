package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// dbRun runs cmd to its end, or kills it after limit (a daemon that should
// have refused to start); it returns the output and the exit status (-1 when
// it had to be killed).
func dbRun(t *testing.T, cmd *exec.Cmd, limit time.Duration) (string, int) {
	t.Helper()
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), exitCode(err)
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), -1
	}
}

// dbPost posts body as JSON and returns the status and the answer.
func dbPost(t *testing.T, addr, path string, body any) (int, []byte) {
	t.Helper()
	code, out, err := dbPostErr(addr, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, out
}

// dbPostErr is dbPost for a goroutine of its own.
func dbPostErr(addr, path string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Post("http://"+addr+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	_, err = out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes(), err
}

// dbErrorCode is the code of an error answer ("" for anything else).
func dbErrorCode(body []byte) string {
	var e server.ErrorBody
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

func dbSession(t *testing.T, addr, id string) server.SessionView {
	t.Helper()
	code, body := apiGet(t, addr, "/v1/sessions/"+id)
	var v server.SessionView
	if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
		t.Fatalf("GET /v1/sessions/%s: %d %s", id, code, body)
	}
	return v
}

// dbStop stops a daemon the clean way.
func dbStop(t *testing.T, d *exec.Cmd, logs *syncBuffer) {
	t.Helper()
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(); err != nil {
		t.Errorf("daemon exit after SIGTERM: %v\n%s", err, logs)
	}
}

// A second daemon on the same data folder refuses to start and names the
// first; the first one's running turn is untouched (it used to be marked
// interrupted by the second's start). mmcpd db recover refuses too.
func TestSecondDaemonOnTheSameData(t *testing.T) {
	fake := ollamatest.New(t)
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release) // before the fake's Close, which waits for its handlers
	fake.Handle(func(api.ChatRequest) ollamatest.Reply {
		<-hold
		return answer("late but whole")
	})
	data := t.TempDir()
	env := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_DATA_DIR=" + data, "MMCP_PLUGINS_DIR=" + t.TempDir()}
	addr, logs, first := startDaemon(t, env)

	type result struct {
		code int
		body []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		code, body, err := dbPostErr(addr, "/v1/chat", server.ChatRequest{Message: "a slow question"})
		got <- result{code, body, err}
	}()
	// The turn is recorded as running before the model is asked.
	if !waitFor(20*time.Second, func() bool { return len(fake.Requests()) == 1 }) {
		t.Fatalf("the model was never asked\n%s", logs)
	}

	out, code := dbRun(t, command(append(env, "MMCP_LISTEN_ADDR="+freeAddr(t)), "serve"), 20*time.Second)
	wantHolder := fmt.Sprintf("data folder %s is in use by another mmcpd (pid %d", data, first.Process.Pid)
	if code != 1 || !strings.Contains(out, wantHolder) || !strings.Contains(out, binary+" serve") || !strings.Contains(out, "MMCP_DATA_DIR") {
		t.Errorf("second daemon: exit %d, want 1 with %q and its command line; output:\n%s", code, wantHolder, out)
	}
	out, code = dbRun(t, command(env, "db", "recover"), 20*time.Second)
	if code != 1 || !strings.Contains(out, wantHolder) {
		t.Errorf("db recover beside a daemon: exit %d, output:\n%s", code, out)
	}

	release()
	r := <-got
	var cr server.ChatResponse
	if r.err != nil || r.code != http.StatusOK || json.Unmarshal(r.body, &cr) != nil || cr.Answer != "late but whole" {
		t.Fatalf("the first daemon's turn: %d %s %v\n%s", r.code, r.body, r.err, logs)
	}
	v := dbSession(t, addr, cr.SessionID)
	if len(v.Turns) != 1 || v.Turns[0].Status != store.TurnDone {
		t.Errorf("the first daemon's turn after the second tried to start: %+v", v.Turns)
	}
	dbStop(t, first, logs)
	// Once the first has stopped, the folder is free again.
	addr, logs, first = startDaemon(t, env)
	if v := dbSession(t, addr, cr.SessionID); len(v.Turns) != 1 || v.Turns[0].Status != store.TurnDone {
		t.Errorf("after a restart: %+v", v.Turns)
	}
	dbStop(t, first, logs)
}

// The database file deleted or replaced under a running daemon: /readyz
// says so, and turns are refused before anything runs (they used to be
// answered 200 and written to a file nobody would read again).
func TestDatabaseFileLost(t *testing.T) {
	for _, c := range []struct {
		name string
		lose func(path string) error
	}{
		{"deleted", os.Remove},
		{"replaced", func(path string) error {
			if err := os.WriteFile(path+".new", nil, 0o600); err != nil {
				return err
			}
			return os.Rename(path+".new", path)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := ollamatest.New(t)
			fake.Handle(func(api.ChatRequest) ollamatest.Reply { return answer("fine") })
			data := t.TempDir()
			addr, logs, _ := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_DATA_DIR=" + data, "MMCP_PLUGINS_DIR=" + t.TempDir()})
			if !waitFor(20*time.Second, func() bool { code, _ := apiGet(t, addr, "/readyz"); return code == http.StatusOK }) {
				t.Fatalf("never ready\n%s", logs)
			}
			code, body := dbPost(t, addr, "/v1/chat", server.ChatRequest{Message: "hello"})
			var first server.ChatResponse
			if code != http.StatusOK || json.Unmarshal(body, &first) != nil {
				t.Fatalf("chat: %d %s", code, body)
			}

			if err := c.lose(filepath.Join(data, store.FileName)); err != nil {
				t.Fatal(err)
			}
			code, body = apiGet(t, addr, "/readyz")
			var e server.ErrorBody
			_ = json.Unmarshal(body, &e)
			if code != http.StatusServiceUnavailable || e.Error.Code != "storage_lost" || !strings.Contains(e.Error.Message, "deleted or replaced") || !strings.Contains(e.Error.Message, "restart") {
				t.Errorf("/readyz: %d %s", code, body)
			}
			asked := len(fake.Requests())
			for _, req := range []server.ChatRequest{{Message: "new session"}, {Message: "go on", SessionID: first.SessionID}} {
				code, body = dbPost(t, addr, "/v1/chat", req)
				if code != http.StatusServiceUnavailable || dbErrorCode(body) != "storage_lost" {
					t.Errorf("chat %+v: %d %s", req, code, body)
				}
			}
			if n := len(fake.Requests()); n != asked {
				t.Errorf("the model was asked %d more times: the turns ran", n-asked)
			}
		})
	}
}

// A corrupt inner page (the middle of a leaf of the messages table): the
// daemon refuses to start and says how to recover; mmcpd db check finds it;
// mmcpd db recover saves what is readable; the daemon then starts and lists
// the sessions.
func TestCorruptDatabase(t *testing.T) {
	const sessions, turnsEach = 8, 4
	fake := ollamatest.New(t)
	fake.Handle(func(req api.ChatRequest) ollamatest.Reply {
		// Long answers, so the messages table spans many pages.
		return answer("answer to " + crashLastUser(req) + " " + strings.Repeat("and so on ", 100))
	})
	data := t.TempDir()
	env := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_DATA_DIR=" + data, "MMCP_PLUGINS_DIR=" + t.TempDir()}
	addr, logs, d := startDaemon(t, env)
	titles := map[string]string{}
	for i := range sessions {
		id := ""
		for j := range turnsEach {
			q := fmt.Sprintf("question %d.%d", i, j)
			code, body := dbPost(t, addr, "/v1/chat", server.ChatRequest{Message: q, SessionID: id})
			var cr server.ChatResponse
			if code != http.StatusOK || json.Unmarshal(body, &cr) != nil {
				t.Fatalf("chat: %d %s", code, body)
			}
			id = cr.SessionID
			if j == 0 {
				titles[id] = q
			}
		}
	}
	dbStop(t, d, logs)

	path := filepath.Join(data, store.FileName)
	dbCorruptPage(t, path, "messages")

	out, code := dbRun(t, command(append(env, "MMCP_LISTEN_ADDR="+freeAddr(t)), "serve"), 20*time.Second)
	if code != 1 || !strings.Contains(out, "damaged") || !strings.Contains(out, "mmcpd db recover") {
		t.Fatalf("serve on a corrupt database: exit %d, want 1 with the recovery hint; output:\n%s", code, out)
	}
	t.Logf("serve:\n%s", out)
	out, code = dbRun(t, command(env, "db", "check"), time.Minute)
	if code != 1 || !strings.Contains(out, "page") || !strings.Contains(out, "mmcpd db recover") {
		t.Errorf("db check: exit %d, want 1 naming the problem; output:\n%s", code, out)
	}
	t.Logf("db check:\n%s", out)
	out, code = dbRun(t, command(env, "db", "recover"), time.Minute)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("sessions: %d saved", sessions)) || !strings.Contains(out, "messages:") || !strings.Contains(out, "could not be read") {
		t.Fatalf("db recover: exit %d, output:\n%s", code, out)
	}
	t.Logf("db recover:\n%s", out)
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) == 0 {
		t.Errorf("the damaged file was not kept; the folder has %v", dbList(data))
	}
	out, code = dbRun(t, command(env, "db", "check"), time.Minute)
	if code != 0 || strings.TrimSpace(out) != "ok" {
		t.Errorf("db check after recovering: exit %d, output:\n%s", code, out)
	}

	addr, logs, d = startDaemon(t, env)
	listed := crashListSessions(t, addr)
	if len(listed) != sessions {
		t.Errorf("%d sessions after recovering, want %d", len(listed), sessions)
	}
	answers := 0
	for _, s := range listed {
		v := dbSession(t, addr, s.ID)
		if v.Title != titles[s.ID] || len(v.Turns) != turnsEach {
			t.Errorf("session %s: %q with %d turns, want %q with %d", s.ID, v.Title, len(v.Turns), titles[s.ID], turnsEach)
		}
		for _, tv := range v.Turns {
			if len(tv.Items) == 2 {
				answers++
			}
		}
	}
	if answers == 0 || answers == sessions*turnsEach {
		t.Errorf("%d of %d answers after recovering: want the readable ones, and some lost", answers, sessions*turnsEach)
	}
	dbStop(t, d, logs)
}

// dbCorruptPage writes garbage over the middle half of a leaf page of table
// (not its first page): cell headers land there, so SQLite notices.
func dbCorruptPage(t *testing.T, path, table string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	var pageSize int64
	if err := db.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	var pages []int64
	rows, err := db.Query(`SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno`, table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p int64
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
	}
	rows.Close()
	db.Close()
	if len(pages) < 3 {
		t.Fatalf("%s has %d leaf pages; the test needs more", table, len(pages))
	}
	page := pages[len(pages)/2]
	garbage := make([]byte, pageSize/2)
	rng := rand.New(rand.NewPCG(1, 2)) // the same garbage every run
	for i := range garbage {
		garbage[i] = byte(rng.UintN(256))
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(garbage, (page-1)*pageSize+pageSize/4); err != nil {
		t.Fatal(err)
	}
	t.Logf("garbage over page %d of %s (%d-byte pages, leaves %v)", page, table, pageSize, pages)
}

func dbList(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A full disk (SQLite's page limit, the test-only MMCP_TEST_DB_MAX_PAGES):
// a turn whose answer cannot be recorded gets 507 storage_full and is left
// failed, not running; a turn that cannot even be started is refused before
// the model is asked.
func TestDiskFull(t *testing.T) {
	data := t.TempDir()
	// The pages a fresh database takes, plus room for a few small turns.
	st, err := store.Open(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	var pages int
	if err := dbRaw(t, st.Path()).QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	st.Close()

	huge := strings.Repeat("a film, ", 10_000) // 80 kB: many pages
	fake := ollamatest.New(t)
	fake.Handle(func(req api.ChatRequest) ollamatest.Reply {
		if strings.HasPrefix(crashLastUser(req), "tell me everything") {
			return answer(huge)
		}
		return answer("short")
	})
	addr, logs, d := startDaemon(t, []string{
		"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_DATA_DIR=" + data, "MMCP_PLUGINS_DIR=" + t.TempDir(),
		"MMCP_MAX_MESSAGE_CHARS=200000",
		"MMCP_TEST_DB_MAX_PAGES=" + strconv.Itoa(pages+4),
	})
	code, body := dbPost(t, addr, "/v1/chat", server.ChatRequest{Message: "a small one"})
	if code != http.StatusOK {
		t.Fatalf("a small turn: %d %s\n%s", code, body, logs)
	}

	code, body = dbPost(t, addr, "/v1/chat", server.ChatRequest{Message: "tell me everything"})
	var e server.ErrorBody
	_ = json.Unmarshal(body, &e)
	if code != http.StatusInsufficientStorage || e.Error.Code != "storage_full" || !strings.Contains(e.Error.Message, "full") || !strings.Contains(e.Error.Message, "ran") {
		t.Errorf("a turn whose answer does not fit: %d %s", code, body)
	}
	found := false
	for _, s := range crashListSessions(t, addr) {
		if s.Title != "tell me everything" {
			continue
		}
		found = true
		v := dbSession(t, addr, s.ID)
		if len(v.Turns) != 1 || v.Turns[0].Status != store.TurnFailed || !strings.Contains(v.Turns[0].Error, "could not be recorded") || v.Turns[0].Ended == nil {
			t.Errorf("the turn that did not fit: %+v", v.Turns)
		}
	}
	if !found {
		t.Errorf("the session of the turn that did not fit is not listed")
	}

	asked := len(fake.Requests())
	code, body = dbPost(t, addr, "/v1/chat", server.ChatRequest{Message: "tell me everything about " + huge})
	if code != http.StatusInsufficientStorage || dbErrorCode(body) != "storage_full" {
		t.Errorf("a turn whose question does not fit: %d %s", code, body)
	}
	if n := len(fake.Requests()); n != asked {
		t.Errorf("the model was asked %d more times: a turn ran that could not be recorded", n-asked)
	}
	dbStop(t, d, logs)
}

// dbRaw opens a database file directly, for what the API does not show.
func dbRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// An approval nobody answers expires: reading the session shows (and
// stores) its turn as failed, "the approval expired", with no new message
// needed; answering it after is 409 approval_expired.
func TestApprovalExpires(t *testing.T) {
	dir := pluginsFolder(t, "guard")
	fake := ollamatest.New(t, decision("guard_remove", `{"text":"all"}`))
	data := t.TempDir()
	addr, logs, d := startDaemon(t, []string{
		"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_DATA_DIR=" + data, "MMCP_PLUGINS_DIR=" + dir,
		"MMCP_APPROVAL_TTL=1s",
	})
	if !waitFor(30*time.Second, func() bool { code, _ := apiGet(t, addr, "/readyz"); return code == http.StatusOK }) {
		_, body := apiGet(t, addr, "/readyz")
		t.Fatalf("/readyz never 200: %s\n%s", body, logs)
	}
	code, body := dbPost(t, addr, "/v1/chat", server.ChatRequest{Message: "remove everything"})
	var req server.ChatResponse
	if code != http.StatusOK || json.Unmarshal(body, &req) != nil || req.Type != server.TypeActionRequest {
		t.Fatalf("chat: %d %s\n%s", code, body, logs)
	}
	if v := dbSession(t, addr, req.SessionID); v.Turns[0].Status != store.TurnAwaiting {
		t.Fatalf("before the TTL: %+v", v.Turns)
	}
	time.Sleep(1500 * time.Millisecond)

	v := dbSession(t, addr, req.SessionID)
	if len(v.Turns) != 1 {
		t.Fatalf("turns: %+v", v.Turns)
	}
	tv := v.Turns[0]
	if tv.Status != store.TurnFailed || tv.Error != "the approval expired" || tv.Ended == nil {
		t.Errorf("after the TTL: %+v", tv)
	}
	if n := len(tv.Items); n != 3 || tv.Items[1].Type != "tool_call" || tv.Items[2].Type != "tool_result" || !strings.Contains(tv.Items[2].Content, "guard_remove was not run: the approval expired") {
		t.Errorf("items after the TTL: %+v", tv.Items)
	}
	code, body = dbPost(t, addr, "/v1/chat/respond", server.RespondRequest{SessionID: req.SessionID, ApprovalID: req.ApprovalID, Decision: "approve"})
	if code != http.StatusConflict || dbErrorCode(body) != "approval_expired" {
		t.Errorf("approving after the TTL: %d %s", code, body)
	}
	dbStop(t, d, logs)

	// Stored, not only shown.
	db := dbRaw(t, filepath.Join(data, store.FileName))
	var status, turnErr, approval string
	if err := db.QueryRow(`SELECT t.status, t.error, a.status FROM turns t JOIN approvals a ON a.turn = t.id`).Scan(&status, &turnErr, &approval); err != nil {
		t.Fatal(err)
	}
	if status != store.TurnFailed || turnErr != "the approval expired" || approval != "expired" {
		t.Errorf("stored: turn %s (%q), approval %s", status, turnErr, approval)
	}
}
