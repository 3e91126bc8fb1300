package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// token is the X-Plex-Token the tests configure; no output may quote it.
const token = "plex-test-token-Zx81qQ"

// request is what the fake server saw of one request.
type request struct {
	Method, Path string
	Query        url.Values
	Token        string
}

// fake is a Plex Media Server answering "METHOD /path" routes and recording
// every request. It fails the test on any request that does not carry the
// headers Plex expects, or that puts the token in the query.
type fake struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []request
}

func newFake(t *testing.T, routes map[string]http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.reqs = append(f.reqs, request{r.Method, r.URL.Path, r.URL.Query(), r.Header.Get("X-Plex-Token")})
		f.mu.Unlock()
		for h, want := range map[string]string{
			"Accept":                   "application/json",
			"X-Plex-Client-Identifier": "mmcpd-plugin-plex",
			"X-Plex-Product":           "mmcpd",
			"X-Plex-Version":           version,
		} {
			if got := r.Header.Get(h); got != want {
				t.Errorf("%s %s: %s %q, want %q", r.Method, r.URL.Path, h, got, want)
			}
		}
		if strings.Contains(strings.ToLower(r.URL.RawQuery), "token") {
			t.Errorf("the token travels in the query: %s", r.URL)
		}
		h, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			http.NotFound(w, r)
			return
		}
		h(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fake) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// fixture answers with a file of testdata.
func fixture(t *testing.T, name string) http.HandlerFunc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return reply(http.StatusOK, string(b))
}

func reply(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// paris is where the tests tell dates: a film added at 23:59 UTC was added
// the next day there.
var paris = func() *time.Location {
	z, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		panic(err)
	}
	return z
}()

func server(t *testing.T, base string, timeout time.Duration) pluginpb.PluginServer {
	t.Helper()
	t.Setenv("MMCP_PLUGIN_PLEX_URL", base)
	t.Setenv("MMCP_PLUGIN_PLEX_TOKEN", token)
	return newPlugin(timeout, paris).Server()
}

func call(t *testing.T, s pluginpb.PluginServer, tool, args string) (result, toolErr string) {
	t.Helper()
	r, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: tool, Args: []byte(args)})
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	if strings.Contains(string(r.Result)+r.Error, token) {
		t.Errorf("%s: the token leaked: %s %s", tool, r.Result, r.Error)
	}
	return string(r.Result), r.Error
}

func contextLine(t *testing.T, s pluginpb.PluginServer) (string, error) {
	t.Helper()
	c, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "now_playing"})
	if strings.Contains(c.GetText(), token) || (err != nil && strings.Contains(err.Error(), token)) {
		t.Errorf("the token leaked into the context: %q %v", c.GetText(), err)
	}
	return c.GetText(), err
}

// compact is want with the whitespace JSON ignores taken out.
func compact(t *testing.T, want string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(want)); err != nil {
		t.Fatalf("bad expected JSON: %v", err)
	}
	return b.String()
}

// wantRequests checks the requests the fake got, each with the token.
func wantRequests(t *testing.T, f *fake, want ...request) {
	t.Helper()
	for i := range want {
		want[i].Token = token
		if want[i].Query == nil {
			want[i].Query = url.Values{}
		}
	}
	if got := f.requests(); !reflect.DeepEqual(got, want) {
		t.Errorf("requests:\n got %+v\nwant %+v", got, want)
	}
}

func TestDescribe(t *testing.T) {
	d, err := server(t, "http://plex:32400", time.Second).Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "plex" || d.Version != "1.0.0" || len(d.SettingProblems) != 0 || !d.HasHealth {
		t.Errorf("describe: %v", d)
	}
	var names []string
	for _, tl := range d.Tools {
		names = append(names, tl.Name)
		if tl.NeedsApproval {
			t.Errorf("%s needs approval; it only reads", tl.Name)
		}
		if len(tl.Description) > 400 || len(tl.ArgsSchema) > 2048 {
			t.Errorf("%s: description of %d characters, schema of %d bytes", tl.Name, len(tl.Description), len(tl.ArgsSchema))
		}
	}
	if want := []string{"plex_search", "plex_recently_added", "plex_on_deck", "plex_now_playing"}; !reflect.DeepEqual(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
	var search struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(d.Tools[0].ArgsSchema, &search); err != nil ||
		!reflect.DeepEqual(search.Required, []string{"query"}) ||
		!reflect.DeepEqual(search.Properties["type"].Enum, searchKinds) {
		t.Errorf("search schema: %s", d.Tools[0].ArgsSchema)
	}
	type setting struct {
		Key              string
		Required, Secret bool
	}
	var got []setting
	for _, s := range d.Settings {
		got = append(got, setting{s.Key, s.Required, s.Secret})
		if s.Description == "" {
			t.Errorf("%s has no description", s.Key)
		}
	}
	if want := []setting{{"URL", true, false}, {"TOKEN", true, true}}; !reflect.DeepEqual(got, want) {
		t.Errorf("settings %+v, want %+v", got, want)
	}
	if len(d.Contexts) != 1 || d.Contexts[0].Key != "now_playing" {
		t.Errorf("contexts: %v", d.Contexts)
	}
}

func TestSettings(t *testing.T) {
	cases := []struct {
		name, url, token string
		want             []string
	}{
		{"none", "", "", []string{"MMCP_PLUGIN_PLEX_URL is required", "MMCP_PLUGIN_PLEX_TOKEN is required"}},
		{"blank token", "http://plex:32400", "   ", []string{"MMCP_PLUGIN_PLEX_TOKEN is required"}},
		{"not a URL", "plex.lan:32400", token, []string{`MMCP_PLUGIN_PLEX_URL: "plex.lan:32400" is not an http(s) URL`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("MMCP_PLUGIN_PLEX_URL", c.url)
			t.Setenv("MMCP_PLUGIN_PLEX_TOKEN", c.token)
			s := newPlugin(time.Second, paris).Server()
			d, _ := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
			if !reflect.DeepEqual(d.SettingProblems, c.want) {
				t.Errorf("problems %q, want %q", d.SettingProblems, c.want)
			}
			if _, e := call(t, s, "plex_now_playing", `{}`); !strings.Contains(e, c.want[0]) {
				t.Errorf("standby error %q", e)
			}
			if _, err := contextLine(t, s); err == nil {
				t.Error("context without usable settings: no error")
			}
			if h, err := s.Health(context.Background(), &pluginpb.HealthRequest{}); err != nil || h.Ok || !strings.Contains(h.Problem, c.want[0]) {
				t.Errorf("health %v %v", h, err)
			}
		})
	}
}

func TestSearch(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /hubs/search": fixture(t, "hubs_search.json")})
	s := server(t, f.URL, time.Second)
	// The actor and the collection are left out: they are not media.
	want := compact(t, `{"total":5,"items":[
		{"title":"Dune","type":"movie","year":2021,"library":"Films","watched":true},
		{"title":"Dune: Part Two","type":"movie","year":2024,"library":"Films","watched":false,"watched_percent":37},
		{"title":"Dune: Prophecy","type":"show","year":2024,"library":"TV Shows","watched":false,"unwatched_episodes":4},
		{"title":"The Hidden Hand","type":"episode","year":2024,"show":"Dune: Prophecy","episode":"S01E01","library":"TV Shows","watched":true},
		{"title":"Dune (Original Motion Picture Soundtrack)","type":"album","year":2021,"artist":"Hans Zimmer","library":"Music"}
	]}`)
	if r, e := call(t, s, "plex_search", `{"query":" dune "}`); r != want || e != "" {
		t.Errorf("search: %s %q\nwant %s", r, e, want)
	}
	wantRequests(t, f, request{Method: "GET", Path: "/hubs/search", Query: url.Values{"query": {"dune"}, "limit": {"10"}}})
}

func TestSearchType(t *testing.T) {
	cases := []struct{ typ, want string }{
		{"episode", `{"total":1,"items":[{"title":"The Hidden Hand","type":"episode","year":2024,"show":"Dune: Prophecy","episode":"S01E01","library":"TV Shows","watched":true}]}`},
		{"album", `{"total":1,"items":[{"title":"Dune (Original Motion Picture Soundtrack)","type":"album","year":2021,"artist":"Hans Zimmer","library":"Music"}]}`},
		{"track", `{"total":0,"items":[]}`},
	}
	for _, c := range cases {
		f := newFake(t, map[string]http.HandlerFunc{"GET /hubs/search": fixture(t, "hubs_search.json")})
		s := server(t, f.URL, time.Second)
		if r, e := call(t, s, "plex_search", `{"query":"Dune & Co","type":"`+c.typ+`"}`); r != c.want || e != "" {
			t.Errorf("%s: %s %q\nwant %s", c.typ, r, e, c.want)
		}
		wantRequests(t, f, request{Method: "GET", Path: "/hubs/search", Query: url.Values{"query": {"Dune & Co"}, "limit": {"10"}}})
	}
}

// Nothing on the server: what "is it on Plex?" hears when it is not.
func TestSearchNothing(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /hubs/search": reply(200, `{"MediaContainer":{"size":0,"Hub":[{"title":"Movies","type":"movie","hubIdentifier":"movie","size":0,"more":false}]}}`)})
	s := server(t, f.URL, time.Second)
	if r, e := call(t, s, "plex_search", `{"query":"Dune"}`); r != `{"total":0,"items":[]}` || e != "" {
		t.Errorf("search: %s %q", r, e)
	}
}

// Many matches: ten listed, the rest counted.
func TestSearchMore(t *testing.T) {
	var items []string
	for i := range 14 {
		items = append(items, `{"type":"movie","title":"Film `+string(rune('A'+i))+`","year":2000}`)
	}
	f := newFake(t, map[string]http.HandlerFunc{"GET /hubs/search": reply(200, `{"MediaContainer":{"Hub":[{"type":"movie","Metadata":[`+strings.Join(items, ",")+`]}]}}`)})
	r, _ := call(t, server(t, f.URL, time.Second), "plex_search", `{"query":"film"}`)
	var got searchResult
	if err := json.Unmarshal([]byte(r), &got); err != nil || got.Total != 14 || len(got.Items) != 10 || got.More != 4 || got.Items[9].Title != "Film J" {
		t.Errorf("search: %s", r)
	}
}

func TestSearchEmptyQuery(t *testing.T) {
	f := newFake(t, nil)
	s := server(t, f.URL, time.Second)
	for _, args := range []string{`{"query":"  "}`, `{"query":""}`, `{}`, `{"query":"dune","type":"person"}`} {
		if _, e := call(t, s, "plex_search", args); e == "" {
			t.Errorf("%s: no error", args)
		}
	}
	wantRequests(t, f)
}

func TestRecentlyAdded(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /library/recentlyAdded": fixture(t, "recently_added.json")})
	s := server(t, f.URL, time.Second)
	// Wallace & Gromit came at 23:59:59 UTC on the 14th: the 15th in Paris.
	all := compact(t, `{"items":[
		{"title":"Season 2","type":"season","show":"Severance","library":"TV Shows","added":"2025-01-18"},
		{"title":"Conclave","type":"movie","year":2024,"library":"Films","added":"2025-01-17"},
		{"title":"GNX","type":"album","year":2024,"artist":"Kendrick Lamar","library":"Music","added":"2025-01-15"},
		{"title":"Wallace & Gromit: Vengeance Most Fowl","type":"movie","year":2024,"library":"Films","added":"2025-01-15"}
	]}`)
	cases := []struct {
		args, want string
		query      url.Values
	}{
		{`{}`, all, url.Values{"X-Plex-Container-Start": {"0"}, "X-Plex-Container-Size": {"10"}}},
		// A server that answers more than asked for is cut to the limit.
		{`{"limit":2}`, compact(t, `{"items":[
			{"title":"Season 2","type":"season","show":"Severance","library":"TV Shows","added":"2025-01-18"},
			{"title":"Conclave","type":"movie","year":2024,"library":"Films","added":"2025-01-17"}]}`),
			url.Values{"X-Plex-Container-Start": {"0"}, "X-Plex-Container-Size": {"2"}}},
		{`{"type":"movie","limit":30}`, all, url.Values{"X-Plex-Container-Start": {"0"}, "X-Plex-Container-Size": {"30"}, "type": {"1"}}},
		{`{"type":"show"}`, all, url.Values{"X-Plex-Container-Start": {"0"}, "X-Plex-Container-Size": {"10"}, "type": {"2"}}},
		{`{"type":"episode"}`, all, url.Values{"X-Plex-Container-Start": {"0"}, "X-Plex-Container-Size": {"10"}, "type": {"4"}}},
		{`{"type":"album"}`, all, url.Values{"X-Plex-Container-Start": {"0"}, "X-Plex-Container-Size": {"10"}, "type": {"9"}}},
	}
	var want []request
	for _, c := range cases {
		if r, e := call(t, s, "plex_recently_added", c.args); r != c.want || e != "" {
			t.Errorf("%s: %s %q\nwant %s", c.args, r, e, c.want)
		}
		want = append(want, request{Method: "GET", Path: "/library/recentlyAdded", Query: c.query})
	}
	wantRequests(t, f, want...)

	for _, bad := range []string{`{"limit":0}`, `{"limit":31}`, `{"limit":"5"}`, `{"type":"track"}`} {
		if _, e := call(t, s, "plex_recently_added", bad); !strings.HasPrefix(e, "invalid arguments") {
			t.Errorf("%s: %q", bad, e)
		}
	}
}

func TestOnDeck(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /library/onDeck": fixture(t, "on_deck.json")})
	s := server(t, f.URL, time.Second)
	// The next episode of a show being watched has not begun: no percent.
	want := compact(t, `{"items":[
		{"title":"Dune: Part Two","type":"movie","year":2024,"library":"Films","watched_percent":37},
		{"title":"Two Wolves","type":"episode","year":2024,"show":"Dune: Prophecy","episode":"S01E02","library":"TV Shows"},
		{"title":"Long, Long Time","type":"episode","year":2023,"show":"The Last of Us","episode":"S01E03","library":"TV Shows","watched_percent":70}
	]}`)
	if r, e := call(t, s, "plex_on_deck", `{}`); r != want || e != "" {
		t.Errorf("on deck: %s %q\nwant %s", r, e, want)
	}
	if r, e := call(t, s, "plex_on_deck", `{"limit":1}`); !strings.HasPrefix(r, `{"items":[{"title":"Dune: Part Two"`) || strings.Count(r, `"title"`) != 1 || e != "" {
		t.Errorf("on deck, 1: %s %q", r, e)
	}
	wantRequests(t, f,
		request{Method: "GET", Path: "/library/onDeck", Query: url.Values{"X-Plex-Container-Start": {"0"}, "X-Plex-Container-Size": {"10"}}},
		request{Method: "GET", Path: "/library/onDeck", Query: url.Values{"X-Plex-Container-Start": {"0"}, "X-Plex-Container-Size": {"1"}}})
}

func TestNowPlaying(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /status/sessions": fixture(t, "sessions.json")})
	s := server(t, f.URL, time.Second)
	want := compact(t, `{"count":3,"sessions":[
		{"user":"alice","title":"Dune","type":"movie","year":2021,"player":"Living Room TV","product":"Plex for Android (TV)","progress_percent":42,"state":"playing","stream":"transcode"},
		{"user":"Bob","title":"Long, Long Time","type":"episode","year":2023,"show":"The Last of Us","episode":"S01E03","player":"Bob's iPhone","product":"Plex for iOS","progress_percent":70,"state":"paused","stream":"direct stream"},
		{"user":"kids","title":"Let It Go","type":"track","artist":"Idina Menzel","player":"Kitchen Tablet","product":"Plexamp","progress_percent":27,"state":"playing","stream":"direct play"}
	]}`)
	if r, e := call(t, s, "plex_now_playing", `{}`); r != want || e != "" {
		t.Errorf("now playing: %s %q\nwant %s", r, e, want)
	}
	line, err := contextLine(t, s)
	wantLine := `alice is watching Dune (2021) on Living Room TV, 42%, transcoding; Bob paused The Last of Us S01E03 "Long, Long Time" on Bob's iPhone at 70%; kids is listening to Let It Go by Idina Menzel on Kitchen Tablet, 27%`
	if err != nil || line != wantLine {
		t.Errorf("context: %q %v\nwant %q", line, err, wantLine)
	}
	sessions := request{Method: "GET", Path: "/status/sessions"}
	wantRequests(t, f, sessions, sessions)
}

func TestNobodyPlaying(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /status/sessions": reply(200, `{"MediaContainer":{"size":0}}`)})
	s := server(t, f.URL, time.Second)
	if r, e := call(t, s, "plex_now_playing", `{}`); r != `{"count":0,"sessions":[]}` || e != "" {
		t.Errorf("now playing: %s %q", r, e)
	}
	if line, err := contextLine(t, s); err != nil || line != "nobody is watching" {
		t.Errorf("context: %q %v", line, err)
	}
}

// A busy server: the tool lists ten, the context line three.
func TestManyPlaying(t *testing.T) {
	var sessions []string
	for i := range 12 {
		sessions = append(sessions, `{"type":"movie","title":"Film","year":1999,"User":{"title":"u`+string(rune('a'+i))+`"},"Player":{"title":"TV","state":"playing"}}`)
	}
	f := newFake(t, map[string]http.HandlerFunc{"GET /status/sessions": reply(200, `{"MediaContainer":{"size":12,"Metadata":[`+strings.Join(sessions, ",")+`]}}`)})
	s := server(t, f.URL, time.Second)
	r, _ := call(t, s, "plex_now_playing", `{}`)
	var got nowPlayingResult
	if err := json.Unmarshal([]byte(r), &got); err != nil || got.Count != 12 || len(got.Sessions) != 10 || got.More != 2 {
		t.Errorf("now playing: %s", r)
	}
	if got.Sessions[0].Progress != nil {
		t.Errorf("a film without a duration has no progress: %s", r)
	}
	want := "ua is watching Film (1999) on TV; ub is watching Film (1999) on TV; uc is watching Film (1999) on TV; and 9 more"
	if line, _ := contextLine(t, s); line != want {
		t.Errorf("context %q\nwant %q", line, want)
	}
}

func TestBasePath(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /plex/status/sessions": reply(200, `{"MediaContainer":{"size":0}}`)})
	s := server(t, f.URL+"/plex/", time.Second)
	if _, e := call(t, s, "plex_now_playing", `{}`); e != "" {
		t.Error(e)
	}
	wantRequests(t, f, request{Method: "GET", Path: "/plex/status/sessions"})
}

func TestErrors(t *testing.T) {
	// What Plex answers a missing or wrong token: an HTML page.
	unauthorized := `<html><head><title>Unauthorized</title></head><body><h1>401 Unauthorized</h1></body></html>`
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"401", reply(401, unauthorized), "Plex refused the credentials (401); check MMCP_PLUGIN_PLEX_TOKEN"},
		{"403", reply(403, ""), "Plex refused the credentials (403); check MMCP_PLUGIN_PLEX_TOKEN"},
		{"404", reply(404, `<html><body>404 Not Found</body></html>`), "Plex: not found (GET /status/sessions): not found; check that MMCP_PLUGIN_PLEX_URL is the address of Plex Media Server, with its base path if it has one"},
		{"429", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(429)
		}, "Plex is rate limiting requests; try again in 7s"},
		{"500", reply(500, ""), "Plex failed (500 Internal Server Error on GET /status/sessions)"},
		{"malformed", reply(200, `{"MediaContainer":{"Metadata":[{"title":`), "Plex answered GET /status/sessions with something that is not the expected JSON"},
		{"wrong shape", reply(200, `{"MediaContainer":{"Metadata":{"title":"Dune"}}}`), "Plex answered GET /status/sessions with something that is not the expected JSON"},
		// A proxy that drops the Accept header gets Plex's XML.
		{"XML", reply(200, `<?xml version="1.0" encoding="UTF-8"?><MediaContainer size="0"></MediaContainer>`), "Plex answered GET /status/sessions with something that is not the expected JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, map[string]http.HandlerFunc{"GET /status/sessions": c.handler})
			s := server(t, f.URL, time.Second)
			r, e := call(t, s, "plex_now_playing", `{}`)
			if !strings.HasPrefix(e, c.want) || r != "" || strings.Contains(e, "\n") {
				t.Errorf("%q %q\nwant %q", r, e, c.want)
			}
			if _, err := contextLine(t, s); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("context error %v", err)
			}
		})
	}
}

func TestSlowServer(t *testing.T) {
	release := make(chan struct{})
	f := newFake(t, map[string]http.HandlerFunc{"GET /library/onDeck": func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}})
	defer close(release) // before f.Close, which waits for handlers

	// The client's own timeout: a tool error naming the server.
	s := server(t, f.URL, 100*time.Millisecond)
	start := time.Now()
	_, e := call(t, s, "plex_on_deck", `{}`)
	if want := "Plex did not answer within 100ms at " + f.URL; !strings.HasPrefix(e, want) {
		t.Errorf("error %q, want %q", e, want)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}

	// The call's deadline, shorter than the client's: the host's timeout.
	s = server(t, f.URL, 15*time.Second)
	_, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: "plex_on_deck", Args: []byte(`{}`), TimeoutMs: 100})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call past its deadline: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	f := newFake(t, nil)
	base := f.URL
	f.Close()
	s := server(t, base, time.Second)
	for tool, args := range map[string]string{"plex_search": `{"query":"dune"}`, "plex_recently_added": `{}`, "plex_on_deck": `{}`, "plex_now_playing": `{}`} {
		_, e := call(t, s, tool, args)
		if !strings.HasPrefix(e, "Plex is unreachable at "+base) || !strings.Contains(e, "); check MMCP_PLUGIN_PLEX_URL") {
			t.Errorf("%s: %q", tool, e)
		}
	}
}

func TestHelpers(t *testing.T) {
	one, five := 1, 5
	for _, c := range []struct {
		s, e *int
		want string
	}{{&one, &five, "S01E05"}, {nil, &five, "E05"}, {&one, nil, ""}, {nil, nil, ""}} {
		if got := episodeCode(c.s, c.e); got != c.want {
			t.Errorf("episodeCode: %q, want %q", got, c.want)
		}
	}
	for _, c := range []struct {
		pos, dur int64
		want     int
	}{{0, 100, 0}, {50, 100, 50}, {995, 1000, 100}, {150, 100, 100}, {-5, 100, 0}, {10, 0, -1}} {
		if got := percent(c.pos, c.dur); got != c.want {
			t.Errorf("percent(%d, %d) = %d, want %d", c.pos, c.dur, got, c.want)
		}
	}
	for _, c := range []struct {
		t    *transcode
		want string
	}{
		{nil, "direct play"},
		{&transcode{VideoDecision: "copy", AudioDecision: "copy"}, "direct stream"},
		{&transcode{AudioDecision: "copy"}, "direct stream"},
		{&transcode{VideoDecision: "copy", AudioDecision: "transcode"}, "transcode"},
		{&transcode{VideoDecision: "transcode", AudioDecision: "copy"}, "transcode"},
	} {
		if got := stream(c.t); got != c.want {
			t.Errorf("stream(%+v) = %q, want %q", c.t, got, c.want)
		}
	}
	if got := day(0, paris); got != "" {
		t.Errorf("day(0) = %q", got)
	}
}
