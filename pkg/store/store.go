// Package store owns sessions and their history on disk: one SQLite file
// (pure-Go driver, WAL) with versioned migrations, where messages are only
// ever appended and a turn becomes visible when it is committed.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	convo "github.com/mmcpd/mmcpd/pkg/context"
)

// FileName is the database's name inside the data folder.
const FileName = "mmcpd.db"

// ErrNotFound is returned, wrapped, for an unknown session or turn.
var ErrNotFound = errors.New("not found")

// Turn statuses.
const (
	TurnRunning     = "running"
	TurnDone        = "done"
	TurnFailed      = "failed"
	TurnCancelled   = "cancelled"
	TurnInterrupted = "interrupted" // the daemon stopped while it ran
	TurnAwaiting    = "awaiting_approval"
)

// migrations are applied in order; the schema version is how many have run.
// Never edit one that has shipped: add a new one.
var migrations = []string{
	`CREATE TABLE sessions (
		id      TEXT PRIMARY KEY,
		title   TEXT NOT NULL,
		created INTEGER NOT NULL,
		updated INTEGER NOT NULL
	);
	CREATE INDEX sessions_by_update ON sessions (updated DESC, id DESC);
	CREATE TABLE turns (
		id       INTEGER PRIMARY KEY AUTOINCREMENT,
		session  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
		trace_id TEXT NOT NULL,
		message  TEXT NOT NULL,
		status   TEXT NOT NULL,
		error    TEXT NOT NULL DEFAULT '',
		started  INTEGER NOT NULL,
		ended    INTEGER
	);
	CREATE INDEX turns_by_session ON turns (session, id);
	CREATE TABLE messages (
		id      INTEGER PRIMARY KEY AUTOINCREMENT,
		session TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
		turn    INTEGER NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
		role    TEXT NOT NULL,
		content TEXT NOT NULL,
		tool    TEXT NOT NULL DEFAULT '',
		created INTEGER NOT NULL
	);
	CREATE INDEX messages_by_turn ON messages (turn, id);
	CREATE TABLE approvals (
		id      TEXT PRIMARY KEY,
		session TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
		turn    INTEGER NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
		tool    TEXT NOT NULL,
		args    TEXT NOT NULL,
		status  TEXT NOT NULL,
		expires INTEGER NOT NULL,
		created INTEGER NOT NULL
	);
	CREATE INDEX approvals_by_session ON approvals (session, status);`,
}

// Store is the session database. Safe for concurrent use.
type Store struct {
	db   *sql.DB
	path string
	lock *os.File // the data folder's lock, held while the store is open
	id   fileID   // the database file's identity when it was opened
}

// Options change how OpenWith opens the database; the zero value is what
// the daemon uses.
type Options struct {
	// MaxPages, when set, caps the database at that many pages (SQLite's
	// max_page_count), so that writes past it fail exactly as on a full
	// disk. Only tests set it.
	MaxPages int
}

// Open opens (creating if needed) the database in dir with the zero Options.
func Open(ctx context.Context, dir string) (*Store, error) {
	return OpenWith(ctx, dir, Options{})
}

// OpenWith takes the data folder's lock (failing with an *InUseError when
// another process holds it), opens (creating if needed) the database in dir,
// checks it (a damaged one is refused with ErrCorrupt and how to recover),
// migrates it, and marks turns that were running when the daemon last
// stopped as interrupted. A database written by a newer mmcpd is refused.
func OpenWith(ctx context.Context, dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data folder %s (MMCP_DATA_DIR): %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, filepath.Join(dir, FileName), opts)
	if err != nil {
		unlockDir(lock)
		return nil, err
	}
	s.lock = lock
	return s, nil
}

func open(ctx context.Context, path string, opts Options) (*Store, error) {
	// Create the file ourselves so it is private from its first byte; SQLite
	// gives its -wal and -shm files the same mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	f.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, fmt.Errorf("securing %s: %w", path, err)
	}
	id, err := identify(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	if opts.MaxPages > 0 {
		dsn += "&_pragma=max_page_count(" + strconv.Itoa(opts.MaxPages) + ")"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	// Writers queue on SQLite's one lock anyway; a few connections serve
	// readers in parallel without hundreds of handles and threads under load.
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	s := &Store{db: db, path: path, id: id}
	if err := s.prepare(ctx); err != nil {
		db.Close()
		if isCorrupt(err) {
			return nil, damaged(path, []string{err.Error()})
		}
		return nil, err
	}
	return s, nil
}

// prepare checks, migrates and tidies a freshly opened database.
func (s *Store) prepare(ctx context.Context) error {
	// quick_check walks every page of every b-tree (not whether indexes
	// agree with their tables): a damaged file is refused at start, with
	// the way out, rather than found by some later turn.
	problems, err := checkDB(ctx, s.db, "quick_check")
	if err != nil {
		return fmt.Errorf("checking %s: %w", s.path, err)
	}
	if len(problems) > 0 {
		return damaged(s.path, problems)
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE turns SET status = ?, ended = ? WHERE status = ?`, TurnInterrupted, now(), TurnRunning); err != nil {
		return fmt.Errorf("recording interrupted turns: %w", err)
	}
	return nil
}

// maxConns bounds the connection pool (measured: 4 and 16 perform alike
// under 200 concurrent sessions; unbounded, p99 latency was 4x worse).
const maxConns = 8

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database and releases the data folder.
func (s *Store) Close() error {
	err := s.db.Close()
	if s.lock != nil {
		unlockDir(s.lock)
	}
	return err
}

// SchemaVersion is how many migrations this build knows.
func SchemaVersion() int { return len(migrations) }

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("reading the schema version of %s: %w", s.path, err)
	}
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := s.db.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (0)`); err != nil {
			return fmt.Errorf("initialising %s: %w", s.path, err)
		}
	} else if err != nil {
		return fmt.Errorf("reading the schema version of %s: %w", s.path, err)
	}
	if v > len(migrations) {
		return fmt.Errorf("%s has schema version %d, written by a newer mmcpd (this one knows up to %d): upgrade mmcpd, or point MMCP_DATA_DIR elsewhere", s.path, v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrating %s: %w", s.path, err)
		}
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrating %s to version %d: %w", s.path, i+1, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = ?`, i+1); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrating %s to version %d: %w", s.path, i+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrating %s to version %d: %w", s.path, i+1, err)
		}
	}
	return nil
}

// Session is one conversation's record.
type Session struct {
	ID      string    `json:"id"`
	Title   string    `json:"title"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// maxTitle is how long a title taken from a first message may be.
const maxTitle = 60

// Title turns a first message into a session title.
func Title(message string) string {
	t := strings.Join(strings.Fields(message), " ")
	if utf8.RuneCountInString(t) <= maxTitle {
		return t
	}
	r := []rune(t)
	return strings.TrimSpace(string(r[:maxTitle-1])) + "…"
}

// CreateSession adds a session with a fresh random id.
func (s *Store) CreateSession(ctx context.Context, title string) (Session, error) {
	if err := s.Healthy(); err != nil {
		return Session{}, fmt.Errorf("creating a session: %w", err)
	}
	t := now()
	sess := Session{ID: newID(), Title: title, Created: fromNanos(t), Updated: fromNanos(t)}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO sessions (id, title, created, updated) VALUES (?, ?, ?, ?)`, sess.ID, title, t, t); err != nil {
		return Session{}, fmt.Errorf("creating a session: %w", err)
	}
	return sess, nil
}

// CreateSessionWithTurn adds a session and starts its first turn in one
// transaction, so that a crash can never leave a session without the turn
// that asked for it.
func (s *Store) CreateSessionWithTurn(ctx context.Context, title, traceID, message string) (Session, int64, error) {
	if err := s.Healthy(); err != nil {
		return Session{}, 0, fmt.Errorf("creating a session: %w", err)
	}
	t := now()
	sess := Session{ID: newID(), Title: title, Created: fromNanos(t), Updated: fromNanos(t)}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Session{}, 0, fmt.Errorf("creating a session: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, title, created, updated) VALUES (?, ?, ?, ?)`, sess.ID, title, t, t); err != nil {
		return Session{}, 0, fmt.Errorf("creating a session: %w", err)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO turns (session, trace_id, message, status, started) VALUES (?, ?, ?, ?, ?)`,
		sess.ID, traceID, message, TurnRunning, t)
	if err != nil {
		return Session{}, 0, fmt.Errorf("starting the first turn: %w", err)
	}
	turn, err := res.LastInsertId()
	if err != nil {
		return Session{}, 0, fmt.Errorf("starting the first turn: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Session{}, 0, fmt.Errorf("creating a session: %w", err)
	}
	return sess, turn, nil
}

// Session returns one session.
func (s *Store) Session(ctx context.Context, id string) (Session, error) {
	var sess Session
	var created, updated int64
	err := s.db.QueryRowContext(ctx, `SELECT id, title, created, updated FROM sessions WHERE id = ?`, id).Scan(&sess.ID, &sess.Title, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("reading session %q: %w", id, err)
	}
	sess.Created, sess.Updated = fromNanos(created), fromNanos(updated)
	return sess, nil
}

// Sessions lists sessions, most recently updated first, limit at a time.
// cursor is "" for the first page, then the next cursor of the previous page;
// next is "" after the last page.
func (s *Store) Sessions(ctx context.Context, cursor string, limit int) (page []Session, next string, err error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("listing sessions: limit %d is not positive", limit)
	}
	q := `SELECT id, title, created, updated FROM sessions`
	args := []any{}
	if cursor != "" {
		updated, id, err := parseCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		q += ` WHERE updated < ? OR (updated = ? AND id < ?)`
		args = append(args, updated, updated, id)
	}
	q += ` ORDER BY updated DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("listing sessions: %w", err)
	}
	defer rows.Close()
	var updatedOf []int64
	for rows.Next() {
		var sess Session
		var created, updated int64
		if err := rows.Scan(&sess.ID, &sess.Title, &created, &updated); err != nil {
			return nil, "", fmt.Errorf("listing sessions: %w", err)
		}
		sess.Created, sess.Updated = fromNanos(created), fromNanos(updated)
		page = append(page, sess)
		updatedOf = append(updatedOf, updated)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("listing sessions: %w", err)
	}
	if len(page) > limit {
		page = page[:limit]
		last := page[limit-1]
		next = makeCursor(updatedOf[limit-1], last.ID)
	}
	return page, next, nil
}

// ErrBadCursor is returned, wrapped, for a cursor this store did not make.
var ErrBadCursor = errors.New("invalid cursor")

func makeCursor(updated int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(updated, 10) + "|" + id))
}

func parseCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	n, id, ok := strings.Cut(string(b), "|")
	updated, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || id == "" {
		return 0, "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return updated, id, nil
}

// Rename sets a session's title.
func (s *Store) Rename(ctx context.Context, id, title string) error {
	if err := s.Healthy(); err != nil {
		return fmt.Errorf("renaming session %q: %w", id, err)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET title = ?, updated = ? WHERE id = ?`, title, now(), id)
	if err != nil {
		return fmt.Errorf("renaming session %q: %w", id, err)
	}
	return mustHaveOne(res, id)
}

// Delete removes a session and everything in it.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := s.Healthy(); err != nil {
		return fmt.Errorf("deleting session %q: %w", id, err)
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("deleting session %q: %w", id, err)
	}
	return mustHaveOne(res, id)
}

func mustHaveOne(res sql.Result, id string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	return nil
}

// Turn is one user message and what came of it.
type Turn struct {
	ID       int64           `json:"id"`
	TraceID  string          `json:"trace_id"`
	Message  string          `json:"message"`
	Status   string          `json:"status"`
	Error    string          `json:"error,omitempty"`
	Started  time.Time       `json:"started"`
	Ended    *time.Time      `json:"ended,omitempty"`
	Messages []convo.Message `json:"-"` // what the turn added after the user message
}

// StartTurn records that a turn began, so that a crash leaves a trace of
// it: on the next Open it reads as interrupted.
func (s *Store) StartTurn(ctx context.Context, session, traceID, message string) (int64, error) {
	if err := s.Healthy(); err != nil {
		return 0, fmt.Errorf("starting a turn in session %q: %w", session, err)
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO turns (session, trace_id, message, status, started) VALUES (?, ?, ?, ?, ?)`,
		session, traceID, message, TurnRunning, now())
	if err != nil {
		return 0, fmt.Errorf("starting a turn in session %q: %w", session, err)
	}
	return res.LastInsertId()
}

// CommitTurn appends msgs to the turn and sets its status, in one
// transaction: the turn's messages become visible all at once. A turn
// paused for an approval is committed with TurnAwaiting and later again.
func (s *Store) CommitTurn(ctx context.Context, turn int64, status, errMsg string, msgs []convo.Message) error {
	if err := s.Healthy(); err != nil {
		return fmt.Errorf("committing turn %d: %w", turn, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("committing turn %d: %w", turn, err)
	}
	defer tx.Rollback()
	var session string
	if err := tx.QueryRowContext(ctx, `SELECT session FROM turns WHERE id = ?`, turn).Scan(&session); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("turn %d: %w", turn, ErrNotFound)
		}
		return fmt.Errorf("committing turn %d: %w", turn, err)
	}
	t := now()
	for _, m := range msgs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO messages (session, turn, role, content, tool, created) VALUES (?, ?, ?, ?, ?, ?)`,
			session, turn, string(m.Role), m.Content, m.Tool, t); err != nil {
			return fmt.Errorf("committing turn %d: %w", turn, err)
		}
	}
	var ended any
	if status != TurnRunning && status != TurnAwaiting {
		ended = t
	}
	if _, err := tx.ExecContext(ctx, `UPDATE turns SET status = ?, error = ?, ended = ? WHERE id = ?`, status, errMsg, ended, turn); err != nil {
		return fmt.Errorf("committing turn %d: %w", turn, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sessions SET updated = ? WHERE id = ?`, t, session); err != nil {
		return fmt.Errorf("committing turn %d: %w", turn, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing turn %d: %w", turn, err)
	}
	return nil
}

// FailTurn ends a running or paused turn as failed with reason, adding
// nothing: the last resort when its commit could not be written (a full
// disk), so that it does not stay running until the next start. It is the
// smallest write there is, so it may fit where the commit did not.
func (s *Store) FailTurn(ctx context.Context, turn int64, reason string) error {
	if err := s.Healthy(); err != nil {
		return fmt.Errorf("failing turn %d: %w", turn, err)
	}
	_, err := s.db.ExecContext(ctx, `UPDATE turns SET status = ?, error = ?, ended = ? WHERE id = ? AND status IN (?, ?)`,
		TurnFailed, reason, now(), turn, TurnRunning, TurnAwaiting)
	if err != nil {
		return fmt.Errorf("failing turn %d: %w", turn, err)
	}
	return nil
}

// SetTurnStatus changes a turn's status without adding messages (a paused
// turn resuming).
func (s *Store) SetTurnStatus(ctx context.Context, turn int64, status string) error {
	return s.CommitTurn(ctx, turn, status, "", nil)
}

// Turns returns a session's turns, oldest first, each with its messages.
// A turn whose approval expired unanswered is closed first (see
// expireApprovals), so what is read is the truth.
func (s *Store) Turns(ctx context.Context, session string) ([]Turn, error) {
	if err := s.expireApprovals(ctx, session); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, trace_id, message, status, error, started, ended FROM turns WHERE session = ? ORDER BY id`, session)
	if err != nil {
		return nil, fmt.Errorf("reading session %q: %w", session, err)
	}
	var turns []Turn
	index := map[int64]int{}
	for rows.Next() {
		var t Turn
		var started int64
		var ended sql.NullInt64
		if err := rows.Scan(&t.ID, &t.TraceID, &t.Message, &t.Status, &t.Error, &started, &ended); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading session %q: %w", session, err)
		}
		t.Started = fromNanos(started)
		if ended.Valid {
			e := fromNanos(ended.Int64)
			t.Ended = &e
		}
		index[t.ID] = len(turns)
		turns = append(turns, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading session %q: %w", session, err)
	}
	rows, err = s.db.QueryContext(ctx, `SELECT turn, role, content, tool FROM messages WHERE session = ? ORDER BY id`, session)
	if err != nil {
		return nil, fmt.Errorf("reading session %q: %w", session, err)
	}
	defer rows.Close()
	for rows.Next() {
		var turn int64
		var m convo.Message
		var role string
		if err := rows.Scan(&turn, &role, &m.Content, &m.Tool); err != nil {
			return nil, fmt.Errorf("reading session %q: %w", session, err)
		}
		m.Role = convo.Role(role)
		if i, ok := index[turn]; ok {
			turns[i].Messages = append(turns[i].Messages, m)
		}
	}
	return turns, rows.Err()
}

// Conversation is what the model should remember of a session: every turn
// that was committed, its user message first. Interrupted turns, which left
// nothing committed but their question, are left out.
func Conversation(turns []Turn) convo.Conversation {
	var c convo.Conversation
	for _, t := range turns {
		if t.Status == TurnInterrupted && len(t.Messages) == 0 || t.Status == TurnRunning {
			continue
		}
		c.Append(convo.Message{Role: convo.User, Content: t.Message})
		c.Append(t.Messages...)
	}
	return c
}

// IntegrityCheck runs SQLite's own consistency check.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	var res string
	if err := s.db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&res); err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	if res != "ok" {
		return fmt.Errorf("integrity check: %s", res)
	}
	return nil
}

// SessionCount is how many sessions there are.
func (s *Store) SessionCount(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sessions`).Scan(&n)
	return n, err
}

func now() int64 { return time.Now().UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// newID returns a random (version 4) UUID: unguessable, since knowing a
// session id is enough to read and continue it.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// CreateSessionFrom adds a session holding turns already run elsewhere (an
// OpenAI client's conversation, whose history the client kept), in one
// transaction, and returns the new turns' ids in order. Each turn is
// recorded with its Message, Status, Error and Messages; one that is not
// running or awaiting an approval is ended now.
func (s *Store) CreateSessionFrom(ctx context.Context, title, traceID string, turns []Turn) (Session, []int64, error) {
	if err := s.Healthy(); err != nil {
		return Session{}, nil, fmt.Errorf("creating a session: %w", err)
	}
	t := now()
	sess := Session{ID: newID(), Title: title, Created: fromNanos(t), Updated: fromNanos(t)}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Session{}, nil, fmt.Errorf("creating a session: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, title, created, updated) VALUES (?, ?, ?, ?)`, sess.ID, title, t, t); err != nil {
		return Session{}, nil, fmt.Errorf("creating a session: %w", err)
	}
	ids := make([]int64, 0, len(turns))
	for _, turn := range turns {
		var ended any
		if turn.Status != TurnRunning && turn.Status != TurnAwaiting {
			ended = t
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO turns (session, trace_id, message, status, error, started, ended) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			sess.ID, traceID, turn.Message, turn.Status, turn.Error, t, ended)
		if err != nil {
			return Session{}, nil, fmt.Errorf("creating a session: %w", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return Session{}, nil, fmt.Errorf("creating a session: %w", err)
		}
		for _, m := range turn.Messages {
			if _, err := tx.ExecContext(ctx, `INSERT INTO messages (session, turn, role, content, tool, created) VALUES (?, ?, ?, ?, ?, ?)`,
				sess.ID, id, string(m.Role), m.Content, m.Tool, t); err != nil {
				return Session{}, nil, fmt.Errorf("creating a session: %w", err)
			}
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(); err != nil {
		return Session{}, nil, fmt.Errorf("creating a session: %w", err)
	}
	return sess, ids, nil
}
