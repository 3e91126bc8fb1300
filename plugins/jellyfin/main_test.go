package main

import (
	"bytes"
	"context"
	"encoding/json"
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

const (
	apiKey    = "jf-test-key-5f0c2a9b7e"
	authValue = `MediaBrowser Token="jf-test-key-5f0c2a9b7e"`
	aliceID   = "38a5a5bb9a2e4c0b8e4a1f3e0f9c2d11"
	bobID     = "9c4e2f7b1d3a4e5f8a6b7c8d9e0f1a2b"
)

// request is what the fake server saw of one request.
type request struct {
	Method, Path string
	Query        url.Values
	Auth         string
	Body         string
}

// fake is a Jellyfin server answering "METHOD /path" routes and recording
// every request.
type fake struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []request
}

func newFake(t *testing.T, routes map[string]http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		body.ReadFrom(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, request{r.Method, r.URL.Path, r.URL.Query(), r.Header.Get("Authorization"), body.String()})
		f.mu.Unlock()
		for _, legacy := range []string{"X-Emby-Token", "X-Emby-Authorization", "X-MediaBrowser-Token"} {
			if r.Header.Get(legacy) != "" {
				t.Errorf("%s sent with %s", legacy, r.URL.Path)
			}
		}
		if r.URL.Query().Has("api_key") || r.URL.Query().Has("ApiKey") {
			t.Errorf("key sent in the query of %s", r.URL)
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
	return append([]request(nil), f.reqs...)
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
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(code)
		w.Write([]byte(body))
	}
}

func server(t *testing.T, base, user string, timeout time.Duration) pluginpb.PluginServer {
	t.Helper()
	t.Setenv("MMCP_PLUGIN_JELLYFIN_URL", base)
	t.Setenv("MMCP_PLUGIN_JELLYFIN_API_KEY", apiKey)
	t.Setenv("MMCP_PLUGIN_JELLYFIN_USER", user)
	return newPlugin(timeout).Server()
}

func call(t *testing.T, s pluginpb.PluginServer, tool, args string) (result, toolErr string) {
	t.Helper()
	r, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: tool, Args: []byte(args)})
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	if strings.Contains(string(r.Result)+r.Error, apiKey) {
		t.Errorf("%s: the API key leaked: %s %s", tool, r.Result, r.Error)
	}
	return string(r.Result), r.Error
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

func wantRequests(t *testing.T, f *fake, want ...request) {
	t.Helper()
	got := f.requests()
	for i := range want {
		if want[i].Auth == "" {
			want[i].Auth = authValue
		}
		if want[i].Query == nil {
			want[i].Query = url.Values{}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests:\n got %+v\nwant %+v", got, want)
	}
}

var usersRequest = request{Method: "GET", Path: "/Users"}

func TestDescribe(t *testing.T) {
	d, err := server(t, "http://jellyfin:8096", "", time.Second).Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "jellyfin" || d.Version != "1.0.0" || len(d.SettingProblems) != 0 {
		t.Errorf("describe: %v", d)
	}
	var names []string
	for _, tl := range d.Tools {
		names = append(names, tl.Name)
		if tl.NeedsApproval {
			t.Errorf("%s needs approval; it only reads", tl.Name)
		}
	}
	if want := []string{"jellyfin_search", "jellyfin_latest", "jellyfin_now_playing"}; !reflect.DeepEqual(names, want) {
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
		!reflect.DeepEqual(search.Properties["type"].Enum, []string{"movie", "series", "episode", "album"}) {
		t.Errorf("search schema: %s", d.Tools[0].ArgsSchema)
	}
	if s := string(d.Tools[1].ArgsSchema); !strings.Contains(s, `"maximum":30`) || !strings.Contains(s, `"minimum":1`) || strings.Contains(s, `"required"`) {
		t.Errorf("latest schema: %s", s)
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
	want := []setting{{"URL", true, false}, {"API_KEY", true, true}, {"USER", false, false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("settings %+v, want %+v", got, want)
	}
	if len(d.Contexts) != 1 || d.Contexts[0].Key != "now_playing" {
		t.Errorf("contexts: %v", d.Contexts)
	}
}

func TestMissingSettings(t *testing.T) {
	t.Setenv("MMCP_PLUGIN_JELLYFIN_URL", "")
	t.Setenv("MMCP_PLUGIN_JELLYFIN_API_KEY", "")
	s := newPlugin(time.Second).Server()
	d, _ := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	want := []string{"MMCP_PLUGIN_JELLYFIN_URL is required", "MMCP_PLUGIN_JELLYFIN_API_KEY is required"}
	if !reflect.DeepEqual(d.SettingProblems, want) {
		t.Errorf("problems %q, want %q", d.SettingProblems, want)
	}
	if _, e := call(t, s, "jellyfin_now_playing", `{}`); !strings.Contains(e, "MMCP_PLUGIN_JELLYFIN_URL is required") {
		t.Errorf("standby error %q", e)
	}
	if _, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "now_playing"}); err == nil {
		t.Error("context without settings: no error")
	}
}

func TestBadURL(t *testing.T) {
	s := server(t, "jellyfin.lan:8096", "", time.Second)
	_, e := call(t, s, "jellyfin_latest", `{}`)
	want := `MMCP_PLUGIN_JELLYFIN_URL: "jellyfin.lan:8096" is not an http(s) URL`
	if !strings.HasSuffix(e, want) {
		t.Errorf("error %q, want it to end with %q", e, want)
	}
	// The daemon learns it from Describe and puts the plugin on standby.
	if d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{}); err != nil || !slices.Contains(d.SettingProblems, want) {
		t.Errorf("setting problems %q (%v)", d.GetSettingProblems(), err)
	}
}

func TestSearch(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /Users": fixture(t, "users.json"),
		"GET /Items": fixture(t, "search.json"),
	})
	s := server(t, f.URL, "", time.Second)
	// No USER: the first enabled administrator, alice (old-admin is disabled).
	want := compact(t, `{"user":"alice","total":14,"items":[
		{"title":"Dune","type":"movie","year":2021,"played":true},
		{"title":"Dune: Part Two","type":"movie","year":2024,"played":false,"watched_percent":37},
		{"title":"Dune: Prophecy","type":"series","year":2024,"played":false,"unplayed_episodes":4},
		{"title":"The Hidden Hand","type":"episode","year":2024,"series":"Dune: Prophecy","episode":"S01E01","played":true},
		{"title":"Dune (Original Motion Picture Soundtrack)","type":"album","year":2021,"artist":"Hans Zimmer","played":false}
	],"more":9}`)
	for range 2 {
		if r, e := call(t, s, "jellyfin_search", `{"query":" dune "}`); r != want || e != "" {
			t.Errorf("search: %s %q\nwant %s", r, e, want)
		}
	}
	items := request{Method: "GET", Path: "/Items", Query: url.Values{
		"userId":           {aliceID},
		"searchTerm":       {"dune"},
		"recursive":        {"true"},
		"includeItemTypes": {"Movie,Series,Episode,MusicAlbum"},
		"limit":            {"10"},
		"enableImages":     {"false"},
	}}
	// The user is looked up once.
	wantRequests(t, f, usersRequest, items, items)
}

func TestSearchTypeAndUser(t *testing.T) {
	for typ, jfType := range map[string]string{"movie": "Movie", "series": "Series", "episode": "Episode", "album": "MusicAlbum"} {
		f := newFake(t, map[string]http.HandlerFunc{
			"GET /Users": fixture(t, "users.json"),
			"GET /Items": reply(200, `{"Items":[],"TotalRecordCount":0,"StartIndex":0}`),
		})
		s := server(t, f.URL, "bob", time.Second) // names match whatever their case
		r, e := call(t, s, "jellyfin_search", `{"query":"Severance","type":"`+typ+`"}`)
		if want := `{"user":"Bob","total":0,"items":[]}`; r != want || e != "" {
			t.Errorf("%s: %s %q, want %s", typ, r, e, want)
		}
		wantRequests(t, f, usersRequest, request{Method: "GET", Path: "/Items", Query: url.Values{
			"userId": {bobID}, "searchTerm": {"Severance"}, "recursive": {"true"},
			"includeItemTypes": {jfType}, "limit": {"10"}, "enableImages": {"false"},
		}})
	}
}

func TestSearchEmptyQuery(t *testing.T) {
	f := newFake(t, nil)
	s := server(t, f.URL, "", time.Second)
	for _, args := range []string{`{"query":"  "}`, `{"query":""}`, `{}`} {
		if _, e := call(t, s, "jellyfin_search", args); e == "" {
			t.Errorf("%s: no error", args)
		}
	}
	wantRequests(t, f)
}

func TestUnknownUser(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /Users": fixture(t, "users.json")})
	s := server(t, f.URL, "carol", time.Second)
	_, e := call(t, s, "jellyfin_latest", `{}`)
	want := `Jellyfin has no user named "carol"; check MMCP_PLUGIN_JELLYFIN_USER (its users: kids, old-admin, alice, Bob)`
	if e != want {
		t.Errorf("error %q\nwant %q", e, want)
	}
}

func TestPickUser(t *testing.T) {
	u := func(name string, admin, disabled bool) user {
		var x user
		x.Name, x.ID, x.Policy.IsAdministrator, x.Policy.IsDisabled = name, "id-"+name, admin, disabled
		return x
	}
	cases := []struct {
		users []user
		want  string
	}{
		{[]user{u("a", false, false), u("b", true, false)}, "b"},
		{[]user{u("a", true, true), u("b", false, false), u("c", false, false)}, "b"},
		{[]user{u("a", true, true)}, ""},
		{nil, ""},
	}
	for _, c := range cases {
		got, err := pickUser(c.users, "")
		switch {
		case c.want == "" && (err == nil || !strings.Contains(err.Error(), "no enabled user")):
			t.Errorf("%v: %v %v, want an error", c.users, got, err)
		case c.want != "" && (err != nil || got.Name != c.want):
			t.Errorf("%v: %v %v, want %s", c.users, got, err, c.want)
		}
	}
}

func TestLatest(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /Users":        fixture(t, "users.json"),
		"GET /Items/Latest": fixture(t, "latest.json"),
	})
	s := server(t, f.URL, "", time.Second)
	r, e := call(t, s, "jellyfin_latest", `{}`)
	want := compact(t, `{"user":"alice","items":[
		{"title":"Severance","type":"series","year":2022,"new_episodes":3,"added":"2025-01-18"},
		{"title":"Conclave","type":"movie","year":2024,"added":"2025-01-17"},
		{"title":"The Last of Us: Part II","type":"episode","year":2025,"series":"The Last of Us","episode":"S02E07","added":"2025-01-16"},
		{"title":"GNX","type":"album","year":2024,"artist":"Kendrick Lamar","added":"2025-01-15"}
	]}`)
	if r != want || e != "" {
		t.Errorf("latest: %s %q\nwant %s", r, e, want)
	}
	// A server that answers more than asked for is cut to the limit.
	r, e = call(t, s, "jellyfin_latest", `{"limit":2}`)
	want = compact(t, `{"user":"alice","items":[
		{"title":"Severance","type":"series","year":2022,"new_episodes":3,"added":"2025-01-18"},
		{"title":"Conclave","type":"movie","year":2024,"added":"2025-01-17"}
	]}`)
	if r != want || e != "" {
		t.Errorf("latest 2: %s %q\nwant %s", r, e, want)
	}
	latest := func(limit string) request {
		return request{Method: "GET", Path: "/Items/Latest", Query: url.Values{
			"userId": {aliceID}, "limit": {limit}, "fields": {"DateCreated"}, "enableImages": {"false"},
		}}
	}
	wantRequests(t, f, usersRequest, latest("10"), latest("2"))

	for _, bad := range []string{`{"limit":0}`, `{"limit":31}`, `{"limit":"5"}`} {
		if _, e := call(t, s, "jellyfin_latest", bad); !strings.HasPrefix(e, "invalid arguments") {
			t.Errorf("%s: %q", bad, e)
		}
	}
}

func TestNowPlaying(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /Sessions": fixture(t, "sessions.json")})
	s := server(t, f.URL, "", time.Second)
	r, e := call(t, s, "jellyfin_now_playing", `{}`)
	// Bob's Firefox session is open but plays nothing.
	want := compact(t, `{"count":3,"sessions":[
		{"user":"alice","title":"Dune","type":"movie","year":2021,"device":"Living Room TV","client":"Jellyfin Android TV","progress_percent":42,"state":"playing"},
		{"user":"Bob","title":"Long Long Time","type":"episode","year":2023,"series":"The Last of Us","episode":"S01E03","device":"Bob's iPhone","client":"Jellyfin iOS","progress_percent":70,"state":"paused"},
		{"user":"kids","title":"Let It Go","type":"song","year":2013,"artist":"Idina Menzel","device":"Kitchen Tablet","client":"Finamp","progress_percent":27,"state":"playing"}
	]}`)
	if r != want || e != "" {
		t.Errorf("now playing: %s %q\nwant %s", r, e, want)
	}
	c, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "now_playing"})
	wantLine := `alice is watching Dune (2021) on Living Room TV, 42%; Bob paused The Last of Us S01E03 "Long Long Time" on Bob's iPhone at 70%; kids is listening to Let It Go by Idina Menzel on Kitchen Tablet, 27%`
	if err != nil || c.Text != wantLine {
		t.Errorf("context: %v %v\nwant %q", c, err, wantLine)
	}
	// Sessions need no user: /Users is never asked.
	sessions := request{Method: "GET", Path: "/Sessions"}
	wantRequests(t, f, sessions, sessions)
}

func TestNobodyPlaying(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /Sessions": reply(200, `[{"UserName":"alice","Client":"Jellyfin Web","DeviceName":"Chrome","PlayState":{"CanSeek":false,"IsPaused":false}}]`)})
	s := server(t, f.URL, "", time.Second)
	if r, e := call(t, s, "jellyfin_now_playing", `{}`); r != `{"count":0,"sessions":[]}` || e != "" {
		t.Errorf("now playing: %s %q", r, e)
	}
	if c, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "now_playing"}); err != nil || c.Text != "nobody is watching" {
		t.Errorf("context: %v %v", c, err)
	}
}

// A busy server: the tool lists ten, the context line three.
func TestManyPlaying(t *testing.T) {
	var sessions []string
	for i := range 12 {
		sessions = append(sessions, `{"UserName":"u`+string(rune('a'+i))+`","DeviceName":"TV","PlayState":{"PositionTicks":0},"NowPlayingItem":{"Name":"Film","Type":"Movie","ProductionYear":1999}}`)
	}
	f := newFake(t, map[string]http.HandlerFunc{"GET /Sessions": reply(200, "["+strings.Join(sessions, ",")+"]")})
	s := server(t, f.URL, "", time.Second)
	r, _ := call(t, s, "jellyfin_now_playing", `{}`)
	var got nowPlayingResult
	if err := json.Unmarshal([]byte(r), &got); err != nil || got.Count != 12 || len(got.Sessions) != 10 || got.More != 2 {
		t.Errorf("now playing: %s", r)
	}
	if got.Sessions[0].Progress != nil {
		t.Errorf("a film without a runtime has no progress: %s", r)
	}
	c, _ := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "now_playing"})
	want := "ua is watching Film (1999) on TV; ub is watching Film (1999) on TV; uc is watching Film (1999) on TV; and 9 more"
	if c.GetText() != want {
		t.Errorf("context %q\nwant %q", c.GetText(), want)
	}
}

func TestBasePath(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /jellyfin/Sessions": reply(200, `[]`)})
	s := server(t, f.URL+"/jellyfin/", "", time.Second)
	if _, e := call(t, s, "jellyfin_now_playing", `{}`); e != "" {
		t.Error(e)
	}
	wantRequests(t, f, request{Method: "GET", Path: "/jellyfin/Sessions"})
}

func TestErrors(t *testing.T) {
	problem := `{"type":"https://tools.ietf.org/html/rfc9110#section-15.6.1","title":"An error occurred while processing your request.","status":500,"traceId":"00-4b5c-01"}`
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"401", reply(401, ""), "Jellyfin refused the credentials (401); check MMCP_PLUGIN_JELLYFIN_API_KEY"},
		{"403", reply(403, ""), "Jellyfin refused the credentials (403); check MMCP_PLUGIN_JELLYFIN_API_KEY"},
		{"404", reply(404, ""), "Jellyfin: not found (GET /Sessions)"},
		{"429", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(429)
		}, "Jellyfin is rate limiting requests; try again in 7s"},
		{"500", reply(500, problem), "Jellyfin failed (500 Internal Server Error on GET /Sessions): An error occurred while processing your request."},
		{"malformed", reply(200, `[{"UserName":"alice","NowPlayingItem":`), "Jellyfin answered GET /Sessions with something that is not the expected JSON"},
		{"wrong shape", reply(200, `{"Items":[]}`), "Jellyfin answered GET /Sessions with something that is not the expected JSON"},
	}
	for _, c := range cases {
		f := newFake(t, map[string]http.HandlerFunc{"GET /Sessions": c.handler})
		s := server(t, f.URL, "", time.Second)
		r, e := call(t, s, "jellyfin_now_playing", `{}`)
		if !strings.HasPrefix(e, c.want) || r != "" {
			t.Errorf("%s: %q %q\nwant %q", c.name, r, e, c.want)
		}
		if _, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "now_playing"}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: context error %v", c.name, err)
		}
	}
}

// A failed user lookup is not remembered: the next call asks again.
func TestUserLookupRetried(t *testing.T) {
	var n int
	var mu sync.Mutex
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /Users": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			n++
			first := n == 1
			mu.Unlock()
			if first {
				reply(401, "")(w, r)
				return
			}
			fixture(t, "users.json")(w, r)
		},
		"GET /Items/Latest": reply(200, `[]`),
	})
	s := server(t, f.URL, "", time.Second)
	if _, e := call(t, s, "jellyfin_latest", `{}`); !strings.Contains(e, "check MMCP_PLUGIN_JELLYFIN_API_KEY") {
		t.Errorf("first: %q", e)
	}
	if r, e := call(t, s, "jellyfin_latest", `{}`); r != `{"user":"alice","items":[]}` || e != "" {
		t.Errorf("second: %s %q", r, e)
	}
}

func TestSlowServer(t *testing.T) {
	release := make(chan struct{})
	f := newFake(t, map[string]http.HandlerFunc{"GET /Sessions": func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}})
	defer close(release) // before f.Close, which waits for handlers

	// The client's own timeout: a tool error naming the server.
	s := server(t, f.URL, "", 100*time.Millisecond)
	start := time.Now()
	_, e := call(t, s, "jellyfin_now_playing", `{}`)
	if want := "Jellyfin did not answer within 100ms at " + f.URL; !strings.HasPrefix(e, want) {
		t.Errorf("error %q, want %q", e, want)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}

	// The call's deadline, shorter than the client's: the host's timeout.
	s = server(t, f.URL, "", 15*time.Second)
	_, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: "jellyfin_now_playing", Args: []byte(`{}`), TimeoutMs: 100})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call past its deadline: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	f := newFake(t, nil)
	base := f.URL
	f.Close()
	s := server(t, base, "", time.Second)
	for tool, args := range map[string]string{"jellyfin_search": `{"query":"dune"}`, "jellyfin_latest": `{}`, "jellyfin_now_playing": `{}`} {
		_, e := call(t, s, tool, args)
		if !strings.HasPrefix(e, "Jellyfin is unreachable at "+base) || !strings.Contains(e, "); check MMCP_PLUGIN_JELLYFIN_URL") {
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
		pos, run int64
		want     int
	}{{0, 100, 0}, {50, 100, 50}, {995, 1000, 100}, {150, 100, 100}, {-5, 100, 0}, {10, 0, -1}} {
		if got := percent(c.pos, c.run); got != c.want {
			t.Errorf("percent(%d, %d) = %d, want %d", c.pos, c.run, got, c.want)
		}
	}
	for ts, want := range map[string]string{"2024-03-09T18:22:01.0000000Z": "2024-03-09", "2024-03-09T23:59:59+01:00": "2024-03-09", "": "", "0001-01-01T00:00:00.0000000Z": "", "not a date": ""} {
		if got := dateOnly(ts); got != want {
			t.Errorf("dateOnly(%q) = %q, want %q", ts, got, want)
		}
	}
}
