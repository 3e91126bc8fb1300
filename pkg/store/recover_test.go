package store_test

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/store"
)

func TestRecover(t *testing.T) {
	const sessions, turnsEach = 12, 4
	// Every turn has one message (its answer) but the one paused for an
	// approval, added to the first session.
	const turnsAll, messagesAll = sessions*turnsEach + 1, sessions * turnsEach
	ctx := context.Background()
	for _, c := range []struct {
		damaged string
		// check looks at what was saved, by table.
		check func(t *testing.T, got map[string]store.TableRecovery)
	}{
		{"messages", func(t *testing.T, got map[string]store.TableRecovery) {
			if got["sessions"].Saved != sessions || got["turns"].Saved != turnsAll {
				t.Errorf("sessions and turns were not all saved: %+v", got)
			}
			if m := got["messages"]; m.Saved == 0 || m.Saved >= messagesAll || len(m.Unread) == 0 {
				t.Errorf("messages: %+v; want some saved, some unread", m)
			}
		}},
		{"turns", func(t *testing.T, got map[string]store.TableRecovery) {
			if got["sessions"].Saved != sessions {
				t.Errorf("sessions: %+v", got["sessions"])
			}
			tr, m := got["turns"], got["messages"]
			if tr.Saved == 0 || tr.Saved >= turnsAll || len(tr.Unread) == 0 {
				t.Errorf("turns: %+v; want some saved, some unread", tr)
			}
			// Messages of a lost turn are read but cannot be kept.
			if m.Dropped == 0 || m.Saved > tr.Saved || m.Saved+m.Dropped != messagesAll || len(m.Unread) != 0 {
				t.Errorf("messages: %+v; want those of the saved turns, the others dropped", m)
			}
		}},
		{"sessions", func(t *testing.T, got map[string]store.TableRecovery) {
			s, tr := got["sessions"], got["turns"]
			if s.Saved == 0 || s.Saved >= sessions || len(s.Unread) == 0 {
				t.Errorf("sessions: %+v; want some saved, some unread", s)
			}
			if tr.Dropped == 0 || tr.Saved < s.Saved*turnsEach || tr.Saved > s.Saved*turnsEach+1 || tr.Saved+tr.Dropped != turnsAll {
				t.Errorf("turns: %+v; want those of the %d saved sessions, the others dropped", tr, s.Saved)
			}
		}},
	} {
		t.Run(c.damaged, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			ids := fillStore(t, s, sessions, turnsEach)
			// A turn paused for an approval that is lost (as if its row
			// had been on a damaged page) cannot be answered any more.
			paused, _ := s.StartTurn(ctx, ids[0], "trace", "remove it")
			if err := s.CommitTurn(ctx, paused, store.TurnAwaiting, "", nil); err != nil {
				t.Fatal(err)
			}
			s.Close()
			path := filepath.Join(dir, store.FileName)
			page := corrupt(t, path, c.damaged)
			t.Logf("garbage over page %d", page)

			rec, err := store.Recover(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(rec.Problems) == 0 {
				t.Fatal("Recover found nothing wrong")
			}
			got := map[string]store.TableRecovery{}
			for _, tr := range rec.Tables {
				got[tr.Table] = tr
			}
			if len(got) != 4 {
				t.Errorf("tables: %+v", rec.Tables)
			}
			c.check(t, got)

			// The damaged file is kept; the new one is sound, opens, and
			// reads.
			if !strings.HasPrefix(rec.Damaged, path+".corrupt-") {
				t.Errorf("damaged file kept as %q", rec.Damaged)
			}
			if _, err := os.Stat(rec.Damaged); err != nil {
				t.Error(err)
			}
			if left, _ := filepath.Glob(path + ".recovering*"); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
			if problems, err := store.Check(ctx, dir); err != nil || len(problems) != 0 {
				t.Fatalf("Check of the recovered database: %v, %v", problems, err)
			}
			s = open(t, dir)
			if n, err := s.SessionCount(ctx); err != nil || n != got["sessions"].Saved {
				t.Errorf("SessionCount = %d, %v; want %d", n, err, got["sessions"].Saved)
			}
			var turns, messages int
			page1, _, err := s.Sessions(ctx, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, sess := range page1 {
				trs, err := s.Turns(ctx, sess.ID)
				if err != nil {
					t.Fatal(err)
				}
				for _, tr := range trs {
					turns++
					messages += len(tr.Messages)
					if tr.ID == paused && (tr.Status != store.TurnFailed || !strings.Contains(tr.Error, "approval was lost")) {
						t.Errorf("the turn whose approval was lost: %+v", tr)
					}
				}
			}
			if turns != got["turns"].Saved || messages != got["messages"].Saved {
				t.Errorf("read back %d turns and %d messages, Recover saved %d and %d", turns, messages, got["turns"].Saved, got["messages"].Saved)
			}
			if got["sessions"].Saved == sessions && rec.Orphaned != 1 {
				t.Errorf("Orphaned = %d, want 1", rec.Orphaned)
			}
		})
	}
}

// A sound database is left alone: no new file, nothing moved.
func TestRecoverSound(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	fillStore(t, s, 2, 2)
	s.Close()
	before, _ := os.Stat(filepath.Join(dir, store.FileName))
	rec, err := store.Recover(ctx, dir)
	if err != nil || len(rec.Problems) != 0 || rec.Damaged != "" || len(rec.Tables) != 0 {
		t.Fatalf("Recover of a sound database: %+v, %v", rec, err)
	}
	after, _ := os.Stat(filepath.Join(dir, store.FileName))
	if !os.SameFile(before, after) {
		t.Error("the sound database was replaced")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, store.FileName+".*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if _, err := store.Recover(ctx, t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Recover of a folder without a database: %v", err)
	}
}

func TestRangeString(t *testing.T) {
	for _, c := range []struct {
		r    store.Range
		want string
	}{
		{store.Range{From: 1, To: math.MaxInt64}, "all of it"},
		{store.Range{From: 40, To: math.MaxInt64}, "rowids 40 and up"},
		{store.Range{From: 7, To: 7}, "rowid 7"},
		{store.Range{From: 16, To: 19}, "rowids 16-19"},
	} {
		if got := c.r.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}
