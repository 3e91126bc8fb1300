package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/store"
)

// testMaxPagesVar caps the database's size in pages (SQLite's
// max_page_count), so that the tests can fill the "disk" of a real daemon
// deterministically. It is for tests only: "mmcpd config" does not list it.
const testMaxPagesVar = "MMCP_TEST_DB_MAX_PAGES"

// storeOptions are the daemon's store options: the zero value, but for the
// test-only page cap.
func storeOptions() (store.Options, error) {
	var o store.Options
	if v := os.Getenv(testMaxPagesVar); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return o, usageError{fmt.Errorf("%s: want a positive number of pages, got %q", testMaxPagesVar, v)}
		}
		o.MaxPages = n
	}
	return o, nil
}

const dbUsage = `usage: mmcpd db check|recover
  check    run SQLite's integrity check on the session database; exit 1 if it is damaged
  recover  save what is readable of a damaged database into a new one, keeping the damaged file beside it`

// db runs the session database's maintenance commands on MMCP_DATA_DIR.
func db(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return usageError{errors.New(dbUsage)}
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch args[0] {
	case "check":
		return dbCheck(ctx, cfg.DataDir, stdout)
	case "recover":
		return dbRecover(ctx, cfg.DataDir, stdout)
	}
	return usageError{fmt.Errorf("unknown db command %q\n%s", args[0], dbUsage)}
}

// dbCheck prints ok, or each problem SQLite reports; it only reads, so it
// may run beside the daemon.
func dbCheck(ctx context.Context, dir string, stdout io.Writer) error {
	problems, err := store.Check(ctx, dir)
	if err != nil {
		return err
	}
	if len(problems) == 0 {
		fmt.Fprintln(stdout, "ok")
		return nil
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	return fmt.Errorf(`%s is damaged (%d problems): stop the daemon and run "mmcpd db recover" to save what is readable, or restore a backup`,
		filepath.Join(dir, store.FileName), len(problems))
}

// dbRecover saves what is readable and says what was saved and lost.
func dbRecover(ctx context.Context, dir string, stdout io.Writer) error {
	rec, err := store.Recover(ctx, dir)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, store.FileName)
	if len(rec.Problems) == 0 {
		fmt.Fprintf(stdout, "%s passes the integrity check: nothing to recover\n", path)
		return nil
	}
	fmt.Fprintf(stdout, "%s was damaged (%d problems); what could be read is now in a new %s:\n", path, len(rec.Problems), store.FileName)
	for _, t := range rec.Tables {
		line := fmt.Sprintf("  %s: %d saved", t.Table, t.Saved)
		if t.Dropped > 0 {
			line += fmt.Sprintf(", %d dropped (garbled, or their session or turn was lost)", t.Dropped)
		}
		if len(t.Unread) > 0 {
			var rs []string
			for _, r := range t.Unread {
				rs = append(rs, r.String())
			}
			line += "; could not be read: " + strings.Join(rs, ", ")
		}
		fmt.Fprintln(stdout, line)
	}
	if rec.Orphaned > 0 {
		fmt.Fprintf(stdout, "  %d turns waited for an approval that was lost: marked failed\n", rec.Orphaned)
	}
	fmt.Fprintf(stdout, "The damaged file is kept as %s; delete it once you no longer need it.\n", rec.Damaged)
	return nil
}
