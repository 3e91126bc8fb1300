package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mmcpd/mmcpd/pkg/plugins"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// maxError bounds a tool error: it is read by a model and shown to a user.
const maxError = 1000

// resultHeadroom leaves room in a gRPC message for what surrounds a result.
const resultHeadroom = 64 << 10

// server implements the contract. It is immutable once built, so calls may
// run concurrently.
type server struct {
	pluginpb.UnimplementedPluginServer
	describe *pluginpb.DescribeResponse
	tools    map[string]*tool
	contexts map[string]*provider
	health   func(ctx context.Context) error // nil: no probe
	standby  string                          // why tools are refused; empty when settings are fine
	secrets  []string
	log      hclog.Logger
}

func newServer(p *Plugin) *server {
	s := &server{
		tools:    make(map[string]*tool, len(p.tools)),
		contexts: make(map[string]*provider, len(p.contexts)),
		secrets:  p.settings.secrets,
		health:   p.health,
		log:      p.log,
		describe: &pluginpb.DescribeResponse{
			Name:      p.name,
			Version:   text(p.version),
			Settings:  p.settings.list,
			HasHealth: p.health != nil,
		},
	}
	// A description that is not UTF-8 would make every Describe fail to
	// marshal, a confusing way to learn about a typo.
	for _, set := range s.describe.Settings {
		set.Description = text(set.Description)
	}
	for _, t := range p.tools {
		s.tools[t.name] = t
		s.describe.Tools = append(s.describe.Tools, &pluginpb.Tool{
			Name:          t.name,
			Description:   text(t.description),
			ArgsSchema:    t.schema,
			NeedsApproval: t.needsApproval,
			TimeoutMs:     durationMs(t.timeout),
			Changes:       t.changes,
		})
	}
	for _, c := range p.contexts {
		s.contexts[c.key] = c
		s.describe.Contexts = append(s.describe.Contexts, &pluginpb.ContextProvider{Key: c.key, Description: text(c.description)})
	}
	if probs := p.settings.problems; len(probs) > 0 {
		s.describe.SettingProblems = slices.Clone(probs)
		s.standby = "its settings need fixing: " + strings.Join(probs, "; ")
	}
	return s
}

// durationMs rounds up, so a sub-millisecond timeout does not read as none.
func durationMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Describe implements pluginpb.PluginServer.
func (s *server) Describe(context.Context, *pluginpb.DescribeRequest) (*pluginpb.DescribeResponse, error) {
	return proto.Clone(s.describe).(*pluginpb.DescribeResponse), nil
}

// Call implements pluginpb.PluginServer. What the tool did wrong, or the
// model, is a tool error in the response; only an expired or cancelled call
// is a gRPC error, because then nobody is waiting for a tool error.
func (s *server) Call(ctx context.Context, req *pluginpb.CallRequest) (*pluginpb.CallResponse, error) {
	t, ok := s.tools[req.GetTool()]
	if !ok {
		return s.toolError(fmt.Sprintf("unknown tool %q", clip(req.GetTool(), 100))), nil
	}
	if s.standby != "" {
		return s.toolError(fmt.Sprintf("tool %s is unavailable: %s", t.name, s.standby)), nil
	}
	args := req.GetArgs()
	if len(bytes.TrimSpace(args)) == 0 {
		args = []byte("{}") // a tool without arguments may be sent none
	}
	// The host validated already; checking again keeps a plugin safe from a
	// host (or another language's client) that did not.
	if problem := t.check(args); problem != "" {
		return s.toolError("invalid arguments: " + problem), nil
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, d := range []time.Duration{msDuration(req.GetTimeoutMs()), t.timeout} {
		if d > 0 {
			var c context.CancelFunc
			ctx, c = context.WithTimeout(ctx, d)
			defer c()
		}
	}
	out, err := guard(ctx, func(ctx context.Context) ([]byte, error) { return t.run(ctx, args) })
	switch {
	case err != nil:
		return nil, ctxStatus(err, "tool "+t.name)
	case out.panicked:
		msg := s.scrub(fmt.Sprintf("tool %s panicked: %v", t.name, out.value))
		s.log.Error("tool panicked", "tool", t.name, "panic", msg, "stack", string(out.stack))
		return s.toolError(msg), nil
	case out.err != nil && ctx.Err() != nil:
		// The tool stopped because its time was up: that is a timeout for
		// the host to report, not an error of the tool's own.
		return nil, ctxStatus(ctx.Err(), "tool "+t.name)
	case out.err != nil:
		msg := out.err.Error()
		if strings.TrimSpace(msg) == "" {
			msg = "tool " + t.name + " failed without saying why"
		}
		resp := s.toolError(msg)
		resp.Transient = IsTransient(out.err)
		return resp, nil
	}
	return &pluginpb.CallResponse{Result: cut(out.val, resultLimit(req.GetMaxResultBytes()))}, nil
}

// msDuration turns timeout_ms into a duration; one too large to represent
// is no bound at all.
func msDuration(ms int64) time.Duration {
	if ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// resultLimit is the host's limit, or the daemon's default, kept small
// enough that the response still fits in one gRPC message.
func resultLimit(max int64) int {
	limit := int64(plugins.MaxResultBytes)
	if max > 0 {
		limit = max
	}
	return int(min(limit, plugins.MaxMessageBytes-resultHeadroom))
}

// Context implements pluginpb.PluginServer.
func (s *server) Context(ctx context.Context, req *pluginpb.ContextRequest) (*pluginpb.ContextResponse, error) {
	c, ok := s.contexts[req.GetKey()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unknown context %q", clip(req.GetKey(), 100))
	}
	out, err := guard(ctx, func(ctx context.Context) ([]byte, error) {
		line, err := c.fn(ctx)
		return []byte(line), err
	})
	switch {
	case err != nil:
		return nil, ctxStatus(err, "context "+c.key)
	case out.panicked:
		msg := s.scrub(fmt.Sprintf("context %s panicked: %v", c.key, out.value))
		s.log.Error("context provider panicked", "context", c.key, "panic", msg, "stack", string(out.stack))
		return nil, status.Error(codes.Unknown, s.message(msg))
	case out.err != nil:
		msg := out.err.Error()
		if strings.TrimSpace(msg) == "" {
			msg = "context " + c.key + " failed without saying why"
		}
		return nil, status.Error(codes.Unknown, s.message(msg))
	}
	return &pluginpb.ContextResponse{Text: s.scrub(text(string(out.val)))}, nil
}

// outcome is how a guarded function ended.
type outcome struct {
	val      []byte
	err      error
	panicked bool
	value    any
	stack    []byte
}

// guard runs fn and returns when it does or when ctx is done, whichever comes
// first: a function that ignores its context cannot hold the response back.
// Such a function is abandoned; its outcome is dropped when it ends. A panic
// becomes part of the outcome, so one bad call does not take the plugin (and
// every other tool in it) down.
func guard(ctx context.Context, fn func(context.Context) ([]byte, error)) (outcome, error) {
	done := make(chan outcome, 1) // buffered: an abandoned run must not block
	go func() {
		var o outcome
		defer func() {
			if v := recover(); v != nil {
				o = outcome{panicked: true, value: v, stack: debug.Stack()}
			}
			done <- o
		}()
		o.val, o.err = fn(ctx)
	}()
	select {
	case o := <-done:
		return o, nil
	case <-ctx.Done():
		select {
		case o := <-done: // finished at the same moment: keep the work
			return o, nil
		default:
			return outcome{}, ctx.Err()
		}
	}
}

// ctxStatus tells the host whether the deadline passed or the call was
// cancelled, with the gRPC codes it already knows.
func ctxStatus(err error, what string) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Errorf(codes.DeadlineExceeded, "%s: deadline exceeded", what)
	}
	return status.Errorf(codes.Canceled, "%s: cancelled", what)
}

func (s *server) toolError(msg string) *pluginpb.CallResponse {
	return &pluginpb.CallResponse{Error: s.message(msg)}
}

// message makes an error fit for a model and a log: no secret, one line,
// bounded. Secrets go first, so a cut cannot leave half of one.
func (s *server) message(msg string) string {
	return oneLine(s.scrub(msg), maxError)
}

// scrub blanks out the plugin's secret values: an HTTP client's error quotes
// the URL, and some APIs take their key in it.
func (s *server) scrub(msg string) string {
	for _, secret := range s.secrets {
		msg = strings.ReplaceAll(msg, secret, "[secret]")
	}
	return msg
}

// text makes s valid UTF-8: protobuf refuses to marshal a string that is not.
func text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// oneLine puts msg on one line of at most n bytes.
func oneLine(msg string, n int) string {
	msg = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(text(msg))
	return clip(msg, n)
}

// clip shortens s to at most n bytes, marked with "...", without splitting a
// character.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	keep := max(n-3, 0)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + "..."
}

// cut shortens a result to limit bytes, marker included, without splitting a
// character, so that the host need not cut it again.
func cut(b []byte, limit int) []byte {
	if len(b) <= limit {
		return b
	}
	marker := fmt.Sprintf("\n[... cut: result was %d bytes]", len(b))
	keep := max(limit-len(marker), 0)
	for keep > 0 && !utf8.RuneStart(b[keep]) {
		keep--
	}
	out := make([]byte, 0, keep+len(marker))
	return append(append(out, b[:keep]...), marker...)
}

// check validates args against the tool's schema and says what is wrong,
// field by field, or returns "".
func (t *tool) check(args []byte) string {
	return strings.Join(t.compiled.Check(args), "; ")
}
