// Package arrtest is what the *arr plugins' tests share: a fake
// service that answers canned JSON and records each request, a fixed
// environment, and the checks every such plugin must pass (its description,
// its settings, and its errors when the service fails).
package arrtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
	"github.com/mmcpd/mmcpd/plugins/internal/arr"
)

// APIKey is the key the tests configure; no message may quote it.
const APIKey = "0123456789abcdef0123456789abcdef"

// Env is a Saturday, 2026-11-21 14:03 in Paris (UTC+01:00).
func Env() arr.Env {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		panic(err)
	}
	return arr.Env{
		Now:     func() time.Time { return time.Date(2026, 11, 21, 13, 3, 0, 0, time.UTC) },
		Zone:    paris,
		Timeout: 2 * time.Second,
	}
}

// Build makes a plugin for the tests: a plugin's newPlugin.
type Build func(arr.Env) *sdk.Plugin

// Start sets the plugin's settings (the URL given, the test key) and
// returns its server.
func Start(t *testing.T, name, url string, build Build, env arr.Env) pluginpb.PluginServer {
	t.Helper()
	prefix := plugins.EnvPrefix(name)
	t.Setenv(prefix+"URL", url)
	t.Setenv(prefix+"API_KEY", APIKey)
	return build(env).Server()
}

// Call calls tool with args and returns its result and its tool error.
func Call(t *testing.T, s pluginpb.PluginServer, tool, args string) (string, string) {
	t.Helper()
	r, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: tool, Args: []byte(args), TimeoutMs: 10_000})
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	return string(r.Result), r.Error
}

// Request is what the fake service was asked.
type Request struct {
	Method string
	URI    string // path and query, as sent
	APIKey string
	Body   string // as sent; compare with JSONEqual
}

// Reply is a canned answer.
type Reply struct {
	Status int // 200 when 0
	Body   string
}

// Fake is a service answering "METHOD /path" (query aside) from replies;
// anything else gets a 404.
type Fake struct {
	*httptest.Server
	mu  sync.Mutex
	got []Request
}

// NewFake starts a fake service, closed at the end of the test.
func NewFake(t *testing.T, replies map[string]Reply) *Fake {
	f := &Fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.got = append(f.got, Request{Method: r.Method, URI: r.URL.RequestURI(), APIKey: r.Header.Get("X-Api-Key"), Body: string(body)})
		f.mu.Unlock()
		reply, ok := replies[r.Method+" "+r.URL.Path]
		if !ok {
			reply = Reply{Status: http.StatusNotFound, Body: `{"message":"NotFound"}`}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(max(reply.Status, http.StatusOK))
		io.WriteString(w, reply.Body)
	}))
	t.Cleanup(f.Close)
	return f
}

// Requests is every request so far, in order.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.got...)
}

// Expect checks that the fake was asked exactly want (method and URI), each
// with the test key, and returns the requests for a look at their bodies.
func (f *Fake) Expect(t *testing.T, want ...string) []Request {
	t.Helper()
	got := f.Requests()
	var lines []string
	for _, r := range got {
		lines = append(lines, r.Method+" "+r.URI)
		if r.APIKey != APIKey {
			t.Errorf("%s %s: X-Api-Key %q", r.Method, r.URI, r.APIKey)
		}
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	return got
}

// JSONEqual checks that got and want are the same JSON value.
func JSONEqual(t *testing.T, what, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Errorf("%s: not JSON (%v): %s", what, err, got)
		return
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: the test's JSON is broken: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		var buf bytes.Buffer
		json.Indent(&buf, []byte(got), "", "  ")
		t.Errorf("%s:\n%s\nwant:\n%s", what, buf.String(), want)
	}
}

// Describe checks the plugin's description: its tools (true for those that
// need approval), both settings, and no problem with them.
func Describe(t *testing.T, s pluginpb.PluginServer, name string, tools map[string]bool) {
	t.Helper()
	d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != name || d.Version != arr.Version || len(d.SettingProblems) != 0 || len(d.Contexts) != 0 {
		t.Errorf("describe: %v", d)
	}
	got := map[string]bool{}
	for _, tool := range d.Tools {
		got[tool.Name] = tool.NeedsApproval
		if !json.Valid(tool.ArgsSchema) || tool.Description == "" {
			t.Errorf("tool %s: %s %q", tool.Name, tool.ArgsSchema, tool.Description)
		}
	}
	if !reflect.DeepEqual(got, tools) {
		t.Errorf("tools (name: needs approval): %v, want %v", got, tools)
	}
	if len(d.Settings) != 2 ||
		d.Settings[0].Key != "URL" || !d.Settings[0].Required || d.Settings[0].Secret ||
		d.Settings[1].Key != "API_KEY" || !d.Settings[1].Required || !d.Settings[1].Secret {
		t.Errorf("settings: %v", d.Settings)
	}
}

// Settings checks that missing settings, or a URL that is not one, put the
// plugin on standby, and that its calls say why.
func Settings(t *testing.T, name string, build Build, tool, args string) {
	t.Helper()
	prefix := plugins.EnvPrefix(name)
	t.Setenv(prefix+"URL", "")
	t.Setenv(prefix+"API_KEY", "")
	d, _ := build(Env()).Server().Describe(context.Background(), &pluginpb.DescribeRequest{})
	want := []string{prefix + "URL is required", prefix + "API_KEY is required"}
	if !reflect.DeepEqual(d.GetSettingProblems(), want) {
		t.Errorf("problems: %q, want %q", d.GetSettingProblems(), want)
	}
	s := Start(t, name, "localhost:8989", build, Env())
	d, _ = s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	problem := prefix + `URL: "localhost:8989" is not an http(s) URL`
	if !reflect.DeepEqual(d.GetSettingProblems(), []string{problem}) {
		t.Errorf("problems: %q, want %q", d.GetSettingProblems(), problem)
	}
	if _, msg := Call(t, s, tool, args); !strings.Contains(msg, problem) {
		t.Errorf("call with a bad URL: %q", msg)
	}
}

// Failures calls each tool (name: arguments) against a service that fails
// in each way it can, and checks the one-line error the model gets.
func Failures(t *testing.T, name string, build Build, calls map[string]string) {
	t.Helper()
	service := strings.ToUpper(name[:1]) + name[1:]
	prefix := plugins.EnvPrefix(name)
	get := "GET " + arr.API(service) + "/"
	cases := []struct {
		what    string
		handler http.HandlerFunc
		want    []string
	}{
		{"401", answer(401, "", ""), []string{service + " refused the credentials (401); check " + prefix + "API_KEY"}},
		{"404", answer(404, "", `{"message":"NotFound"}`), []string{service + ": not found (" + get, "check that " + prefix + "URL is the address of " + service + ", with its URL base"}},
		{"429", answer(429, "30", ""), []string{service + " is rate limiting requests; try again in 30s"}},
		{"500", answer(500, "", `{"message":"database is locked","description":"SQLiteException"}`), []string{service + " failed (500 Internal Server Error on " + get, "): database is locked"}},
		{"malformed JSON", answer(200, "", `{"records": [`), []string{service + " answered " + get, "with something that is not the expected JSON"}},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, []string{service + " did not answer within 1s at http://127.0.0.1:"}},
		{"unreachable", nil, []string{service + " is unreachable at http://127.0.0.1:", "check " + prefix + "URL"}},
	}
	env := Env()
	env.Timeout = time.Second // room for a loaded machine's fast answers
	for _, c := range cases {
		url := closedURL(t)
		if c.handler != nil {
			ts := httptest.NewServer(c.handler)
			t.Cleanup(ts.Close)
			url = ts.URL
		}
		s := Start(t, name, url, build, env)
		for tool, args := range calls {
			res, msg := Call(t, s, tool, args)
			if res != "" || msg == "" || strings.Contains(msg, APIKey) || strings.Contains(msg, "\n") {
				t.Errorf("%s, %s: error %q, result %q", c.what, tool, msg, res)
			}
			for _, want := range c.want {
				if !strings.Contains(msg, want) {
					t.Errorf("%s, %s: %q, want it to contain %q", c.what, tool, msg, want)
				}
			}
		}
	}
}

// Health checks the plugin's probe: one GET <API root>/system/status with
// the key; a refused key names the key's variable, a port nothing listens on
// the URL's, and neither quotes the key.
func Health(t *testing.T, name string, build Build) {
	t.Helper()
	service := strings.ToUpper(name[:1]) + name[1:]
	prefix := plugins.EnvPrefix(name)
	probe := "GET " + arr.API(service) + "/system/status"
	status := Reply{Body: `{"appName":"` + service + `","instanceName":"` + service + `","version":"5.14.0.9383","urlBase":""}`}
	cases := []struct {
		what  string
		reply *Reply // nil: nothing listens
		want  string // in the problem; "": healthy
	}{
		{"answers", &status, ""},
		{"401", &Reply{Status: 401}, service + " refused the credentials (401); check " + prefix + "API_KEY"},
		{"403", &Reply{Status: 403}, service + " refused the credentials (403); check " + prefix + "API_KEY"},
		{"another app", &Reply{Status: 404, Body: `{"message":"NotFound"}`}, "check that " + prefix + "URL is the address of " + service},
		{"nothing listens", nil, service + " is unreachable at http://127.0.0.1:"},
	}
	for _, c := range cases {
		url := closedURL(t)
		var f *Fake
		if c.reply != nil {
			f = NewFake(t, map[string]Reply{probe: *c.reply})
			url = f.URL
		}
		s := Start(t, name, url, build, Env())
		if d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{}); err != nil || !d.HasHealth {
			t.Errorf("%s: has_health not declared (%v)", c.what, err)
		}
		r, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
		switch {
		case err != nil:
			t.Errorf("%s: %v", c.what, err)
		case r.Ok != (c.want == "") || !strings.Contains(r.Problem, c.want) || strings.Contains(r.Problem, APIKey):
			t.Errorf("%s: ok %v, problem %q; want %q", c.what, r.Ok, r.Problem, c.want)
		case f != nil:
			f.Expect(t, probe)
		}
	}
}

// URLCredentials checks that credentials written into the plugin's URL
// setting itself (an ?apikey=, a user's password) never reach the tool error
// the model reads, nor the probe's reason, however the service fails: it is
// unreachable, or too slow.
func URLCredentials(t *testing.T, name string, build Build, tool, args string) {
	t.Helper()
	const pass, key = "url-pass-71c2", "url-apikey-93fd"
	service := strings.ToUpper(name[:1]) + name[1:]
	closed := strings.TrimPrefix(closedURL(t), "http://")
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer slow.Close()
	slowHost := strings.TrimPrefix(slow.URL, "http://")

	tests := []struct{ name, url, want string }{
		{"unreachable, key", "http://" + closed + "/?apikey=" + key,
			service + " is unreachable at http://" + closed + "?apikey=*** ("},
		{"unreachable, password", "http://" + name + ":" + pass + "@" + closed + "/" + name + "?apikey=" + key,
			service + " is unreachable at http://" + name + ":***@" + closed + "/" + name + "?apikey=*** ("},
		{"timeout", "http://" + name + ":" + pass + "@" + slowHost + "/?api_key=" + key,
			service + " did not answer within 100ms at http://" + name + ":***@" + slowHost + "?api_key=***"},
	}
	env := Env()
	env.Timeout = 100 * time.Millisecond
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Start(t, name, tc.url, build, env)
			_, msg := Call(t, s, tool, args)
			h, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for what, text := range map[string]string{"tool error": msg, "probe": h.Problem} {
				if strings.Contains(text, key) || strings.Contains(text, pass) || !strings.Contains(text, tc.want) {
					t.Errorf("%s: %q\nwant it to contain %q and no credential", what, text, tc.want)
				}
			}
		})
	}
}

// Deadline checks that a call ends with the call's own deadline when the
// service is slower than it: the host, not the tool, reports that.
func Deadline(t *testing.T, name string, build Build, tool, args string) {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(ts.Close)
	s := Start(t, name, ts.URL, build, Env())
	began := time.Now()
	r, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: tool, Args: []byte(args), TimeoutMs: 100})
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") || time.Since(began) > time.Second {
		t.Errorf("%s past its deadline: %v, %v after %v", tool, r, err, time.Since(began))
	}
}

func answer(status int, retryAfter, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// closedURL is the address of a port nothing listens on any more.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// Merge is the JSON object obj with the fields in set on top: what an add
// should post, from the lookup result it was given.
func Merge(t *testing.T, obj string, set map[string]any) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(obj), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Fixture is the content of testdata/name.
func Fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// AddCase is one call of an add tool and what it should do.
type AddCase struct {
	Name     string
	Args     string
	Replies  map[string]Reply // on top of the base replies
	Requests []string         // as Expect takes them
	Body     string           // the JSON the last request (the POST) carried
	Result   string           // JSON
	Err      string           // the whole error, when it fails
}

// Adds runs each case against a fake answering base and the case's replies.
func Adds(t *testing.T, name, tool string, build Build, base map[string]Reply, cases []AddCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			replies := maps.Clone(base)
			maps.Copy(replies, c.Replies)
			f := NewFake(t, replies)
			res, msg := Call(t, Start(t, name, f.URL, build, Env()), tool, c.Args)
			switch {
			case c.Err != "" && (msg != c.Err || res != ""):
				t.Errorf("error %q (result %s), want %q", msg, res, c.Err)
			case c.Err == "":
				JSONEqual(t, "result "+msg, res, c.Result)
			}
			got := f.Expect(t, c.Requests...)
			if c.Body != "" && len(got) > 0 {
				JSONEqual(t, "body", got[len(got)-1].Body, c.Body)
			}
		})
	}
}
