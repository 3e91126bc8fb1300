package server

import (
	"context"
	"log/slog"
	"net/http"
)

// requestNote is what a request's handlers leave for its one "http" log
// line: why it failed, so that the line says more than a status (a stream
// that fails has answered 200 long before).
type requestNote struct {
	code    string
	message string
}

type noteKey struct{}

// withNote gives the request's context a note for the handlers to fill.
func withNote(ctx context.Context) (context.Context, *requestNote) {
	n := &requestNote{}
	return context.WithValue(ctx, noteKey{}, n), n
}

// noteFailure records why the request failed, for its log line. The last
// failure noted wins: it is the one the client got.
func noteFailure(r *http.Request, code, msg string) {
	if n, ok := r.Context().Value(noteKey{}).(*requestNote); ok {
		n.code, n.message = code, msg
	}
}

// attrs are the note's fields for the log line; none when nothing failed.
func (n *requestNote) attrs() []slog.Attr {
	if n.code == "" {
		return nil
	}
	return []slog.Attr{slog.String("error_code", n.code), slog.String("error", n.message)}
}
