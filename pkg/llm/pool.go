package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// Backend is one model server: the Ollama Client and the OpenAI client are
// the two kinds a Pool holds.
type Backend interface {
	ChatStream(ctx context.Context, msgs []convo.Message, format json.RawMessage, onPiece func(string)) (Reply, error)
	Check(ctx context.Context) error
}

// budgeted is a Backend that knows how many characters of prompt its model's
// context holds (both kinds do).
type budgeted interface {
	PromptBudget(ctx context.Context) (chars int, why string)
}

// Member is one server of a Pool.
type Member struct {
	// Name says which server it is, in logs, steps, /readyz and metrics:
	// its MMCP_LLM_BACKENDS entry (kind=url#model), which holds no secret.
	Name    string
	Model   string
	Backend Backend
}

// Backend states, as BackendState.State has them.
const (
	StateUnknown = "unknown" // no call has finished yet
	StateUp      = "up"
	StateDown    = "down" // failed; probed until it answers again
)

// BackendState is what a Pool knows of one server now.
type BackendState struct {
	Name     string `json:"name"`
	Model    string `json:"model"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"` // why it is down
	InFlight int    `json:"in_flight"`
	Sessions int    `json:"sessions"` // sessions placed on it
}

// CallStat is one finished call of a Pool, for metrics.
type CallStat struct {
	Backend  string
	Duration time.Duration
	Err      error
}

// PoolOptions configures a Pool.
type PoolOptions struct {
	// ProbeFirst is how long after a server failed it is first checked
	// again; each failed probe doubles it, up to ProbeMax. 0 means 1s and
	// 30s.
	ProbeFirst, ProbeMax time.Duration
	// ProbeTimeout bounds one probe; 0 means 10s.
	ProbeTimeout time.Duration
	// SessionIdle is how long a session not heard from keeps its place;
	// 0 means an hour.
	SessionIdle time.Duration
	Log         *slog.Logger // nil means slog.Default()
}

// maxSessions bounds the placement map: past it, places idle longest go.
const maxSessions = 10_000

// Pool spreads turns over several model servers. A session stays on one
// server while it is healthy, since its prompt cache lives there; a new one
// goes to the least busy healthy server. A call that fails because its
// server did (unreachable, 5xx, timeout) marks that server down, is made
// once more on another, and moves the session there; the reply says so
// (Reply.Failover). A server marked down is probed with backoff until it
// answers. It is safe for concurrent use.
type Pool struct {
	members []*member
	o       PoolOptions
	log     *slog.Logger
	observe atomic.Pointer[func(CallStat)]

	closed atomic.Bool

	mu       sync.Mutex
	sessions map[string]*place
}

type place struct {
	member int
	used   time.Time
}

type member struct {
	Member
	inFlight atomic.Int64

	mu       sync.Mutex
	state    string
	reason   string
	sessions int
	probe    *time.Timer
	wait     time.Duration // the next probe's delay
}

// sessionKey marks the session a call belongs to in its context.
type sessionKey struct{}

// WithSession says which session the calls under ctx belong to: a Pool keeps
// them on one server. Without it, a Pool keeps a turn's calls together by
// its trace id.
func WithSession(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, sessionKey{}, id)
}

func affinity(ctx context.Context) string {
	if id, ok := ctx.Value(sessionKey{}).(string); ok && id != "" {
		return "s:" + id
	}
	if id := trace.ID(ctx); id != "" {
		return "t:" + id
	}
	return ""
}

// NewPool makes a Pool of members, in the order given (the first is
// preferred when all are equally busy).
func NewPool(members []Member, o PoolOptions) (*Pool, error) {
	if len(members) == 0 {
		return nil, errors.New("llm: a pool needs at least one model server")
	}
	if o.ProbeFirst <= 0 {
		o.ProbeFirst = time.Second
	}
	if o.ProbeMax <= 0 {
		o.ProbeMax = 30 * time.Second
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 10 * time.Second
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = time.Hour
	}
	p := &Pool{o: o, log: o.Log, sessions: map[string]*place{}}
	if p.log == nil {
		p.log = slog.Default()
	}
	for _, m := range members {
		if m.Backend == nil {
			return nil, fmt.Errorf("llm: model server %q has no client", m.Name)
		}
		p.members = append(p.members, &member{Member: m, state: StateUnknown})
	}
	return p, nil
}

// OnCall sets a function that sees every finished call (metrics).
func (p *Pool) OnCall(f func(CallStat)) { p.observe.Store(&f) }

// Close stops the probes.
func (p *Pool) Close() {
	p.closed.Store(true)
	for _, m := range p.members {
		m.mu.Lock()
		if m.probe != nil {
			m.probe.Stop()
		}
		m.mu.Unlock()
	}
}

// Chat is ChatStream without pieces.
func (p *Pool) Chat(ctx context.Context, msgs []convo.Message, format json.RawMessage) (Reply, error) {
	return p.ChatStream(ctx, msgs, format, nil)
}

// ChatStream makes the call on the server of the call's session (see
// WithSession), placing a new session on the least busy healthy server. A
// call whose server failed before it handed any piece on is made once more
// on another server; one that failed after cannot be (the pieces shown would
// mix two replies) and returns its error, its server marked down.
func (p *Pool) ChatStream(ctx context.Context, msgs []convo.Message, format json.RawMessage, onPiece func(string)) (Reply, error) {
	key := affinity(ctx)
	first := p.pick(key, -1)
	pieces := false
	sent := onPiece
	if onPiece != nil {
		sent = func(s string) { pieces = true; onPiece(s) }
	}
	reply, err := p.call(ctx, first, msgs, format, sent)
	if err == nil || ctx.Err() != nil || !failed(err) || pieces || len(p.members) == 1 {
		return reply, p.finalErr(err)
	}
	next := p.pick(key, first)
	if next == first {
		return reply, p.allDown(err)
	}
	from, to := p.members[first], p.members[next]
	why := fmt.Sprintf("moved from %s: %s", from.Name, err.Error())
	p.log.LogAttrs(ctx, slog.LevelWarn, "model server failed; the call goes to another",
		slog.String("from", from.Name), slog.String("to", to.Name), slog.String("problem", err.Error()))
	reply, err2 := p.call(ctx, next, msgs, format, onPiece)
	if err2 != nil {
		if failed(err2) {
			return reply, p.allDown(err2)
		}
		return reply, err2
	}
	reply.Failover = why
	return reply, nil
}

// finalErr is a call's error as the pool returns it: when every server is
// down, one that names each.
func (p *Pool) finalErr(err error) error {
	if err == nil || len(p.members) == 1 || !failed(err) {
		return err
	}
	for _, m := range p.members {
		if m.current() != StateDown {
			return err
		}
	}
	return p.allDown(err)
}

// allDown is the error when no server could answer: each one's reason, of
// the kind ErrUnavailable (503 model_unavailable to the client).
func (p *Pool) allDown(last error) error {
	var parts []string
	for _, m := range p.members {
		m.mu.Lock()
		reason := m.reason
		if reason == "" {
			reason = m.state
		}
		m.mu.Unlock()
		parts = append(parts, m.Name+": "+reason)
	}
	return &llmError{
		msg:   "no model server could answer: " + strings.Join(parts, "; "),
		kind:  ErrUnavailable,
		cause: last,
	}
}

// failed reports whether err says the server failed, not the request: it
// was unreachable or overloaded past its retries, failed (5xx), or timed
// out. Another server may answer.
func failed(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrServerError) || errors.Is(err, ErrTimeout)
}

func (p *Pool) call(ctx context.Context, i int, msgs []convo.Message, format json.RawMessage, onPiece func(string)) (Reply, error) {
	m := p.members[i]
	m.inFlight.Add(1)
	start := time.Now()
	reply, err := m.Backend.ChatStream(ctx, msgs, format, onPiece)
	m.inFlight.Add(-1)
	if f := p.observe.Load(); f != nil {
		(*f)(CallStat{Backend: m.Name, Duration: time.Since(start), Err: err})
	}
	switch {
	case err == nil:
		p.up(m)
	case ctx.Err() != nil:
		// The caller's end says nothing of the server.
	case failed(err):
		p.down(m, err)
	default:
		p.up(m) // it answered, if only to refuse
	}
	reply.Backend = m.Name
	if reply.Model == "" {
		reply.Model = m.Model
	}
	return reply, err
}

// pick chooses the server for key: its session's, while that one is not
// down, else the least busy one not down (other than not, a server that just
// failed). When all are down it keeps key's (or the first): one more
// attempt costs little, and the server may be back before its probe.
func (p *Pool) pick(key string, not int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	pl := p.sessions[key]
	if pl != nil && pl.member != not && p.members[pl.member].current() != StateDown {
		pl.used = now
		return pl.member
	}
	best := -1
	var bestLoad, bestSessions int64
	for i, m := range p.members {
		if i == not || m.current() == StateDown {
			continue
		}
		load, sessions := m.inFlight.Load(), int64(m.sessionCount())
		if best < 0 || load < bestLoad || load == bestLoad && sessions < bestSessions {
			best, bestLoad, bestSessions = i, load, sessions
		}
	}
	if best < 0 {
		if not >= 0 {
			return not // nowhere else to go
		}
		if pl != nil {
			return pl.member
		}
		best = 0
	}
	if key != "" {
		if pl != nil {
			p.members[pl.member].addSessions(-1)
		} else {
			pl = &place{}
			p.sessions[key] = pl
			p.prune(now)
		}
		pl.member, pl.used = best, now
		p.members[best].addSessions(1)
	}
	return best
}

// prune drops the places of sessions idle past SessionIdle, and when the map
// is still too large, the oldest half: a dropped session is placed again on
// its next call, which costs its cache at worst.
func (p *Pool) prune(now time.Time) {
	if len(p.sessions) <= maxSessions {
		return
	}
	for k, pl := range p.sessions {
		if now.Sub(pl.used) > p.o.SessionIdle {
			p.members[pl.member].addSessions(-1)
			delete(p.sessions, k)
		}
	}
	if len(p.sessions) <= maxSessions {
		return
	}
	cut := now.Add(-p.o.SessionIdle / 2)
	for k, pl := range p.sessions {
		if pl.used.Before(cut) || len(p.sessions) > maxSessions {
			p.members[pl.member].addSessions(-1)
			delete(p.sessions, k)
		}
	}
}

func (m *member) current() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

func (m *member) sessionCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions
}

func (m *member) addSessions(n int) {
	m.mu.Lock()
	m.sessions += n
	m.mu.Unlock()
}

func (p *Pool) up(m *member) {
	m.mu.Lock()
	was := m.state
	m.state, m.reason, m.wait = StateUp, "", 0
	if m.probe != nil {
		m.probe.Stop()
		m.probe = nil
	}
	m.mu.Unlock()
	if was == StateDown {
		p.log.Info("model server is back", "backend", m.Name)
	}
}

// down marks m down and schedules its probe, unless one is already due.
func (p *Pool) down(m *member, err error) {
	m.mu.Lock()
	was := m.state
	m.state, m.reason = StateDown, err.Error()
	if m.probe == nil {
		m.wait = p.o.ProbeFirst
		p.schedule(m)
	}
	m.mu.Unlock()
	if was != StateDown && len(p.members) > 1 {
		p.log.Warn("model server is down; its sessions go to the others until it answers again", "backend", m.Name, "problem", err.Error())
	}
}

// schedule arms m's next probe; m.mu is held.
func (p *Pool) schedule(m *member) {
	if p.closed.Load() {
		return
	}
	m.probe = time.AfterFunc(m.wait, func() { p.probeOnce(m) })
}

func (p *Pool) probeOnce(m *member) {
	ctx, cancel := context.WithTimeout(context.Background(), p.o.ProbeTimeout)
	err := m.Backend.Check(ctx)
	cancel()
	if err == nil {
		p.up(m)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != StateDown {
		return // a call found it up meanwhile
	}
	m.reason = err.Error()
	m.wait = min(2*m.wait, p.o.ProbeMax)
	p.schedule(m)
}

// Check checks every server at once and reports nil when at least one is
// ready. Otherwise its error names each server's problem; it is
// ErrModelMissing only when every server lacks its model.
func (p *Pool) Check(ctx context.Context) error {
	errs := make([]error, len(p.members))
	var wg sync.WaitGroup
	for i, m := range p.members {
		wg.Go(func() {
			err := m.Backend.Check(ctx)
			errs[i] = err
			switch {
			case err == nil:
				p.up(m)
			case ctx.Err() != nil:
			default:
				// A server that answers but lacks the model is as
				// useless to a chat as one that does not answer.
				p.down(m, err)
			}
		})
	}
	wg.Wait()
	if len(p.members) == 1 {
		return errs[0]
	}
	var parts []string
	missing := 0
	for i, err := range errs {
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrModelMissing) {
			missing++
		}
		parts = append(parts, p.members[i].Name+": "+err.Error())
	}
	e := &llmError{msg: "no model server is ready: " + strings.Join(parts, "; "), kind: ErrUnavailable}
	if missing == len(errs) {
		e.kind = ErrModelMissing
	}
	return e
}

// Backends lists each server's state, in the order of the pool.
func (p *Pool) Backends() []BackendState {
	out := make([]BackendState, len(p.members))
	for i, m := range p.members {
		m.mu.Lock()
		out[i] = BackendState{Name: m.Name, Model: m.Model, State: m.state, Reason: m.reason, Sessions: m.sessions}
		m.mu.Unlock()
		out[i].InFlight = int(m.inFlight.Load())
	}
	return out
}

// PromptBudget is the budget of the server the call's session is on (or
// would be placed on): each server learns its own context and ratio.
func (p *Pool) PromptBudget(ctx context.Context) (chars int, why string) {
	key := affinity(ctx)
	p.mu.Lock()
	i := 0
	if pl := p.sessions[key]; pl != nil {
		i = pl.member
	} else {
		i = -1
	}
	p.mu.Unlock()
	if i < 0 {
		// Not placed yet: the smallest budget of the servers it may go
		// to, so that the first prompt fits wherever it lands.
		chars = -1
		for _, m := range p.members {
			if b, ok := m.Backend.(budgeted); ok {
				if c, w := b.PromptBudget(ctx); chars < 0 || c < chars {
					chars, why = c, w
				}
			}
		}
		if chars < 0 {
			return int(^uint(0) >> 1), ""
		}
		return chars, why
	}
	if b, ok := p.members[i].Backend.(budgeted); ok {
		return b.PromptBudget(ctx)
	}
	return int(^uint(0) >> 1), ""
}
