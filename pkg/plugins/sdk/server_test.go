package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mmcpd/mmcpd/pkg/plugins"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/pkg/schema"
)

type searchArgs struct {
	Query string `json:"query" jsonschema:"minLength=1,description=Title to look for"`
	Year  int    `json:"year,omitempty" jsonschema:"minimum=1900"`
}

type searchResult struct {
	Title string `json:"title"`
	Year  int    `json:"year"`
}

type node struct {
	Next *node `json:"next"`
}

func call(t *testing.T, s pluginpb.PluginServer, tool, args string) *pluginpb.CallResponse {
	t.Helper()
	r, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: tool, Args: []byte(args)})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return r
}

// fixture is a plugin with one tool of each kind the tests need.
type fixture struct {
	s       pluginpb.PluginServer
	calls   atomic.Int32  // calls of search that reached the function
	release chan struct{} // what the stubborn tools wait for
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{release: make(chan struct{})}
	t.Cleanup(func() { close(f.release) })
	p := New("test", "0.1.0")
	p.log = hclog.NewNullLogger() // the panics here are on purpose
	Tool(p, "search", "Search", func(_ context.Context, a searchArgs) (searchResult, error) {
		f.calls.Add(1)
		return searchResult{Title: a.Query, Year: a.Year}, nil
	}, NeedsApproval(), Timeout(1500*time.Microsecond+time.Second))
	Tool(p, "text", "Plain text", func(_ context.Context, a searchArgs) (string, error) {
		return strings.Repeat(a.Query, a.Year), nil
	})
	Tool(p, "fail", "Fails", func(_ context.Context, a searchArgs) (*searchResult, error) {
		return nil, errors.New(a.Query)
	})
	Tool(p, "boom", "Panics", func(context.Context, searchArgs) (string, error) { panic("kaboom") })
	Tool(p, "stubborn", "Ignores its context", func(context.Context, searchArgs) (string, error) {
		<-f.release
		return "late", nil
	})
	Tool(p, "stubborn_short", "Ignores its context, with its own timeout", func(context.Context, searchArgs) (string, error) {
		<-f.release
		return "late", nil
	}, Timeout(20*time.Millisecond))
	p.RawTool("raw", "Echo", json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
		func(_ context.Context, args json.RawMessage) (json.RawMessage, error) { return args, nil })
	p.Context("now", "The time", func(context.Context) (string, error) { return "Current time: noon", nil })
	p.Context("broken", "Fails", func(context.Context) (string, error) { return "", errors.New("no\nclock") })
	p.Context("boom", "Panics", func(context.Context) (string, error) { panic("kaboom") })
	p.Context("slow", "Ignores its context", func(context.Context) (string, error) { <-f.release; return "late", nil })
	f.s = p.Server()
	return f
}

func TestDescribe(t *testing.T) {
	f := newFixture(t)
	d := describe(t, f.s)
	if d.Name != "test" || d.Version != "0.1.0" || len(d.Settings) != 0 || len(d.SettingProblems) != 0 {
		t.Errorf("describe: %v", d)
	}
	var names []string
	for _, tool := range d.Tools {
		names = append(names, tool.Name)
	}
	if got := strings.Join(names, ","); got != "search,text,fail,boom,stubborn,stubborn_short,raw" {
		t.Errorf("tools in declaration order: %s", got)
	}
	search := d.Tools[0]
	want, _ := schema.Reflect(searchArgs{})
	if !bytes.Equal(search.ArgsSchema, want) || search.Description != "Search" || !search.NeedsApproval || search.TimeoutMs != 1002 {
		t.Errorf("search: %v", search)
	}
	if tool := d.Tools[1]; tool.NeedsApproval || tool.TimeoutMs != 0 {
		t.Errorf("text: %v", tool)
	}
	if raw := d.Tools[6]; !strings.Contains(string(raw.ArgsSchema), `"required":["n"]`) {
		t.Errorf("raw: %v", raw)
	}
	if len(d.Contexts) != 4 || d.Contexts[0].Key != "now" || d.Contexts[0].Description != "The time" {
		t.Errorf("contexts: %v", d.Contexts)
	}
	// Describe hands out a copy: a caller cannot change the next answer.
	d.Tools[0].Name = "changed"
	if describe(t, f.s).Tools[0].Name != "search" {
		t.Error("Describe shares its response")
	}
}

func TestCallValid(t *testing.T) {
	f := newFixture(t)
	if r := call(t, f.s, "search", `{"query":"Dune","year":2021}`); r.Error != "" || string(r.Result) != `{"title":"Dune","year":2021}` {
		t.Errorf("search: %v", r)
	}
	// A string result goes out as text, not as a JSON string.
	if r := call(t, f.s, "text", `{"query":"ab","year":1999}`); r.Error != "" || string(r.Result) != strings.Repeat("ab", 1999) {
		t.Errorf("text: %d bytes, error %q", len(r.Result), r.Error)
	}
}

func TestCallInvalidArgs(t *testing.T) {
	f := newFixture(t)
	cases := map[string][]string{
		`{"year":1800}`:             {"args.query: missing required field", "args.year: minimum: got 1,800, want 1,900"},
		`{"query":""}`:              {`args.query: must have at least 1 character, got ""`},
		`{"query":"Dune","foo":1}`:  {"args.foo: unknown field"},
		`{"query":"Dune","year":1}`: {"args.year"},
		`{"query":"Dune"} {}`:       {"args: invalid JSON"},
		`[1]`:                       {"args: expected object, got array"},
		``:                          {"args.query: missing required field"},
	}
	for args, wants := range cases {
		r := call(t, f.s, "search", args)
		if !strings.HasPrefix(r.Error, "invalid arguments: ") || len(r.Result) > 0 {
			t.Errorf("%s: %v", args, r)
		}
		for _, w := range wants {
			if !strings.Contains(r.Error, w) {
				t.Errorf("%s: %q lacks %q", args, r.Error, w)
			}
		}
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("the function ran %d times on invalid arguments", n)
	}
}

func TestCallUnknownTool(t *testing.T) {
	f := newFixture(t)
	if r := call(t, f.s, "nope", `{}`); r.Error != `unknown tool "nope"` {
		t.Errorf("unknown tool: %v", r)
	}
}

func TestCallToolError(t *testing.T) {
	f := newFixture(t)
	r := call(t, f.s, "fail", `{"query":"first line\nsecond\r\nthird"}`)
	if r.Error != "first line second third" || len(r.Result) > 0 {
		t.Errorf("multi-line error: %q", r.Error)
	}
	long := strings.Repeat("é", 800) // 1,600 bytes
	r = call(t, f.s, "fail", `{"query":"`+long+`"}`)
	if len(r.Error) > 1000 || !utf8.ValidString(r.Error) || !strings.HasSuffix(r.Error, "...") || !strings.HasPrefix(r.Error, "éé") {
		t.Errorf("long error: %d bytes, valid %v", len(r.Error), utf8.ValidString(r.Error))
	}
	// An empty message would read as success.
	r = call(t, f.s, "fail", `{"query":" "}`)
	if r.Error == "" || r.Error == " " {
		t.Errorf("empty error message: %q", r.Error)
	}
}

func TestCallPanic(t *testing.T) {
	f := newFixture(t)
	if r := call(t, f.s, "boom", `{"query":"x"}`); r.Error != "tool boom panicked: kaboom" {
		t.Errorf("panic: %v", r)
	}
	if r := call(t, f.s, "search", `{"query":"after"}`); r.Error != "" {
		t.Errorf("after a panic: %v", r)
	}
}

func TestCallTimeout(t *testing.T) {
	f := newFixture(t)
	check := func(name string, req *pluginpb.CallRequest, want codes.Code) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if want == codes.Canceled {
			time.AfterFunc(20*time.Millisecond, cancel)
		}
		start := time.Now()
		r, err := f.s.Call(ctx, req)
		// The stubborn tool can only return after release is closed, at
		// cleanup: returning at all proves the call did not wait for it.
		if status.Code(err) != want || r != nil {
			t.Errorf("%s: %v, %v", name, r, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %v", name, d)
		}
	}
	check("timeout_ms", &pluginpb.CallRequest{Tool: "stubborn", Args: []byte(`{"query":"x"}`), TimeoutMs: 20}, codes.DeadlineExceeded)
	check("tool timeout", &pluginpb.CallRequest{Tool: "stubborn_short", Args: []byte(`{"query":"x"}`)}, codes.DeadlineExceeded)
	check("cancelled", &pluginpb.CallRequest{Tool: "stubborn", Args: []byte(`{"query":"x"}`)}, codes.Canceled)
	// The gRPC deadline alone is enough too.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := f.s.Call(ctx, &pluginpb.CallRequest{Tool: "stubborn", Args: []byte(`{"query":"x"}`)}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("gRPC deadline: %v", err)
	}
}

func TestCallResultCut(t *testing.T) {
	f := newFixture(t)
	// 2-byte characters; a limit of 101 leaves an odd budget before the
	// marker, which must not split one.
	r, err := f.s.Call(context.Background(), &pluginpb.CallRequest{Tool: "text", Args: []byte(`{"query":"é","year":1900}`), MaxResultBytes: 101})
	if err != nil {
		t.Fatal(err)
	}
	marker := "\n[... cut: result was 3800 bytes]"
	if len(r.Result) > 101 || !utf8.Valid(r.Result) || !strings.HasSuffix(string(r.Result), marker) || !strings.HasPrefix(string(r.Result), "éé") {
		t.Errorf("cut: %d bytes %q", len(r.Result), r.Result)
	}
	// Without a limit from the host, the daemon's applies.
	r = call(t, f.s, "text", `{"query":"`+strings.Repeat("x", 1000)+`","year":2000}`)
	if len(r.Result) > plugins.MaxResultBytes || !strings.HasSuffix(string(r.Result), "\n[... cut: result was 2000000 bytes]") {
		t.Errorf("default cut: %d bytes", len(r.Result))
	}
}

func TestRawTool(t *testing.T) {
	f := newFixture(t)
	if r := call(t, f.s, "raw", `{"n":3,"extra":true}`); r.Error != "" || string(r.Result) != `{"n":3,"extra":true}` {
		t.Errorf("raw: %v", r)
	}
	if r := call(t, f.s, "raw", `{"n":"3"}`); !strings.Contains(r.Error, `args.n: expected integer, got string "3"`) {
		t.Errorf("raw, invalid: %v", r)
	}
}

func TestContext(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if c, err := f.s.Context(ctx, &pluginpb.ContextRequest{Key: "now"}); err != nil || c.Text != "Current time: noon" {
		t.Errorf("now: %v, %v", c, err)
	}
	_, err := f.s.Context(ctx, &pluginpb.ContextRequest{Key: "broken"})
	if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != "no clock" {
		t.Errorf("broken: %v", err)
	}
	if _, err := f.s.Context(ctx, &pluginpb.ContextRequest{Key: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown: %v", err)
	}
	_, err = f.s.Context(ctx, &pluginpb.ContextRequest{Key: "boom"})
	if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != "context boom panicked: kaboom" {
		t.Errorf("panic: %v", err)
	}
	if c, err := f.s.Context(ctx, &pluginpb.ContextRequest{Key: "now"}); err != nil || c.Text == "" {
		t.Errorf("after a panic: %v, %v", c, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := f.s.Context(short, &pluginpb.ContextRequest{Key: "slow"}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("slow: %v", err)
	}
}

func TestDeclarationMistakes(t *testing.T) {
	ok := func(context.Context, searchArgs) (string, error) { return "", nil }
	raw := func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }
	cases := map[string]func(p *Plugin){
		"must match":        func(p *Plugin) { Tool(p, "Bad-Name", "x", ok) },
		"is reserved":       func(p *Plugin) { Tool(p, "final_response", "x", ok) },
		"is not a struct":   func(p *Plugin) { Tool(p, "t", "x", func(context.Context, string) (string, error) { return "", nil }) },
		"is recursive":      func(p *Plugin) { Tool(p, "t", "x", func(context.Context, node) (string, error) { return "", nil }) },
		"declared twice":    func(p *Plugin) { Tool(p, "t", "x", ok); Tool(p, "t", "y", ok) },
		"function is nil":   func(p *Plugin) { Tool[searchArgs, string](p, "t", "x", nil) },
		"must be positive":  func(p *Plugin) { Tool(p, "t", "x", ok, Timeout(-time.Second)) },
		"must be an object": func(p *Plugin) { p.RawTool("t", "x", json.RawMessage(`{"type":"string"}`), raw) },
		"not valid JSON":    func(p *Plugin) { p.RawTool("t", "x", json.RawMessage(`{`), raw) },
		"external references": func(p *Plugin) {
			p.RawTool("t", "x", json.RawMessage(`{"type":"object","$ref":"file:///etc/hostname"}`), raw)
		},
		"context key": func(p *Plugin) { p.Context("Now", "x", func(context.Context) (string, error) { return "", nil }) },
		`context "now": declared`: func(p *Plugin) {
			fn := func(context.Context) (string, error) { return "", nil }
			p.Context("now", "x", fn)
			p.Context("now", "y", fn)
		},
	}
	for want, declare := range cases {
		p := New("test", "1")
		declare(p)
		_, err := p.build()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error with %q, got %v", want, err)
		}
	}
	for _, name := range []string{"", "a b", "../x"} {
		if _, err := New(name, "1").build(); err == nil {
			t.Errorf("plugin name %q accepted", name)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Server did not panic on a declaration mistake")
		}
	}()
	p := New("test", "1")
	Tool(p, "Bad", "x", ok)
	p.Server()
}
