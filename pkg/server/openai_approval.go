package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/store"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// Approvals through the OpenAI route. An OpenAI client keeps the
// conversation and sends all of it each time; it has no way to carry an
// approval id. So a turn that stops at a call needing approval is recorded
// as a session of its own (the client's history, then the paused turn), with
// its approval in the store like every other; the answer asks a yes or no
// in words and names the session, the approval and a code. The client's
// next message in that conversation is matched back to the approval:
//
//   - the message before the client's last must be the assistant's question,
//     holding the session and approval ids (in the link to the page) and
//     the code;
//   - the code must be approvalCode(approval id, digest of the conversation
//     before the question): a question pasted into another conversation, or
//     a history edited since, does not match, and its message is an ordinary
//     new message that touches no approval;
//   - a clear yes or no then claims the approval through the store, which
//     makes it single-use and expiring: a replayed yes, or one past
//     MMCP_APPROVAL_TTL, runs nothing and says so;
//   - any other reply retires the approval, as a new message in a session
//     does, and runs as a new message.
//
// The code is no secret from the client, which saw it, and holds no power of
// its own: the token is what lets a client act, and with it POST
// /v1/chat/respond can answer any approval. What the code stops is a yes
// reaching an approval it was not said to: another conversation's, or one
// the history no longer shows. What runs is always the call stored with the
// approval, never anything read from the client's copy of the question.

// codeAlphabet is Crockford's base 32: no I, L, O or U to misread.
var codeAlphabet = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// approvalCode binds an approval to the conversation it was asked in: 40
// bits of a hash of both, as XXXX-XXXX.
func approvalCode(approvalID, digest string) string {
	sum := sha256.Sum256([]byte("mmcpd approval code\x00" + approvalID + "\x00" + digest))
	c := codeAlphabet.EncodeToString(sum[:5])
	return c[:4] + "-" + c[4:]
}

// historyDigest is a hash of the conversation as the client sent it: its
// user and assistant messages, in order, blank ones left out as
// openAIConversation leaves them. System and developer messages are not in
// it: clients rebuild them for every request (Open WebUI puts the date and
// time in them), and they are instructions, not what was said.
func historyDigest(msgs []CompletionMessage) string {
	h := sha256.New()
	for _, m := range msgs {
		if m.Role != "user" && m.Role != "assistant" {
			continue
		}
		text, _ := contentText(m.Content) // checked by openAIConversation
		if blank(text) {
			continue
		}
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(text)))
		h.Write([]byte(m.Role))
		h.Write(n[:])
		h.Write([]byte(text))
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

var (
	approvalLink = regexp.MustCompile(`#session=([0-9a-f-]{36})&approval=([0-9a-f-]{36})`)
	approvalMark = regexp.MustCompile(`approval code ([0-9A-Z]{4}-[0-9A-Z]{4})`)
)

// approvalReply is a request that answers an approval question: the ids the
// question named, and what the reply decides ("approve", "deny", or "" for
// anything else).
type approvalReply struct {
	session, approval, decision string
}

// matchApproval reports whether a request answers an approval question
// asked in this same conversation (see the top of this file). msgs have
// passed openAIConversation.
func matchApproval(msgs []CompletionMessage) (approvalReply, bool) {
	n := len(msgs)
	if n < 2 || msgs[n-2].Role != "assistant" {
		return approvalReply{}, false
	}
	question, _ := contentText(msgs[n-2].Content)
	ids := approvalLink.FindAllStringSubmatch(question, -1)
	codes := approvalMark.FindAllStringSubmatch(question, -1)
	// One question, asked once: a text that names several is not ours.
	if len(ids) != 1 || len(codes) != 1 {
		return approvalReply{}, false
	}
	if approvalCode(ids[0][2], historyDigest(msgs[:n-2])) != codes[0][1] {
		return approvalReply{}, false
	}
	reply, _ := contentText(msgs[n-1].Content)
	return approvalReply{session: ids[0][1], approval: ids[0][2], decision: yesOrNo(reply)}, true
}

// The replies taken as a clear yes or no, once lower-cased, with the white
// space folded and the punctuation around them dropped. Anything else,
// "yes but only in 4K" included, is a new message.
var (
	yesWords = wordSet("yes", "y", "yes please", "yep", "yeah", "ok", "okay", "sure", "approve", "approved", "allow", "go ahead", "do it", "confirm", "confirmed")
	noWords  = wordSet("no", "n", "no thanks", "no thank you", "nope", "deny", "denied", "decline", "refuse", "cancel", "don't", "do not", "stop")
)

func wordSet(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// yesOrNo reads a reply as "approve", "deny" or "" (neither).
func yesOrNo(reply string) string {
	r := strings.Join(strings.Fields(strings.ToLower(reply)), " ")
	r = strings.Trim(r, " .!,;:*_\"'`’")
	r = strings.ReplaceAll(r, "’", "'")
	switch {
	case yesWords[r]:
		return "approve"
	case noWords[r]:
		return "deny"
	}
	return ""
}

// pauseOpenAI records an OpenAI turn that stopped at a call needing
// approval: the client's conversation (conv's first before messages)
// becomes a session's finished turns, this turn is paused in it, and its
// approval is stored. It returns the question the answer asks.
func (s *Server) pauseOpenAI(r *http.Request, msgs []CompletionMessage, conv *convo.Conversation, before int, res *loop.Result) (string, error) {
	ctx := context.WithoutCancel(r.Context())
	turns := importedTurns(conv.Messages[:before])
	// Run added the user message first, then the turn's steps.
	turns = append(turns, store.Turn{Message: conv.Messages[before].Content, Status: store.TurnAwaiting, Messages: conv.Messages[before+1:]})
	sess, ids, err := s.Store.CreateSessionFrom(ctx, store.Title(firstUserText(msgs)), trace.ID(ctx), turns)
	if err != nil {
		return "", fmt.Errorf("recording the conversation that asks for approval: %w", err)
	}
	turn := ids[len(ids)-1]
	p := res.Pending
	a, err := s.Store.CreateApproval(ctx, sess.ID, turn, p.Tool, string(p.Args), s.Limits.ApprovalTTL)
	if err != nil {
		s.failTurn(ctx, sess.ID, turn, err)
		return "", err
	}
	s.log().InfoContext(ctx, "approval asked through the OpenAI route", "session_id", sess.ID, "approval_id", a.ID, "tool", p.Tool)
	return s.question(r, sess.ID, a.ID, approvalCode(a.ID, historyDigest(msgs)), p), nil
}

// firstUserText is the conversation's first user message as the client
// wrote it (the turn's own message may carry the client's instructions).
func firstUserText(msgs []CompletionMessage) string {
	for _, m := range msgs {
		if text, _ := contentText(m.Content); m.Role == "user" && !blank(text) {
			return text
		}
	}
	return ""
}

// importedTurns splits a client's conversation into turns, one per user
// message with the answers after it. Answers before the first user message
// (a client's greeting) have no turn to go in and are left out.
func importedTurns(msgs []convo.Message) []store.Turn {
	var turns []store.Turn
	for _, m := range msgs {
		switch {
		case m.Role == convo.User:
			turns = append(turns, store.Turn{Message: m.Content, Status: store.TurnDone})
		case len(turns) > 0:
			turns[len(turns)-1].Messages = append(turns[len(turns)-1].Messages, m)
		}
	}
	return turns
}

// question is the answer that asks for the user's yes or no: the tool and
// each argument, the model's reason (cleaned as every explanation is), how
// to answer, the code, and the link to the approval on the page. Arguments
// are the model's text: each goes in a code span, so that no link or image
// in it is rendered.
func (s *Server) question(r *http.Request, session, approval, code string, p *loop.ActionRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "I need your yes or no before I run %s", mdCode(p.Tool))
	if args := readableArgs(p.Args); len(args) > 0 {
		b.WriteString(" with:\n")
		for _, a := range args {
			fmt.Fprintf(&b, "- %s: %s\n", mdCode(a[0]), mdCode(a[1]))
		}
	} else {
		b.WriteString(" (no arguments).\n")
	}
	if why := Explain(p.Thought); why != "" {
		fmt.Fprintf(&b, "\nWhy: %s\n", why)
	}
	fmt.Fprintf(&b, "\nNothing has run yet. Reply **yes** to run it or **no** to cancel it; any other reply cancels it and is taken as a new message. "+
		"The request expires in %s (approval code %s).\n", shortDuration(s.Limits.ApprovalTTL), code)
	fmt.Fprintf(&b, "\nOr answer it on mmcpd's page: %s/#session=%s&approval=%s", s.pageURL(r), session, approval)
	return b.String()
}

// pageURL is the page's address for a link in an answer to r, without a
// trailing slash.
func (s *Server) pageURL(r *http.Request) string {
	if s.PublicURL != "" {
		return strings.TrimRight(s.PublicURL, "/")
	}
	return "http://" + r.Host
}

// readableArgs are a call's arguments as name and value (JSON, compact), in
// the order the model wrote them.
func readableArgs(raw json.RawMessage) [][2]string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return [][2]string{{"arguments", compactJSON(raw)}}
	}
	var out [][2]string
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		var v json.RawMessage
		if err != nil || !ok || dec.Decode(&v) != nil {
			return [][2]string{{"arguments", compactJSON(raw)}}
		}
		out = append(out, [2]string{key, compactJSON(v)})
	}
	return out
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// mdCode is s on one line as a Markdown code span, whole (what the user
// approves is shown in full); backticks inside become quotes, so the span
// cannot be closed early.
func mdCode(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "(empty)"
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

// answerApproval answers a request matched to an approval question. A yes or
// a no claims the approval and resumes its turn, or says why nothing ran;
// handled is then true and the client has its answer. Anything else retires
// the approval, and handled is false: the caller runs the message as a new
// one.
func (s *Server) answerApproval(w http.ResponseWriter, r *http.Request, req *CompletionRequest, reply approvalReply, base CompletionChunk) (handled bool) {
	ctx := r.Context()
	sess, err := s.Store.Session(ctx, reply.session)
	if errors.Is(err, store.ErrNotFound) {
		// Deleted since: nothing is pending, the reply is just a message.
		s.log().InfoContext(ctx, "the approval question's session is gone; the reply is a new message", "session_id", reply.session)
		return false
	}
	if err != nil {
		s.failOpenAI(w, r, http.StatusInternalServerError, "internal", "", internalMessage(r))
		s.log().ErrorContext(ctx, "internal error", "err", err)
		return true
	}
	if reply.decision == "" {
		s.retire(ctx, sess.ID, reply.approval)
		return false
	}
	if !s.tryLock(sess.ID) {
		s.failOpenAI(w, r, http.StatusConflict, "session_busy", "this approval is being answered elsewhere (on mmcpd's page?); "+busyMessage, "")
		return true
	}
	defer s.unlock(sess.ID)
	status := store.ApprovalApproved
	if reply.decision == "deny" {
		status = store.ApprovalDenied
	}
	a, err := s.Store.ClaimApproval(ctx, sess.ID, reply.approval, status)
	var closed string
	switch {
	case errors.Is(err, store.ErrNotFound):
		closed = "I have no such request any more, so nothing was run. Ask again if you still want it."
	case errors.Is(err, store.ErrApprovalUsed):
		closed = "That request was already answered (or dropped for a newer message), so nothing was run this time. Ask again if you still want it."
	case errors.Is(err, store.ErrApprovalExpired):
		closed = fmt.Sprintf("That request expired (after %s, MMCP_APPROVAL_TTL) before your answer, so nothing was run. Ask again if you still want it.", shortDuration(s.Limits.ApprovalTTL))
	case err != nil:
		s.failOpenAI(w, r, http.StatusInternalServerError, "internal", "", internalMessage(r))
		s.log().ErrorContext(ctx, "internal error", "err", err)
		return true
	}
	if closed != "" {
		s.log().InfoContext(ctx, "a reply to an approval that is closed; nothing runs", "session_id", sess.ID, "approval_id", reply.approval, "reason", err.Error())
		s.complete(w, r, req, base, func(context.Context, loop.Observer) (string, *loop.Result, error) {
			return closed, &loop.Result{}, nil
		})
		return true
	}
	turns, err := s.Store.Turns(ctx, sess.ID)
	if err != nil {
		s.failOpenAI(w, r, http.StatusInternalServerError, "internal", "", internalMessage(r))
		s.log().ErrorContext(ctx, "internal error", "err", err)
		return true
	}
	conv := store.Conversation(turns)
	call, ok := pendingCall(conv, a)
	if ok {
		err = s.Store.SetTurnStatus(ctx, a.Turn, store.TurnRunning)
	} else {
		err = fmt.Errorf("approval %s: the conversation does not end with its call", a.ID)
	}
	if err != nil {
		s.failOpenAI(w, r, http.StatusInternalServerError, "internal", "", internalMessage(r))
		s.log().ErrorContext(ctx, "internal error", "err", err)
		return true
	}
	s.log().InfoContext(ctx, "turn resumed", "session_id", sess.ID, "approval_id", a.ID, "decision", reply.decision, "route", "openai")
	s.complete(w, r, req, base, func(turnCtx context.Context, progress loop.Observer) (string, *loop.Result, error) {
		before := len(conv.Messages)
		turnCtx = llm.WithSession(turnCtx, sess.ID) // the rest of the conversation stays on one model server
		res, err := s.Turns.Resume(turnCtx, &conv, loop.Decision{ActionRequest: call, Approved: status == store.ApprovalApproved}, progress)
		next, err, failed := s.record(r, sess.ID, a.Turn, &conv, before, res, turnEnd(r, turnCtx, err))
		switch {
		case failed != nil:
			return "", res, failed
		case err != nil:
			return "", res, err
		case next != nil:
			// The model wants another call that needs approval: asked in
			// this conversation, so bound to it, question included.
			return s.question(r, sess.ID, next.ID, approvalCode(next.ID, historyDigest(req.Messages)), res.Pending), res, nil
		}
		return res.Answer, res, nil
	})
	return true
}

// retire closes a session's pending approval because the reply to its
// question was neither yes nor no: as a new message in the session would,
// it ends the paused turn with "not run". A session busy with a turn (the
// approval being answered on the page right now) is left to that turn.
func (s *Server) retire(ctx context.Context, session, approval string) {
	if !s.tryLock(session) {
		s.log().InfoContext(ctx, "the reply to an approval question is neither yes nor no, and its session is busy: the approval is left to that turn", "session_id", session, "approval_id", approval)
		return
	}
	defer s.unlock(session)
	if err := s.supersede(ctx, session); err != nil {
		s.log().WarnContext(ctx, "retiring an approval answered with a new message", "session_id", session, "err", err)
		return
	}
	s.log().InfoContext(ctx, "the reply to an approval question is neither yes nor no: the approval is retired and the reply runs as a new message", "session_id", session, "approval_id", approval)
}
