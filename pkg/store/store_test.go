package store_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// open opens a store in dir (a fresh temporary one when dir is "") and closes
// it when the test ends.
func open(t *testing.T, dir string) *store.Store {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	s, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// raw opens the database file directly, beside the store, for what the
// store's API does not show (pragmas, row counts, planted triggers).
func raw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func queryInt(t *testing.T, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func msg(role convo.Role, content string) convo.Message {
	return convo.Message{Role: role, Content: content}
}

func final(answer string) convo.Message {
	return msg(convo.Assistant, fmt.Sprintf(`{"thought":"t","action":"final_response","args":{"answer":%q}}`, answer))
}

func TestOpenCreatesAPrivateWALDatabase(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nested", "data") // Open makes the folders
	s := open(t, dir)
	if want := filepath.Join(dir, store.FileName); s.Path() != want {
		t.Errorf("Path() = %q, want %q", s.Path(), want)
	}
	// Write something so the -wal file exists too.
	if _, err := s.CreateSession(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{
		{dir, 0o700 | os.ModeDir},
		{s.Path(), 0o600},
		{s.Path() + "-wal", 0o600},
		{s.Path() + "-shm", 0o600},
	} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.mode {
			t.Errorf("%s: mode %v, want %v", c.path, fi.Mode(), c.mode)
		}
	}
	db := raw(t, s.Path())
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	if v := queryInt(t, db, `SELECT version FROM schema_version`); v != store.SchemaVersion() {
		t.Errorf("schema version %d, want %d", v, store.SchemaVersion())
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

func TestOpenTightensAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, store.FileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir)
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestReopenIsIdempotent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var id string
	for i := range 3 {
		s, err := store.Open(ctx, dir)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if i == 0 {
			sess, err := s.CreateSession(ctx, "kept")
			if err != nil {
				t.Fatal(err)
			}
			id = sess.ID
		}
		got, err := s.Session(ctx, id)
		if err != nil || got.Title != "kept" {
			t.Errorf("open %d: session %+v, %v", i, got, err)
		}
		if n, err := s.SessionCount(ctx); err != nil || n != 1 {
			t.Errorf("open %d: %d sessions, %v", i, n, err)
		}
		s.Close()
	}
	db := raw(t, filepath.Join(dir, store.FileName))
	if n := queryInt(t, db, `SELECT count(*) FROM schema_version`); n != 1 {
		t.Errorf("schema_version has %d rows", n)
	}
	if v := queryInt(t, db, `SELECT version FROM schema_version`); v != store.SchemaVersion() {
		t.Errorf("schema version %d, want %d", v, store.SchemaVersion())
	}
}

func TestOpenVersions(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T, db *sql.DB)
		wantErr []string // substrings of the error; nil: Open succeeds
	}{
		{
			name: "newer",
			prepare: func(t *testing.T, db *sql.DB) {
				if _, err := db.Exec(`CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (?)`, store.SchemaVersion()+1); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: []string{
				"schema version " + strconv.Itoa(store.SchemaVersion()+1),
				"up to " + strconv.Itoa(store.SchemaVersion()),
				"MMCP_DATA_DIR",
				store.FileName,
			},
		},
		{
			name: "version 0",
			prepare: func(t *testing.T, db *sql.DB) {
				if _, err := db.Exec(`CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (0)`); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "version table without its row",
			prepare: func(t *testing.T, db *sql.DB) {
				if _, err := db.Exec(`CREATE TABLE schema_version (version INTEGER NOT NULL)`); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name:    "empty file",
			prepare: func(t *testing.T, db *sql.DB) {},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, store.FileName)
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			c.prepare(t, db)
			db.Close()

			s, err := store.Open(ctx, dir)
			if c.wantErr != nil {
				if err == nil {
					s.Close()
					t.Fatal("Open accepted a database from a newer mmcpd")
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				// Refused means untouched.
				db := raw(t, path)
				if v := queryInt(t, db, `SELECT version FROM schema_version`); v != store.SchemaVersion()+1 {
					t.Errorf("version became %d", v)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			db = raw(t, path)
			if v := queryInt(t, db, `SELECT version FROM schema_version`); v != store.SchemaVersion() {
				t.Errorf("schema version %d after migrating, want %d", v, store.SchemaVersion())
			}
			// The migrated schema works.
			sess, err := s.CreateSession(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			turn, err := s.StartTurn(ctx, sess.ID, "trace", "hi")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CommitTurn(ctx, turn, store.TurnDone, "", []convo.Message{final("yo")}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateApproval(ctx, sess.ID, turn, "tool", "{}", time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := s.IntegrityCheck(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestSessions(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	a, err := s.CreateSession(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateSession(ctx, "second")
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID || len(a.ID) != 36 || a.ID[14] != '4' {
		t.Errorf("ids %q, %q: want distinct v4 UUIDs", a.ID, b.ID)
	}
	if a.Created.IsZero() || !a.Created.Equal(a.Updated) || a.Created.Location() != time.UTC {
		t.Errorf("times: %+v", a)
	}
	got, err := s.Session(ctx, a.ID)
	if err != nil || got != a {
		t.Errorf("Session = %+v, %v; want %+v", got, err, a)
	}

	const unknown = "00000000-0000-4000-8000-000000000000"
	for name, err := range map[string]error{
		"get":    func() error { _, err := s.Session(ctx, unknown); return err }(),
		"rename": s.Rename(ctx, unknown, "x"),
		"delete": s.Delete(ctx, unknown),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s of an unknown session: %v, want ErrNotFound", name, err)
		}
	}

	if err := s.Rename(ctx, a.ID, "renamed"); err != nil {
		t.Fatal(err)
	}
	got, err = s.Session(ctx, a.ID)
	if err != nil || got.Title != "renamed" || !got.Updated.After(a.Updated) || !got.Created.Equal(a.Created) {
		t.Errorf("after rename: %+v, %v", got, err)
	}
	if err := s.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted session: %v", err)
	}
	if err := s.Delete(ctx, b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting twice: %v", err)
	}
	if n, err := s.SessionCount(ctx); err != nil || n != 1 {
		t.Errorf("SessionCount = %d, %v", n, err)
	}
}

func TestDeleteCascades(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	keep, _ := s.CreateSession(ctx, "keep")
	gone, _ := s.CreateSession(ctx, "gone")
	for _, sess := range []store.Session{keep, gone} {
		turn, err := s.StartTurn(ctx, sess.ID, "trace", "q")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CommitTurn(ctx, turn, store.TurnAwaiting, "", []convo.Message{{Role: convo.Assistant, Content: `{}`, Tool: "t"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateApproval(ctx, sess.ID, turn, "t", "{}", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	db := raw(t, s.Path())
	for _, table := range []string{"turns", "messages", "approvals"} {
		if n := queryInt(t, db, `SELECT count(*) FROM `+table+` WHERE session = ?`, gone.ID); n != 0 {
			t.Errorf("%d %s left of the deleted session", n, table)
		}
		if n := queryInt(t, db, `SELECT count(*) FROM `+table+` WHERE session = ?`, keep.ID); n != 1 {
			t.Errorf("the other session has %d %s, want 1", n, table)
		}
	}
	if turns, err := s.Turns(ctx, gone.ID); err != nil || len(turns) != 0 {
		t.Errorf("Turns of a deleted session: %v, %v", turns, err)
	}
}

func TestTitle(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"blank", " \t\n ", ""},
		{"spaces folded", "  what's   downloading\n now? ", "what's downloading now?"},
		{"60 runes kept", strings.Repeat("a", 60), strings.Repeat("a", 60)},
		{"61 runes cut", strings.Repeat("a", 61), strings.Repeat("a", 59) + "…"},
		{"multi-byte kept", strings.Repeat("é", 60), strings.Repeat("é", 60)},
		{"multi-byte cut", strings.Repeat("é", 61), strings.Repeat("é", 59) + "…"},
		{"emoji cut", strings.Repeat("🎬", 100), strings.Repeat("🎬", 59) + "…"},
		{"CJK cut", strings.Repeat("映画", 40), strings.Repeat("映画", 29) + "映…"},
		{"space at the cut trimmed", strings.Repeat("a", 58) + " bcdef", strings.Repeat("a", 58) + "…"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := store.Title(c.in)
			if got != c.want {
				t.Errorf("Title(%q) = %q, want %q", c.in, got, c.want)
			}
			if !utf8.ValidString(got) || utf8.RuneCountInString(got) > 60 {
				t.Errorf("Title(%q) = %q: invalid UTF-8 or over 60 runes", c.in, got)
			}
		})
	}
}

func TestSessionPages(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	const n = 7
	var ids []string
	for i := range n {
		sess, err := s.CreateSession(ctx, "s"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sess.ID)
	}
	db := raw(t, s.Path())
	// Sessions 0..3 share one timestamp, so only the id orders them; 4..6
	// are newer, 6 the newest.
	for i, id := range ids {
		updated := int64(1_000)
		if i >= 4 {
			updated = int64(1_000 + i)
		}
		if _, err := db.Exec(`UPDATE sessions SET updated = ? WHERE id = ?`, updated, id); err != nil {
			t.Fatal(err)
		}
	}
	tied := append([]string(nil), ids[:4]...)
	// id DESC among the tied ones.
	for i := range tied {
		for j := i + 1; j < len(tied); j++ {
			if tied[j] > tied[i] {
				tied[i], tied[j] = tied[j], tied[i]
			}
		}
	}
	want := append([]string{ids[6], ids[5], ids[4]}, tied...)

	for _, limit := range []int{1, 2, 3, 6, 7, 8, 100} {
		t.Run("limit "+strconv.Itoa(limit), func(t *testing.T) {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > n+1 {
					t.Fatal("pagination does not end")
				}
				page, next, err := s.Sessions(ctx, cursor, limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit {
					t.Fatalf("page of %d with limit %d", len(page), limit)
				}
				if next != "" && len(page) != limit {
					t.Errorf("a short page (%d of %d) has a next cursor", len(page), limit)
				}
				for _, p := range page {
					got = append(got, p.ID)
				}
				if next == "" {
					break
				}
				cursor = next
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("order:\n got %v\nwant %v", got, want)
			}
		})
	}

	// An empty store: one empty page, no cursor.
	empty := open(t, "")
	page, next, err := empty.Sessions(ctx, "", 10)
	if err != nil || len(page) != 0 || next != "" {
		t.Errorf("empty store: %v, %q, %v", page, next, err)
	}
}

func TestSessionsBadCursor(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	if _, err := s.CreateSession(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{
		"!!!",                // not base64
		"bm90IGEgY3Vyc29y==", // padded: not RawURLEncoding
		b64("no separator"),
		b64("abc|someid"), // not a number
		b64("123|"),       // no id
	} {
		if _, _, err := s.Sessions(ctx, c, 10); !errors.Is(err, store.ErrBadCursor) {
			t.Errorf("cursor %q: %v, want ErrBadCursor", c, err)
		}
	}
}

// Sessions(ctx, "", 0) is not reachable through the API (the server allows
// limits 1..100), but the store panics on it.
func TestSessionsZeroLimit(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	if _, err := s.CreateSession(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, -2} {
		if page, _, err := s.Sessions(ctx, "", limit); err == nil || page != nil {
			t.Errorf("Sessions(limit %d) = %v, %v; want an error", limit, page, err)
		}
	}
}

func TestCreateSessionWithTurn(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	sess, turn, err := s.CreateSessionWithTurn(ctx, "Dune", "trace-1", "find Dune")
	if err != nil {
		t.Fatal(err)
	}
	turns, err := s.Turns(ctx, sess.ID)
	if err != nil || len(turns) != 1 || turns[0].ID != turn || turns[0].Status != store.TurnRunning || turns[0].Message != "find Dune" || turns[0].TraceID != "trace-1" {
		t.Fatalf("turns = %+v, %v", turns, err)
	}
}

func TestInterruptedTurns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := s.CreateSession(ctx, "crash")
	done, _ := s.StartTurn(ctx, sess.ID, "t1", "first")
	if err := s.CommitTurn(ctx, done, store.TurnDone, "", []convo.Message{final("one")}); err != nil {
		t.Fatal(err)
	}
	paused, _ := s.StartTurn(ctx, sess.ID, "t2", "second")
	if err := s.CommitTurn(ctx, paused, store.TurnAwaiting, "", []convo.Message{{Role: convo.Assistant, Content: `{"action":"x"}`, Tool: "x"}}); err != nil {
		t.Fatal(err)
	}
	running, _ := s.StartTurn(ctx, sess.ID, "t3", "third")
	// Running, in this process, is left out of the conversation.
	turns, err := s.Turns(ctx, sess.ID)
	if err != nil || len(turns) != 3 || turns[2].Status != store.TurnRunning || turns[2].Ended != nil {
		t.Fatalf("before the crash: %+v, %v", turns, err)
	}
	if c := store.Conversation(turns); len(c.Messages) != 4 {
		t.Errorf("a running turn is in the conversation: %+v", c.Messages)
	}
	s.Close() // the crash: no CommitTurn

	s = open(t, dir)
	turns, err = s.Turns(ctx, sess.ID)
	if err != nil || len(turns) != 3 {
		t.Fatalf("after the crash: %+v, %v", turns, err)
	}
	for i, want := range []string{store.TurnDone, store.TurnAwaiting, store.TurnInterrupted} {
		if turns[i].Status != want {
			t.Errorf("turn %d: %s, want %s", i, turns[i].Status, want)
		}
	}
	if turns[2].ID != running || turns[2].Ended == nil || len(turns[2].Messages) != 0 || turns[2].Message != "third" {
		t.Errorf("interrupted turn: %+v", turns[2])
	}
	c := store.Conversation(turns)
	var got []string
	for _, m := range c.Messages {
		got = append(got, string(m.Role)+":"+m.Content)
	}
	want := []string{"user:first", "assistant:" + final("one").Content, "user:second", `assistant:{"action":"x"}`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("conversation:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A third open leaves the statuses alone.
	s.Close()
	s = open(t, dir)
	again, _ := s.Turns(ctx, sess.ID)
	if len(again) != 3 || again[2].Status != store.TurnInterrupted || !again[2].Ended.Equal(*turns[2].Ended) {
		t.Errorf("reopening changed the turns: %+v", again)
	}
}

func TestCommitTurnIsAtomic(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	sess, _ := s.CreateSession(ctx, "atomic")
	turn, _ := s.StartTurn(ctx, sess.ID, "trace", "q")

	// A trigger fails the third message: nothing of the turn may land.
	db := raw(t, s.Path())
	if _, err := db.Exec(`CREATE TRIGGER boom BEFORE INSERT ON messages WHEN NEW.content = 'boom' BEGIN SELECT RAISE(ABORT, 'planted failure'); END`); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Session(ctx, sess.ID)
	err := s.CommitTurn(ctx, turn, store.TurnDone, "", []convo.Message{
		{Role: convo.Assistant, Content: `{"action":"t"}`, Tool: "t"},
		{Role: convo.Observation, Content: "result", Tool: "t"},
		msg(convo.Assistant, "boom"),
	})
	if err == nil || !strings.Contains(err.Error(), "planted failure") {
		t.Fatalf("CommitTurn = %v, want the planted failure", err)
	}
	turns, _ := s.Turns(ctx, sess.ID)
	if len(turns) != 1 || turns[0].Status != store.TurnRunning || len(turns[0].Messages) != 0 || turns[0].Ended != nil {
		t.Errorf("a failed commit left %+v", turns)
	}
	if after, _ := s.Session(ctx, sess.ID); !after.Updated.Equal(before.Updated) {
		t.Error("a failed commit touched the session")
	}
	if _, err := db.Exec(`DROP TRIGGER boom`); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitTurn(ctx, 1<<40, store.TurnDone, "", nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("committing an unknown turn: %v", err)
	}

	// Readers never see part of a turn: while a writer commits turns of 20
	// messages, every turn read has 0 or 20, and a done one has 20.
	const perTurn, rounds = 20, 30
	msgs := make([]convo.Message, perTurn)
	for i := range msgs {
		msgs[i] = msg(convo.Observation, "m"+strconv.Itoa(i))
	}
	other, _ := s.CreateSession(ctx, "concurrent")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				turns, err := s.Turns(ctx, other.ID)
				if err != nil {
					mu.Lock()
					problems = append(problems, err.Error())
					mu.Unlock()
					return
				}
				for _, tr := range turns {
					n := len(tr.Messages)
					if n != 0 && n != perTurn || tr.Status == store.TurnDone && n != perTurn {
						mu.Lock()
						problems = append(problems, fmt.Sprintf("turn %d: %s with %d messages", tr.ID, tr.Status, n))
						mu.Unlock()
					}
				}
			}
		})
	}
	for i := range rounds {
		id, err := s.StartTurn(ctx, other.ID, "trace", "q"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CommitTurn(ctx, id, store.TurnDone, "", msgs); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
}

func TestTurnThroughAnApproval(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	sess, _ := s.CreateSession(ctx, "approval")
	turn, err := s.StartTurn(ctx, sess.ID, "trace-1", "delete it")
	if err != nil {
		t.Fatal(err)
	}
	call := convo.Message{Role: convo.Assistant, Content: `{"thought":"t","action":"rm","args":{}}`, Tool: "rm"}
	obs := convo.Message{Role: convo.Observation, Content: "Result of rm:\nok", Tool: "rm"}
	answer := final("deleted")

	steps := []struct {
		status string
		add    []convo.Message
		want   []convo.Message
		ended  bool
	}{
		{store.TurnAwaiting, []convo.Message{call}, []convo.Message{call}, false},
		{store.TurnRunning, nil, []convo.Message{call}, false},
		{store.TurnDone, []convo.Message{obs, answer}, []convo.Message{call, obs, answer}, true},
	}
	for i, st := range steps {
		if err := s.CommitTurn(ctx, turn, st.status, "", st.add); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		turns, err := s.Turns(ctx, sess.ID)
		if err != nil || len(turns) != 1 {
			t.Fatalf("step %d: %+v, %v", i, turns, err)
		}
		tr := turns[0]
		if tr.Status != st.status || (tr.Ended != nil) != st.ended || tr.TraceID != "trace-1" || tr.Message != "delete it" {
			t.Errorf("step %d: %+v", i, tr)
		}
		if fmt.Sprint(tr.Messages) != fmt.Sprint(st.want) {
			t.Errorf("step %d: messages %v, want %v", i, tr.Messages, st.want)
		}
	}
	// SetTurnStatus is CommitTurn without messages.
	if err := s.SetTurnStatus(ctx, turn, store.TurnFailed); err != nil {
		t.Fatal(err)
	}
	turns, _ := s.Turns(ctx, sess.ID)
	if turns[0].Status != store.TurnFailed || len(turns[0].Messages) != 3 {
		t.Errorf("after SetTurnStatus: %+v", turns[0])
	}
}

func TestConversationOrder(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	sess, _ := s.CreateSession(ctx, "order")
	noise, _ := s.CreateSession(ctx, "noise")
	type turnSpec struct {
		message string
		status  string
		errMsg  string
		msgs    []convo.Message
	}
	specs := []turnSpec{
		{"q1", store.TurnDone, "", []convo.Message{final("a1")}},
		{"q2", store.TurnFailed, "model gone", []convo.Message{{Role: convo.Assistant, Content: "call", Tool: "x"}, {Role: convo.Observation, Content: "obs", Tool: "x"}}},
		{"q3", store.TurnCancelled, "the client went away", nil},
		{"q4", store.TurnDone, "", []convo.Message{final("a4")}},
	}
	for _, sp := range specs {
		id, err := s.StartTurn(ctx, sess.ID, "trace", sp.message)
		if err != nil {
			t.Fatal(err)
		}
		// Turns of another session interleave and must not leak in.
		nid, _ := s.StartTurn(ctx, noise.ID, "trace", "noise")
		if err := s.CommitTurn(ctx, nid, store.TurnDone, "", []convo.Message{final("noise")}); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitTurn(ctx, id, sp.status, sp.errMsg, sp.msgs); err != nil {
			t.Fatal(err)
		}
	}
	turns, err := s.Turns(ctx, sess.ID)
	if err != nil || len(turns) != len(specs) {
		t.Fatalf("%+v, %v", turns, err)
	}
	var want []convo.Message
	for i, sp := range specs {
		if turns[i].Message != sp.message || turns[i].Status != sp.status || turns[i].Error != sp.errMsg {
			t.Errorf("turn %d: %+v", i, turns[i])
		}
		if i > 0 && turns[i].ID <= turns[i-1].ID {
			t.Errorf("turns out of order: %d after %d", turns[i].ID, turns[i-1].ID)
		}
		want = append(want, msg(convo.User, sp.message))
		want = append(want, sp.msgs...)
	}
	c := store.Conversation(turns)
	if fmt.Sprint(c.Messages) != fmt.Sprint(want) {
		t.Errorf("conversation:\n got %v\nwant %v", c.Messages, want)
	}
	if len(store.Conversation(nil).Messages) != 0 {
		t.Error("no turns, yet a conversation")
	}
}

func TestApprovals(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	sess, _ := s.CreateSession(ctx, "approvals")
	other, _ := s.CreateSession(ctx, "other")
	turn, _ := s.StartTurn(ctx, sess.ID, "trace", "q")

	a, err := s.CreateApproval(ctx, sess.ID, turn, "rm", `{"path":"/x"}`, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != store.ApprovalPending || a.Session != sess.ID || a.Turn != turn || a.Tool != "rm" || a.Args != `{"path":"/x"}` || time.Until(a.Expires) < 50*time.Second {
		t.Errorf("created %+v", a)
	}
	expired, _ := s.CreateApproval(ctx, sess.ID, turn, "rm", `{}`, -time.Second)
	denied, _ := s.CreateApproval(ctx, sess.ID, turn, "rm", `{}`, time.Minute)

	db := raw(t, s.Path())
	status := func(id string) string {
		var st string
		if err := db.QueryRow(`SELECT status FROM approvals WHERE id = ?`, id).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}

	for _, c := range []struct {
		name                string
		session, id, status string
		wantErr             error
		wantStatus, stored  string
	}{
		{"wrong session", other.ID, a.ID, store.ApprovalApproved, store.ErrNotFound, "", store.ApprovalPending},
		{"unknown id", sess.ID, "nope", store.ApprovalApproved, store.ErrNotFound, "", ""},
		{"approve", sess.ID, a.ID, store.ApprovalApproved, nil, store.ApprovalApproved, store.ApprovalApproved},
		{"approve again", sess.ID, a.ID, store.ApprovalApproved, store.ErrApprovalUsed, store.ApprovalApproved, store.ApprovalApproved},
		{"deny after approve", sess.ID, a.ID, store.ApprovalDenied, store.ErrApprovalUsed, store.ApprovalApproved, store.ApprovalApproved},
		{"expired", sess.ID, expired.ID, store.ApprovalApproved, store.ErrApprovalExpired, store.ApprovalExpired, store.ApprovalExpired},
		{"expired, again", sess.ID, expired.ID, store.ApprovalApproved, store.ErrApprovalExpired, store.ApprovalExpired, store.ApprovalExpired},
		{"deny", sess.ID, denied.ID, store.ApprovalDenied, nil, store.ApprovalDenied, store.ApprovalDenied},
		{"approve after deny", sess.ID, denied.ID, store.ApprovalApproved, store.ErrApprovalUsed, store.ApprovalDenied, store.ApprovalDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.ClaimApproval(ctx, c.session, c.id, c.status)
			if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Fatalf("ClaimApproval = %v, want %v", err, c.wantErr)
			}
			if got.Status != c.wantStatus {
				t.Errorf("returned status %q, want %q", got.Status, c.wantStatus)
			}
			if c.wantErr == nil && (got.Tool != "rm" || got.Turn != turn || got.Session != sess.ID) {
				t.Errorf("returned %+v", got)
			}
			if c.stored != "" {
				if st := status(c.id); st != c.stored {
					t.Errorf("stored status %q, want %q", st, c.stored)
				}
			}
		})
	}
}

func TestApprovalClaimRace(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	sess, _ := s.CreateSession(ctx, "race")
	turn, _ := s.StartTurn(ctx, sess.ID, "trace", "q")
	for round := range 5 {
		a, err := s.CreateApproval(ctx, sess.ID, turn, "rm", "{}", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		const n = 20
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				decision := store.ApprovalApproved
				if i%2 == 1 {
					decision = store.ApprovalDenied
				}
				_, errs[i] = s.ClaimApproval(ctx, sess.ID, a.ID, decision)
			})
		}
		close(start)
		wg.Wait()
		wins := 0
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, store.ErrApprovalUsed):
				t.Errorf("round %d, claim %d: %v, want ErrApprovalUsed", round, i, err)
			}
		}
		if wins != 1 {
			t.Errorf("round %d: %d claims succeeded, want exactly 1", round, wins)
		}
	}
}

func TestSupersedeApprovals(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	sess, _ := s.CreateSession(ctx, "s")
	other, _ := s.CreateSession(ctx, "other")
	turn, _ := s.StartTurn(ctx, sess.ID, "trace", "q")
	oturn, _ := s.StartTurn(ctx, other.ID, "trace", "q")

	p1, _ := s.CreateApproval(ctx, sess.ID, turn, "a", `{"n":1}`, time.Minute)
	p2, _ := s.CreateApproval(ctx, sess.ID, turn, "b", `{"n":2}`, time.Minute)
	used, _ := s.CreateApproval(ctx, sess.ID, turn, "c", `{}`, time.Minute)
	if _, err := s.ClaimApproval(ctx, sess.ID, used.ID, store.ApprovalApproved); err != nil {
		t.Fatal(err)
	}
	elsewhere, _ := s.CreateApproval(ctx, other.ID, oturn, "d", `{}`, time.Minute)

	got, err := s.SupersedeApprovals(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]store.Approval{}
	for _, a := range got {
		byID[a.ID] = a
	}
	if len(got) != 2 || len(byID) != 2 {
		t.Fatalf("superseded %+v, want the 2 pending ones", got)
	}
	for _, want := range []store.Approval{p1, p2} {
		a, ok := byID[want.ID]
		if !ok || a.Tool != want.Tool || a.Args != want.Args || a.Turn != turn || a.Session != sess.ID || a.Status != store.ApprovalSuperseded {
			t.Errorf("superseded %+v, want %+v", a, want)
		}
		if _, err := s.ClaimApproval(ctx, sess.ID, want.ID, store.ApprovalApproved); !errors.Is(err, store.ErrApprovalUsed) {
			t.Errorf("claiming a superseded approval: %v", err)
		}
	}
	if again, err := s.SupersedeApprovals(ctx, sess.ID); err != nil || len(again) != 0 {
		t.Errorf("second supersede: %+v, %v", again, err)
	}
	// The other session's approval is untouched.
	if a, err := s.ClaimApproval(ctx, other.ID, elsewhere.ID, store.ApprovalApproved); err != nil || a.Status != store.ApprovalApproved {
		t.Errorf("other session's approval: %+v, %v", a, err)
	}
}

func TestIntegrityCheck(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	for i := range 50 {
		sess, _ := s.CreateSession(ctx, "s")
		turn, _ := s.StartTurn(ctx, sess.ID, "trace", "q")
		_ = s.CommitTurn(ctx, turn, store.TurnDone, "", []convo.Message{final(strconv.Itoa(i))})
		if i%3 == 0 {
			_ = s.Delete(ctx, sess.ID)
		}
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Errorf("IntegrityCheck: %v", err)
	}
}

func TestCreateSessionFrom(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	call := convo.Message{Role: convo.Assistant, Content: `{"thought":"t","action":"rm","args":{}}`, Tool: "rm"}
	sess, ids, err := s.CreateSessionFrom(ctx, "imported", "trace-9", []store.Turn{
		{Message: "hi", Status: store.TurnDone, Messages: []convo.Message{final("hello")}},
		{Message: "remove it", Status: store.TurnAwaiting, Messages: []convo.Message{call}},
	})
	if err != nil || len(ids) != 2 || ids[0] >= ids[1] {
		t.Fatalf("CreateSessionFrom: %v, ids %v", err, ids)
	}
	turns, err := s.Turns(ctx, sess.ID)
	if err != nil || len(turns) != 2 {
		t.Fatalf("turns %+v, %v", turns, err)
	}
	if tr := turns[0]; tr.ID != ids[0] || tr.Status != store.TurnDone || tr.Ended == nil || tr.TraceID != "trace-9" || fmt.Sprint(tr.Messages) != fmt.Sprint([]convo.Message{final("hello")}) {
		t.Errorf("first turn %+v", tr)
	}
	if tr := turns[1]; tr.ID != ids[1] || tr.Status != store.TurnAwaiting || tr.Ended != nil || tr.Message != "remove it" {
		t.Errorf("second turn %+v", tr)
	}
	conv := store.Conversation(turns)
	if n := len(conv.Messages); n != 4 || conv.Messages[3].Tool != "rm" {
		t.Errorf("conversation %+v", conv.Messages)
	}
	got, err := s.Session(ctx, sess.ID)
	if err != nil || got.Title != "imported" {
		t.Errorf("session %+v, %v", got, err)
	}
}
