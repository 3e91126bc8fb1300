package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// Approvals that expire unanswered close their turn as soon as the session
// is read: failed, "the approval expired", ended at the expiry, with an
// observation telling the model the call never ran.
func TestApprovalsExpireOnRead(t *testing.T) {
	ctx := context.Background()
	s := open(t, "")
	sess, _ := s.CreateSession(ctx, "expiry")
	call := convo.Message{Role: convo.Assistant, Content: `{"thought":"t","action":"rm","args":{}}`, Tool: "rm"}
	pause := func(ttl time.Duration) (int64, store.Approval) {
		turn, err := s.StartTurn(ctx, sess.ID, "trace", "remove it")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CommitTurn(ctx, turn, store.TurnAwaiting, "", []convo.Message{call}); err != nil {
			t.Fatal(err)
		}
		a, err := s.CreateApproval(ctx, sess.ID, turn, "rm", "{}", ttl)
		if err != nil {
			t.Fatal(err)
		}
		return turn, a
	}
	expiring, a := pause(20 * time.Millisecond)
	turns, _ := s.Turns(ctx, sess.ID)
	if turns[0].Status != store.TurnAwaiting {
		t.Fatalf("before the expiry: %+v", turns[0])
	}
	time.Sleep(50 * time.Millisecond)
	before, _ := s.Session(ctx, sess.ID)

	turns, err := s.Turns(ctx, sess.ID)
	if err != nil || len(turns) != 1 {
		t.Fatalf("Turns: %+v, %v", turns, err)
	}
	tr := turns[0]
	if tr.ID != expiring || tr.Status != store.TurnFailed || tr.Error != store.ExpiredReason || tr.Ended == nil || !tr.Ended.Equal(a.Expires.Truncate(time.Nanosecond)) {
		t.Errorf("after the expiry: %+v (approval expired at %v)", tr, a.Expires)
	}
	if len(tr.Messages) != 2 || tr.Messages[1].Role != convo.Observation || tr.Messages[1].Content != "rm was not run: the approval expired before the user answered." {
		t.Errorf("messages after the expiry: %+v", tr.Messages)
	}
	if after, _ := s.Session(ctx, sess.ID); !after.Updated.Equal(before.Updated) {
		t.Error("reading the session moved it up the list")
	}
	// Stored, not only shown: a second read finds nothing more to do.
	again, _ := s.Turns(ctx, sess.ID)
	if len(again[0].Messages) != 2 || again[0].Status != store.TurnFailed {
		t.Errorf("second read: %+v", again[0])
	}
	if _, err := s.ClaimApproval(ctx, sess.ID, a.ID, store.ApprovalApproved); !errors.Is(err, store.ErrApprovalExpired) {
		t.Errorf("claiming the expired approval: %v", err)
	}

	// A new message does not supersede an expired approval: it expires it.
	// An approval still within its time is untouched by reads.
	expiring2, _ := pause(20 * time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	superseded, err := s.SupersedeApprovals(ctx, sess.ID)
	if err != nil || len(superseded) != 0 {
		t.Errorf("SupersedeApprovals: %+v, %v; want none (it had expired)", superseded, err)
	}
	live, _ := pause(time.Hour)
	turns, _ = s.Turns(ctx, sess.ID)
	for _, tr := range turns {
		want := store.TurnFailed
		if tr.ID == live {
			want = store.TurnAwaiting
		}
		if tr.Status != want {
			t.Errorf("turn %d: %s, want %s", tr.ID, tr.Status, want)
		}
		if tr.ID == expiring2 && tr.Error != store.ExpiredReason {
			t.Errorf("turn %d: %+v", tr.ID, tr)
		}
	}
}
