package trace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/trace"
)

func TestNew(t *testing.T) {
	a, b := trace.New(), trace.New()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(a) || a == b {
		t.Errorf("ids %q and %q", a, b)
	}
}

func TestHandlerStampsTheTraceID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(trace.Handler{Handler: slog.NewJSONHandler(&buf, nil)}).With("component", "test")
	ctx := trace.With(context.Background(), "abc123")
	log.InfoContext(ctx, "with")
	log.WithGroup("g").InfoContext(context.Background(), "without")

	dec := json.NewDecoder(&buf)
	var with, without map[string]any
	if err := dec.Decode(&with); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&without); err != nil {
		t.Fatal(err)
	}
	if with["trace_id"] != "abc123" || with["component"] != "test" {
		t.Errorf("with a trace: %v", with)
	}
	if _, ok := without["trace_id"]; ok || trace.ID(context.Background()) != "" {
		t.Errorf("without a trace: %v", without)
	}
}
