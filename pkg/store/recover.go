package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// Check runs SQLite's full integrity check on the database in dir and
// returns the problems it finds, none for a sound file. It only reads, so it
// is safe beside a running daemon.
func Check(ctx context.Context, dir string) ([]string, error) {
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("checking %s: %w", path, err)
	}
	db, err := openReadOnly(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return checkDB(ctx, db, "integrity_check")
}

func openReadOnly(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// Recovery is what Recover found, saved and lost.
type Recovery struct {
	Problems []string // what the integrity check found; none: the file was sound and left alone
	Damaged  string   // where the damaged file now lies (its -wal and -shm beside it)
	Tables   []TableRecovery
	// Orphaned counts the turns left awaiting an approval that was lost:
	// they are marked failed, since nothing could ever answer them.
	Orphaned int
}

// TableRecovery is one table's part of a Recovery.
type TableRecovery struct {
	Table   string
	Saved   int
	Dropped int // rows read but not kept: garbled, or their session or turn was lost
	// Unread are the rowids that could not be read (how many rows they held
	// is unknown: ids of deleted rows are in the ranges too).
	Unread []Range
}

// Range is an inclusive range of rowids; To is math.MaxInt64 when it runs
// to the end of the table.
type Range struct{ From, To int64 }

func (r Range) String() string {
	switch {
	case r.From <= 1 && r.To == math.MaxInt64:
		return "all of it"
	case r.To == math.MaxInt64:
		return fmt.Sprintf("rowids %d and up", r.From)
	case r.From == r.To:
		return fmt.Sprintf("rowid %d", r.From)
	}
	return fmt.Sprintf("rowids %d-%d", r.From, r.To)
}

// recoverTable is what Recover copies of a table: its columns in the current
// schema, and the kind of each (t: text, i: integer, n: integer or null), so
// that garbage read from a damaged page is not copied as data.
type recoverTable struct {
	name  string
	cols  []string
	kinds string
}

// recoverTables are copied in this order, so that foreign keys find what
// they point to (and refuse rows whose session or turn was lost).
var recoverTables = []recoverTable{
	{"sessions", []string{"id", "title", "created", "updated"}, "ttii"},
	{"turns", []string{"id", "session", "trace_id", "message", "status", "error", "started", "ended"}, "itttttin"},
	{"messages", []string{"id", "session", "turn", "role", "content", "tool", "created"}, "itittti"},
	{"approvals", []string{"id", "session", "turn", "tool", "args", "status", "expires", "created"}, "ttittiii"},
}

// Recover saves what is readable of a damaged database in dir into a new
// file and puts it in the damaged one's place, which is kept beside it as
// mmcpd.db.corrupt-<time>. It holds the data folder's lock throughout, so it
// fails with an *InUseError while a daemon runs there. A sound database is
// left alone (Recovery.Problems is empty).
func Recover(ctx context.Context, dir string) (Recovery, error) {
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err != nil {
		return Recovery{}, fmt.Errorf("recovering %s: %w", path, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return Recovery{}, err
	}
	defer unlockDir(lock)

	src, err := openReadOnly(path)
	if err != nil {
		return Recovery{}, err
	}
	defer src.Close()
	problems, err := checkDB(ctx, src, "integrity_check")
	if err != nil {
		return Recovery{}, fmt.Errorf("checking %s: %w", path, err)
	}
	rec := Recovery{Problems: problems}
	if len(problems) == 0 {
		return rec, nil
	}

	fresh := path + ".recovering"
	for _, p := range []string{fresh, fresh + "-journal"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rec, fmt.Errorf("removing what an earlier recovery left: %w", err)
		}
	}
	if err := copyReadable(ctx, src, fresh, &rec); err != nil {
		os.Remove(fresh)
		return rec, err
	}
	src.Close()

	// The damaged file and its -wal and -shm move together, so that the
	// set still opens as it was; a -wal left beside the new file would be
	// replayed into it.
	rec.Damaged = path + ".corrupt-" + time.Now().UTC().Format("20060102T150405Z")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Rename(path+suffix, rec.Damaged+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rec, fmt.Errorf("moving the damaged %s aside: %w", path+suffix, err)
		}
	}
	if err := os.Rename(fresh, path); err != nil {
		return rec, fmt.Errorf("putting the recovered database in place (it is %s; the damaged one is %s): %w", fresh, rec.Damaged, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the renames, on disk
		d.Close()
	}
	return rec, nil
}

// copyReadable creates a database with the current schema at path and
// copies into it, in one transaction, every row of src it can read.
func copyReadable(ctx context.Context, src *sql.DB, path string, rec *Recovery) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	f.Close()
	// A rollback journal, not WAL: the file is complete on its own when
	// closed, ready to be renamed; the daemon turns WAL on when it opens it.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	dst := &Store{db: db, path: path}
	if err := dst.migrate(ctx); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("filling %s: %w", path, err)
	}
	defer tx.Rollback()
	for _, t := range recoverTables {
		tr := TableRecovery{Table: t.name}
		insert := "INSERT INTO " + t.name + " (" + strings.Join(t.cols, ", ") + ") VALUES (?" + strings.Repeat(", ?", len(t.cols)-1) + ")"
		tr.Unread, err = salvage(ctx, src, t, func(vals []any) bool {
			if !t.valid(vals) {
				tr.Dropped++
				return false
			}
			// A failed insert (a foreign key: the session or turn was
			// lost) undoes that statement only, not the transaction.
			if _, err := tx.ExecContext(ctx, insert, vals...); err != nil {
				tr.Dropped++
			} else {
				tr.Saved++
			}
			return true
		})
		if err != nil {
			return fmt.Errorf("reading %s: %w", t.name, err)
		}
		rec.Tables = append(rec.Tables, tr)
	}
	res, err := tx.ExecContext(ctx, `UPDATE turns SET status = ?, error = ?, ended = started
		WHERE status = ? AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.turn = turns.id AND a.status = ?)`,
		TurnFailed, "its approval was lost when the database was recovered", TurnAwaiting, ApprovalPending)
	if err != nil {
		return fmt.Errorf("filling %s: %w", path, err)
	}
	n, _ := res.RowsAffected()
	rec.Orphaned = int(n)
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("filling %s: %w", path, err)
	}
	problems, err := checkDB(ctx, db, "integrity_check")
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("the recovered database fails its own check (%s); the damaged one was left in place", strings.Join(problems, "; "))
	}
	return db.Close()
}

// valid tells whether a row read from a damaged file looks like data: each
// column of its declared kind, text valid UTF-8.
func (t recoverTable) valid(vals []any) bool {
	for i, v := range vals {
		switch t.kinds[i] {
		case 't':
			s, ok := v.(string)
			if !ok || !utf8.ValidString(s) {
				return false
			}
		case 'i':
			if _, ok := v.(int64); !ok {
				return false
			}
		case 'n':
			if _, ok := v.(int64); !ok && v != nil {
				return false
			}
		}
	}
	return true
}

// salvage calls keep with each row of t it can read, in rowid order, and
// returns the rowids it could not read. A damaged page makes a scan fail
// where it lies; the scan then goes on past it: the first rowid from which
// reading works again is found by doubling the jump, then halving it back
// (the rowids of one damaged page form one range). keep says whether the row
// looked like data: only those move the scan on, so a garbled rowid cannot
// make it skip good rows.
func salvage(ctx context.Context, db *sql.DB, t recoverTable, keep func(vals []any) bool) ([]Range, error) {
	q := "SELECT rowid, " + strings.Join(t.cols, ", ") + " FROM " + t.name + " WHERE rowid > ? ORDER BY rowid"
	readable := func(after int64) bool {
		rows, err := db.QueryContext(ctx, q+" LIMIT 1", after)
		if err != nil {
			return false
		}
		defer rows.Close()
		for rows.Next() {
		}
		return rows.Err() == nil
	}
	var lost []Range
	after := int64(0)
	for {
		last, err := scanRows(ctx, db, q, after, len(t.cols), keep)
		if ctx.Err() != nil {
			return lost, ctx.Err()
		}
		if err == nil || last == math.MaxInt64 {
			return lost, nil
		}
		// Reading past last failed: jump 1, 2, 4... rowids until it works.
		bad, good := last, last
		for {
			if ctx.Err() != nil {
				return lost, ctx.Err()
			}
			if good == math.MaxInt64 {
				return addRange(lost, Range{last + 1, math.MaxInt64}), nil
			}
			d := max(good-last, 1)
			if d > math.MaxInt64-good {
				good = math.MaxInt64
			} else {
				good += d
			}
			if readable(good) {
				break
			}
			bad = good
		}
		for good-bad > 1 {
			mid := bad + (good-bad)/2
			if readable(mid) {
				good = mid
			} else {
				bad = mid
			}
		}
		lost = addRange(lost, Range{last + 1, good})
		after = good
	}
}

// scanRows reads the rows after rowid after, giving each to keep; it
// returns the last rowid of a row keep took (after, if none) and the error
// that stopped it.
func scanRows(ctx context.Context, db *sql.DB, q string, after int64, ncols int, keep func([]any) bool) (int64, error) {
	rows, err := db.QueryContext(ctx, q, after)
	if err != nil {
		return after, err
	}
	defer rows.Close()
	last := after
	for rows.Next() {
		var rowid int64
		vals := make([]any, ncols)
		dest := []any{&rowid}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil || rowid <= last {
			continue // garbled: not in order, or not a rowid
		}
		if keep(vals) {
			last = rowid
		}
	}
	return last, rows.Err()
}

// addRange appends r, merged with the last range when they touch.
func addRange(rs []Range, r Range) []Range {
	if n := len(rs); n > 0 && rs[n-1].To+1 >= r.From {
		rs[n-1].To = max(rs[n-1].To, r.To)
		return rs
	}
	return append(rs, r)
}
