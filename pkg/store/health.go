package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Errors about the storage itself rather than a query.
var (
	// ErrStorageLost: the database file was deleted or replaced while the
	// store had it open. SQLite would go on writing to the unlinked file,
	// and everything written would vanish at exit.
	ErrStorageLost = errors.New("the database file was deleted or replaced")
	// ErrCorrupt: SQLite found the database damaged.
	ErrCorrupt = errors.New("the database is damaged")
)

// IsFull tells whether err is SQLite saying the disk (or the database's page
// limit) is full: the write did not happen.
func IsFull(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_FULL }

// isCorrupt tells whether err is SQLite finding a damaged page or a file
// that is no database at all.
func isCorrupt(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CORRUPT || c == sqlite3.SQLITE_NOTADB
}

// sqliteCode is the primary result code of a SQLite error in err's chain, or
// 0 (extended codes keep the primary one in their low byte).
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

// fileID is what tells one file from another at the same path.
type fileID struct{ dev, ino uint64 }

func identify(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no device and inode on this system", path)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// Healthy returns nil while the file the store opened is still the one at
// its path, and an error wrapping ErrStorageLost once it was deleted or
// replaced: nothing written after that would be kept. Writes check it first.
func (s *Store) Healthy() error {
	id, err := identify(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s was deleted while mmcpd ran, so nothing written now would be kept: restart mmcpd", ErrStorageLost, s.path)
	case err != nil:
		return fmt.Errorf("%w: %s can no longer be checked (%v): restart mmcpd", ErrStorageLost, s.path, err)
	case id != s.id:
		return fmt.Errorf("%w: %s was replaced while mmcpd ran, so nothing written now would be kept: restart mmcpd", ErrStorageLost, s.path)
	}
	return nil
}

// damaged is the error for a database SQLite found problems in: it says
// what, and how to recover.
func damaged(path string, problems []string) error {
	const shown = 3
	more := ""
	if len(problems) > shown {
		more = fmt.Sprintf(" (and %d more)", len(problems)-shown)
		problems = problems[:shown]
	}
	return fmt.Errorf(`%w: %s: %s%s. Run "mmcpd db recover" (with the same MMCP_DATA_DIR) to save what is readable into a new file, the damaged one kept beside it; or restore a backup`,
		ErrCorrupt, path, strings.Join(problems, "; "), more)
}

// checkDB runs pragma (quick_check or integrity_check) and returns the
// problems it reports, none for a sound file. SQLite failing on a damaged
// page is a problem found, not an error.
func checkDB(ctx context.Context, db *sql.DB, pragma string) ([]string, error) {
	rows, err := db.QueryContext(ctx, "PRAGMA "+pragma+"(100)")
	if err != nil {
		if isCorrupt(err) {
			return []string{err.Error()}, nil
		}
		return nil, fmt.Errorf("%s: %w", pragma, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, fmt.Errorf("%s: %w", pragma, err)
		}
		// One result may hold several lines under a "*** in database
		// main ***" heading.
		for _, line := range strings.Split(r, "\n") {
			line = strings.TrimSpace(line)
			if line != "" && line != "ok" && !strings.HasPrefix(line, "***") {
				problems = append(problems, line)
			}
		}
	}
	if err := rows.Err(); err != nil {
		if isCorrupt(err) {
			return append(problems, err.Error()), nil
		}
		return nil, fmt.Errorf("%s: %w", pragma, err)
	}
	return problems, nil
}
