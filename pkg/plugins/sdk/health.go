package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// Health declares the plugin's health probe: the cheapest call that proves
// its service answers and takes its credentials (a status endpoint asked
// with the key, say). The host runs it after start, again while it fails,
// and when its last answer has gone stale; while it fails, the plugin's
// tools are kept from the model and listed as unreachable with fn's error as
// the reason. That error should say what to check (the address, the setting
// holding the key) on one line; secret values are blanked out of it as out
// of tool errors. Declare it once; without it the host never probes.
func (p *Plugin) Health(fn func(ctx context.Context) error) {
	switch {
	case fn == nil:
		p.fail(errors.New("health probe: function is nil"))
	case p.health != nil:
		p.fail(errors.New("health probe: declared twice"))
	default:
		p.health = fn
	}
}

// Health implements pluginpb.PluginServer. What the probe found wrong is a
// problem in the response; as for Call, only an expired or cancelled probe
// is a gRPC error.
func (s *server) Health(ctx context.Context, _ *pluginpb.HealthRequest) (*pluginpb.HealthResponse, error) {
	if s.health == nil {
		// What an SDK without probes answered: the host takes it as none.
		return nil, status.Error(codes.Unimplemented, "the plugin declares no health probe")
	}
	if s.standby != "" {
		// Its tools refuse every call: the service cannot be reached as set.
		return &pluginpb.HealthResponse{Problem: s.message(s.standby)}, nil
	}
	out, err := guard(ctx, func(ctx context.Context) ([]byte, error) { return nil, s.health(ctx) })
	switch {
	case err != nil:
		return nil, ctxStatus(err, "health probe")
	case out.panicked:
		msg := s.scrub(fmt.Sprintf("health probe panicked: %v", out.value))
		s.log.Error("health probe panicked", "panic", msg, "stack", string(out.stack))
		return &pluginpb.HealthResponse{Problem: s.message(msg)}, nil
	case out.err != nil && ctx.Err() != nil:
		return nil, ctxStatus(ctx.Err(), "health probe")
	case out.err != nil:
		msg := out.err.Error()
		if strings.TrimSpace(msg) == "" {
			msg = "the health probe failed without saying why"
		}
		return &pluginpb.HealthResponse{Problem: s.message(msg)}, nil
	}
	return &pluginpb.HealthResponse{Ok: true}, nil
}
