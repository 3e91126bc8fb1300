package sdk

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

// TestTransient: the response says transient for an error marked with
// Transient, for one that carries a Transient() method (httpapi's kinds),
// wrapped or not, and for no other; Changes reaches Describe.
func TestTransient(t *testing.T) {
	p := New("test", "0.1.0")
	cases := []struct {
		tool      string
		err       error
		transient bool
	}{
		{"marked", Transient(errors.New("the service answered 503")), true},
		{"wrapped", fmt.Errorf("reading: %w", Transient(errors.New("timed out"))), true},
		{"http_5xx", fmt.Errorf("Sonarr failed (502 Bad Gateway): %w", httpapi.ErrService), true},
		{"http_404", fmt.Errorf("Sonarr: not found: %w", httpapi.ErrNotFound), false},
		{"plain", errors.New("no such film"), false},
	}
	for _, c := range cases {
		Tool(p, c.tool, "Fails", func(context.Context, searchArgs) (string, error) { return "", c.err })
	}
	Tool(p, "pause", "Pauses", func(context.Context, searchArgs) (string, error) { return "ok", nil }, Changes())
	s := p.Server()
	for _, c := range cases {
		r := call(t, s, c.tool, `{"query":"x"}`)
		if r.Error == "" || r.Transient != c.transient {
			t.Errorf("%s: error %q, transient %v", c.tool, r.Error, r.Transient)
		}
	}
	if r := call(t, s, "pause", `{"query":"x"}`); r.Transient || r.Error != "" {
		t.Errorf("pause: %v", r)
	}
	for _, tl := range describe(t, s).Tools {
		if tl.Changes != (tl.Name == "pause") {
			t.Errorf("%s: changes %v", tl.Name, tl.Changes)
		}
	}
	if Transient(nil) != nil || IsTransient(errors.New("x")) {
		t.Error("Transient(nil) or a plain error")
	}
}
