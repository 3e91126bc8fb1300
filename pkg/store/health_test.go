package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/store"
)

func TestDataFolderLock(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	lockFile := filepath.Join(dir, store.LockName)
	if b, err := os.ReadFile(lockFile); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, %v; want this pid", b, err)
	}
	if fi, err := os.Stat(lockFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file: %v, %v; want mode 0600", fi, err)
	}

	// A second open, here or in another process, is refused at once and
	// names the holder. (flock locks belong to open files, not processes,
	// so this process is as good a rival as any.)
	for name, try := range map[string]func() error{
		"open":    func() error { s2, err := store.Open(ctx, dir); closeIf(s2); return err },
		"recover": func() error { _, err := store.Recover(ctx, dir); return err },
	} {
		err := try()
		var inUse *store.InUseError
		if !errors.As(err, &inUse) || !errors.Is(err, store.ErrInUse) {
			t.Fatalf("%s beside an open store: %v, want an *InUseError", name, err)
		}
		exe, _ := os.Executable()
		if inUse.Dir != dir || inUse.PID != os.Getpid() || !strings.Contains(inUse.Cmdline, filepath.Base(exe)) {
			t.Errorf("%s: %+v", name, inUse)
		}
		for _, want := range []string{"data folder " + dir + " is in use by another mmcpd (pid " + strconv.Itoa(os.Getpid()) + ": ", "stop it first", "MMCP_DATA_DIR"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", name, err, want)
			}
		}
	}

	// Closing frees the folder, and the next holder writes its pid.
	s.Close()
	if b, _ := os.ReadFile(lockFile); len(b) != 0 {
		t.Errorf("after Close the lock file still holds %q", b)
	}
	open(t, dir)
	if b, _ := os.ReadFile(lockFile); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("reopened: lock file holds %q", b)
	}
}

func closeIf(s *store.Store) {
	if s != nil {
		s.Close()
	}
}

func TestInUseErrorMessage(t *testing.T) {
	for _, c := range []struct {
		err  store.InUseError
		want string
	}{
		{store.InUseError{Dir: "./data"}, "data folder ./data is in use by another mmcpd: stop it first, or give this one another MMCP_DATA_DIR"},
		{store.InUseError{Dir: "./data", PID: 1234}, "data folder ./data is in use by another mmcpd (pid 1234): stop it first, or give this one another MMCP_DATA_DIR"},
		{store.InUseError{Dir: "./data", PID: 1234, Cmdline: "mmcpd serve"}, "data folder ./data is in use by another mmcpd (pid 1234: mmcpd serve): stop it first, or give this one another MMCP_DATA_DIR"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.err, got, c.want)
		}
	}
}

// The database file deleted or replaced under an open store: Healthy says
// so, and every write is refused rather than written to a file nobody will
// read again. Moved away and back, it is the same file and all is well.
func TestStorageLost(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		do   func(path string) error
		lost string // "" : still healthy
	}{
		{"deleted", os.Remove, "was deleted"},
		{"replaced", func(path string) error {
			if err := os.WriteFile(path+".new", nil, 0o600); err != nil {
				return err
			}
			return os.Rename(path+".new", path)
		}, "was replaced"},
		{"moved and back", func(path string) error {
			if err := os.Rename(path, path+".away"); err != nil {
				return err
			}
			return os.Rename(path+".away", path)
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, "")
			sess, _ := s.CreateSession(ctx, "s")
			turn, err := s.StartTurn(ctx, sess.ID, "trace", "q")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Healthy(); err != nil {
				t.Fatalf("Healthy before: %v", err)
			}
			if err := c.do(s.Path()); err != nil {
				t.Fatal(err)
			}
			writes := map[string]error{
				"Healthy":       s.Healthy(),
				"CreateSession": func() error { _, err := s.CreateSession(ctx, "x"); return err }(),
				"CreateSessionWithTurn": func() error {
					_, _, err := s.CreateSessionWithTurn(ctx, "x", "trace", "q")
					return err
				}(),
				"StartTurn":      func() error { _, err := s.StartTurn(ctx, sess.ID, "trace", "q"); return err }(),
				"CommitTurn":     s.CommitTurn(ctx, turn, store.TurnDone, "", []convo.Message{final("a")}),
				"FailTurn":       s.FailTurn(ctx, turn, "why"),
				"Rename":         s.Rename(ctx, sess.ID, "y"),
				"CreateApproval": func() error { _, err := s.CreateApproval(ctx, sess.ID, turn, "t", "{}", time.Minute); return err }(),
				"Delete":         s.Delete(ctx, sess.ID),
			}
			for name, err := range writes {
				if c.lost == "" {
					if err != nil {
						t.Errorf("%s: %v", name, err)
					}
					continue
				}
				if !errors.Is(err, store.ErrStorageLost) || !strings.Contains(err.Error(), c.lost) || !strings.Contains(err.Error(), "restart mmcpd") {
					t.Errorf("%s: %v, want ErrStorageLost saying %q and to restart", name, err, c.lost)
				}
			}
		})
	}
}

// A full disk (here SQLite's page limit): the write fails with IsFull and
// leaves nothing half done; the turn can still be marked failed, the
// smallest write there is.
func TestFull(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	pages := queryInt(t, raw(t, s.Path()), `PRAGMA page_count`)
	s.Close()

	s, err := store.OpenWith(ctx, dir, store.Options{MaxPages: pages + 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := s.CreateSession(ctx, "small things fit")
	if err != nil {
		t.Fatal(err)
	}
	turn, err := s.StartTurn(ctx, sess.ID, "trace", "q")
	if err != nil {
		t.Fatal(err)
	}
	big := final(strings.Repeat("x", 64<<10))
	err = s.CommitTurn(ctx, turn, store.TurnDone, "", []convo.Message{big})
	if !store.IsFull(err) {
		t.Fatalf("CommitTurn of 64 kB in %d pages: %v, want IsFull", pages+2, err)
	}
	if _, err := s.StartTurn(ctx, sess.ID, "trace", strings.Repeat("q", 64<<10)); !store.IsFull(err) {
		t.Errorf("StartTurn of 64 kB: %v, want IsFull", err)
	}
	turns, _ := s.Turns(ctx, sess.ID)
	if len(turns) != 1 || turns[0].Status != store.TurnRunning || len(turns[0].Messages) != 0 {
		t.Fatalf("after the failed commit: %+v", turns)
	}
	if err := s.FailTurn(ctx, turn, "the turn could not be recorded: the disk is full"); err != nil {
		t.Fatalf("FailTurn on a full database: %v", err)
	}
	turns, _ = s.Turns(ctx, sess.ID)
	if turns[0].Status != store.TurnFailed || turns[0].Error != "the turn could not be recorded: the disk is full" || turns[0].Ended == nil {
		t.Errorf("after FailTurn: %+v", turns[0])
	}
	// FailTurn leaves ended turns alone.
	if err := s.FailTurn(ctx, turn, "again"); err != nil {
		t.Fatal(err)
	}
	if turns, _ = s.Turns(ctx, sess.ID); turns[0].Error != "the turn could not be recorded: the disk is full" {
		t.Errorf("FailTurn rewrote an ended turn: %+v", turns[0])
	}
	for _, err := range []error{nil, errors.New("disk full"), store.ErrStorageLost} {
		if store.IsFull(err) {
			t.Errorf("IsFull(%v) = true", err)
		}
	}
}

// fillStore writes sessions of turns with long answers, so that every table
// spans several pages. It returns the session ids, oldest first.
func fillStore(t *testing.T, s *store.Store, sessions, turns int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range sessions {
		sess, err := s.CreateSession(ctx, "session "+strconv.Itoa(i)+" "+strings.Repeat("t", 900))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sess.ID)
		for j := range turns {
			turn, err := s.StartTurn(ctx, sess.ID, "trace", strings.Repeat("q", 200))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CommitTurn(ctx, turn, store.TurnDone, "", []convo.Message{final(strconv.Itoa(j) + strings.Repeat(" and so on", 100))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

// corrupt writes garbage over the middle half of a leaf page of table (the
// middle one of its leaves) and returns that page's number.
func corrupt(t *testing.T, path, table string) int64 {
	t.Helper()
	db := raw(t, path)
	pageSize := int64(queryInt(t, db, `PRAGMA page_size`))
	rows, err := db.Query(`SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno`, table)
	if err != nil {
		t.Fatal(err)
	}
	var pages []int64
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
	rng := rand.New(rand.NewPCG(uint64(page), 7))
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
	return page
}

func TestOpenRefusesADamagedDatabase(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"inner page", func(t *testing.T, path string) { corrupt(t, path, "messages") }},
		{"not a database", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(strings.Repeat("not sqlite at all ", 1000)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			fillStore(t, s, 4, 4)
			s.Close()
			path := filepath.Join(dir, store.FileName)
			c.damage(t, path)
			before, _ := os.ReadFile(path)

			s, err := store.Open(ctx, dir)
			if err == nil {
				s.Close()
				t.Fatal("Open accepted a damaged database")
			}
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"mmcpd db recover"`) {
				t.Errorf("Open: %v, want ErrCorrupt naming the file and the way out", err)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Error("Open wrote into the damaged file")
			}
			// The refusal released the folder.
			if problems, err := store.Check(ctx, dir); err != nil || len(problems) == 0 {
				t.Errorf("Check: %v, %v; want problems", problems, err)
			}
			if _, err := store.Recover(ctx, dir); err != nil {
				t.Errorf("Recover after a refused Open: %v", err)
			}
		})
	}
}
