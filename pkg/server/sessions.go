package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	convo "github.com/mmcpd/mmcpd/pkg/context"
)

// Errors a session store returns.
var (
	ErrSessionNotFound = errors.New("session not found")
	ErrSessionBusy     = errors.New("session busy: a turn is already running in it")
)

// Sessions holds conversations between turns.
type Sessions interface {
	// Begin starts a turn: it returns the session (a new one when id is
	// empty) for the caller's exclusive use until End. A session whose turn is
	// running gives ErrSessionBusy at once.
	Begin(ctx context.Context, id string) (*Session, error)
	// End saves the session and lets the next turn in.
	End(ctx context.Context, s *Session) error
}

// Session is one conversation.
type Session struct {
	ID      string
	Conv    convo.Conversation
	Created time.Time
	Updated time.Time
}

// Memory is a Sessions kept in memory: they last as long as the process.
type Memory struct {
	mu       sync.Mutex
	sessions map[string]*memSession
}

type memSession struct {
	busy bool
	s    Session
}

// NewMemory returns an empty in-memory session store.
func NewMemory() *Memory { return &Memory{sessions: map[string]*memSession{}} }

// Begin implements Sessions.
func (m *Memory) Begin(_ context.Context, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == "" {
		now := time.Now()
		ms := &memSession{busy: true, s: Session{ID: newID(), Created: now, Updated: now}}
		m.sessions[ms.s.ID] = ms
		s := ms.s
		return &s, nil
	}
	ms, ok := m.sessions[id]
	if !ok {
		return nil, fmt.Errorf("session %q: %w", id, ErrSessionNotFound)
	}
	if ms.busy {
		return nil, fmt.Errorf("session %q: %w", id, ErrSessionBusy)
	}
	ms.busy = true
	s := ms.s
	s.Conv.Messages = append([]convo.Message(nil), ms.s.Conv.Messages...)
	return &s, nil
}

// End implements Sessions.
func (m *Memory) End(_ context.Context, s *Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ms, ok := m.sessions[s.ID]
	if !ok {
		return fmt.Errorf("session %q: %w", s.ID, ErrSessionNotFound)
	}
	s.Updated = time.Now()
	ms.s = *s
	ms.busy = false
	return nil
}

// newID returns a random (version 4) UUID: unguessable, since knowing a
// session id is enough to read and continue it.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
