package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// SessionList is the answer of GET /v1/sessions.
type SessionList struct {
	Sessions   []store.Session `json:"sessions"`
	NextCursor string          `json:"next_cursor,omitempty"`
}

// SessionView is a session as a person reads it: each turn's question, the
// tool steps and their results, and the answer.
type SessionView struct {
	store.Session
	Turns []TurnView `json:"turns"`
}

// TurnView is one turn of a SessionView.
type TurnView struct {
	TraceID string     `json:"trace_id"`
	Status  string     `json:"status"`
	Error   string     `json:"error,omitempty"`
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	Items   []Item     `json:"items"`
}

// Item is one entry of a turn: "user", "tool_call", "tool_result" or
// "assistant".
type Item struct {
	Type    string          `json:"type"`
	Content string          `json:"content,omitempty"`
	Tool    string          `json:"tool,omitempty"`
	Args    json.RawMessage `json:"args,omitempty"`
	Thought string          `json:"thought,omitempty"`
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			s.fail(w, r, http.StatusBadRequest, "invalid_request", "limit must be an integer from 1 to 100", false)
			return
		}
		limit = n
	}
	page, next, err := s.Store.Sessions(r.Context(), r.URL.Query().Get("cursor"), limit)
	if errors.Is(err, store.ErrBadCursor) {
		s.fail(w, r, http.StatusBadRequest, "invalid_request", "cursor is not one this API returned", false)
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if page == nil {
		page = []store.Session{}
	}
	s.reply(w, http.StatusOK, SessionList{Sessions: page, NextCursor: next})
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	turns, err := s.Store.Turns(r.Context(), sess.ID)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	view := SessionView{Session: sess, Turns: []TurnView{}}
	for _, t := range turns {
		view.Turns = append(view.Turns, turnView(t))
	}
	s.reply(w, http.StatusOK, view)
}

// turnView renders a stored turn for people: decisions become tool calls
// and the answer, observations their results.
func turnView(t store.Turn) TurnView {
	v := TurnView{TraceID: t.TraceID, Status: t.Status, Error: t.Error, Started: t.Started, Ended: t.Ended,
		Items: []Item{{Type: "user", Content: t.Message}}}
	for _, m := range t.Messages {
		switch m.Role {
		case convo.Assistant:
			var d schema.Decision
			if json.Unmarshal([]byte(m.Content), &d) != nil {
				continue
			}
			switch {
			case d.Final():
				v.Items = append(v.Items, Item{Type: "assistant", Content: d.Answer(), Thought: d.Thought})
			case len(d.Calls) > 0: // calls asked for at once: one item each
				for _, c := range d.Calls {
					v.Items = append(v.Items, Item{Type: "tool_call", Tool: c.Action, Args: c.Args, Thought: d.Thought})
				}
			default:
				v.Items = append(v.Items, Item{Type: "tool_call", Tool: d.Action, Args: d.Args, Thought: d.Thought})
			}
		case convo.Observation:
			v.Items = append(v.Items, Item{Type: "tool_result", Tool: m.Tool, Content: m.Content})
		}
	}
	return v
}

func (s *Server) renameSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Title string `json:"title"`
	}
	if !s.decode(w, r, &req) {
		return
	}
	title := strings.TrimSpace(req.Title)
	if blank(title) || utf8.RuneCountInString(title) > 200 {
		s.fail(w, r, http.StatusBadRequest, "invalid_request", "title must be 1 to 200 characters, not only blank or invisible ones", false)
		return
	}
	id := r.PathValue("id")
	if err := s.Store.Rename(r.Context(), id, title); err != nil {
		s.sessionError(w, r, id, err)
		return
	}
	sess, ok := s.session(w, r, id)
	if ok {
		s.reply(w, http.StatusOK, sess)
	}
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.lock(w, r, id) { // never pull a session out from under its turn
		return
	}
	defer s.unlock(id)
	if err := s.Store.Delete(r.Context(), id); err != nil {
		s.sessionError(w, r, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) sessionError(w http.ResponseWriter, r *http.Request, id string, err error) {
	if errors.Is(err, store.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, "session_not_found", fmt.Sprintf("no session %q", id), false)
		return
	}
	s.internal(w, r, err)
}
