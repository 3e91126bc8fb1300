package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Approval statuses.
const (
	ApprovalPending    = "pending"
	ApprovalApproved   = "approved"
	ApprovalDenied     = "denied"
	ApprovalSuperseded = "superseded" // the user sent a new message instead
)

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
	case a.Status != ApprovalPending:
		return a, fmt.Errorf("approval %q: %w (%s)", id, ErrApprovalUsed, a.Status)
	case time.Now().After(a.Expires):
		return a, fmt.Errorf("approval %q: %w at %s", id, ErrApprovalExpired, a.Expires.Format(time.RFC3339))
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
