package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	convo "github.com/mmcpd/mmcpd/pkg/context"
)

// Approval statuses.
const (
	ApprovalPending    = "pending"
	ApprovalApproved   = "approved"
	ApprovalDenied     = "denied"
	ApprovalSuperseded = "superseded" // the user sent a new message instead
	ApprovalExpired    = "expired"    // nobody answered within its time
)

// ExpiredReason is the error of a turn whose approval expired unanswered.
const ExpiredReason = "the approval expired"

// Errors of claiming an approval.
var (
	ErrApprovalUsed    = errors.New("approval already answered")
	ErrApprovalExpired = errors.New("approval expired")
)

// Approval is a tool call waiting for the user's yes or no.
type Approval struct {
	ID      string
	Session string
	Turn    int64
	Tool    string
	Args    string
	Status  string
	Expires time.Time
}

// CreateApproval records a pending approval for a paused turn.
func (s *Store) CreateApproval(ctx context.Context, session string, turn int64, tool, args string, ttl time.Duration) (Approval, error) {
	if err := s.Healthy(); err != nil {
		return Approval{}, fmt.Errorf("recording an approval in session %q: %w", session, err)
	}
	a := Approval{ID: newID(), Session: session, Turn: turn, Tool: tool, Args: args, Status: ApprovalPending, Expires: time.Now().Add(ttl).UTC()}
	_, err := s.db.ExecContext(ctx, `INSERT INTO approvals (id, session, turn, tool, args, status, expires, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, session, turn, tool, args, a.Status, a.Expires.UnixNano(), now())
	if err != nil {
		return Approval{}, fmt.Errorf("recording an approval in session %q: %w", session, err)
	}
	return a, nil
}

// ClaimApproval answers a pending approval of session with status (approved
// or denied), once: the update only succeeds for a pending, unexpired
// approval, so a replay, a race between two answers, or a stale answer gets
// an error and nothing runs.
func (s *Store) ClaimApproval(ctx context.Context, session, id, status string) (Approval, error) {
	var a Approval
	var expires int64
	err := s.db.QueryRowContext(ctx, `SELECT id, session, turn, tool, args, status, expires FROM approvals WHERE id = ? AND session = ?`, id, session).
		Scan(&a.ID, &a.Session, &a.Turn, &a.Tool, &a.Args, &a.Status, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return Approval{}, fmt.Errorf("approval %q in session %q: %w", id, session, ErrNotFound)
	}
	if err != nil {
		return Approval{}, fmt.Errorf("reading approval %q: %w", id, err)
	}
	a.Expires = fromNanos(expires)
	switch {
	case a.Status == ApprovalExpired:
		return a, fmt.Errorf("approval %q: %w at %s", id, ErrApprovalExpired, a.Expires.Format(time.RFC3339))
	case a.Status != ApprovalPending:
		return a, fmt.Errorf("approval %q: %w (%s)", id, ErrApprovalUsed, a.Status)
	case time.Now().After(a.Expires):
		err := fmt.Errorf("approval %q: %w at %s", id, ErrApprovalExpired, a.Expires.Format(time.RFC3339))
		// Close its turn now rather than at the session's next read.
		if xerr := s.expireApprovals(ctx, session); xerr != nil {
			return a, errors.Join(err, xerr)
		}
		a.Status = ApprovalExpired
		return a, err
	}
	if err := s.Healthy(); err != nil {
		return a, fmt.Errorf("answering approval %q: %w", id, err)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE approvals SET status = ? WHERE id = ? AND status = ? AND expires > ?`, status, id, ApprovalPending, now())
	if err != nil {
		return a, fmt.Errorf("answering approval %q: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return a, fmt.Errorf("approval %q: %w", id, ErrApprovalUsed)
	}
	a.Status = status
	return a, nil
}

// SupersedeApprovals retires the session's pending approvals (the user moved
// on) and returns them, so their paused turns can be closed.
func (s *Store) SupersedeApprovals(ctx context.Context, session string) ([]Approval, error) {
	// Expired ones are not superseded: they ended before the new message.
	if err := s.expireApprovals(ctx, session); err != nil {
		return nil, err
	}
	if err := s.Healthy(); err != nil {
		return nil, fmt.Errorf("retiring approvals of session %q: %w", session, err)
	}
	rows, err := s.db.QueryContext(ctx, `UPDATE approvals SET status = ? WHERE session = ? AND status = ? RETURNING id, turn, tool, args`, ApprovalSuperseded, session, ApprovalPending)
	if err != nil {
		return nil, fmt.Errorf("retiring approvals of session %q: %w", session, err)
	}
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		a := Approval{Session: session, Status: ApprovalSuperseded}
		if err := rows.Scan(&a.ID, &a.Turn, &a.Tool, &a.Args); err != nil {
			return nil, fmt.Errorf("retiring approvals of session %q: %w", session, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// expireApprovals closes the session's approvals that expired unanswered,
// in one transaction: each is marked expired, and the turn it paused ends
// failed (ExpiredReason, ended at the expiry) with an observation telling
// the model the call never ran. It runs whenever the session is read, so
// the session shows the truth without waiting for a new message, and no
// sweeper is needed; with nothing due it is one indexed read.
func (s *Store) expireApprovals(ctx context.Context, session string) error {
	t := now()
	var due bool
	if err := s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM approvals WHERE session = ? AND status = ? AND expires <= ?)`,
		session, ApprovalPending, t).Scan(&due); err != nil {
		return fmt.Errorf("reading the approvals of session %q: %w", session, err)
	}
	if !due {
		return nil
	}
	if err := s.Healthy(); err != nil {
		return fmt.Errorf("expiring approvals of session %q: %w", session, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("expiring approvals of session %q: %w", session, err)
	}
	defer tx.Rollback()
	type expired struct {
		turn    int64
		tool    string
		expires int64
	}
	var list []expired
	rows, err := tx.QueryContext(ctx, `UPDATE approvals SET status = ? WHERE session = ? AND status = ? AND expires <= ? RETURNING turn, tool, expires`,
		ApprovalExpired, session, ApprovalPending, t)
	if err != nil {
		return fmt.Errorf("expiring approvals of session %q: %w", session, err)
	}
	for rows.Next() {
		var e expired
		if err := rows.Scan(&e.turn, &e.tool, &e.expires); err != nil {
			rows.Close()
			return fmt.Errorf("expiring approvals of session %q: %w", session, err)
		}
		list = append(list, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("expiring approvals of session %q: %w", session, err)
	}
	for _, e := range list {
		res, err := tx.ExecContext(ctx, `UPDATE turns SET status = ?, error = ?, ended = ? WHERE id = ? AND status = ?`,
			TurnFailed, ExpiredReason, e.expires, e.turn, TurnAwaiting)
		if err != nil {
			return fmt.Errorf("expiring approvals of session %q: %w", session, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			continue // the turn is no longer paused for it
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO messages (session, turn, role, content, tool, created) VALUES (?, ?, ?, ?, ?, ?)`,
			session, e.turn, string(convo.Observation), e.tool+" was not run: the approval expired before the user answered.", e.tool, t); err != nil {
			return fmt.Errorf("expiring approvals of session %q: %w", session, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("expiring approvals of session %q: %w", session, err)
	}
	return nil
}
