package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
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

// apiKey is the key the tests configure; no output may quote it.
const apiKey = "MTczNzIxMjQwMDAwMGFiY2RlZjEyMzQ1Njc4OQ=="

// request is what the fake server saw of one request.
type request struct {
	Method string
	URI    string // path and query, exactly as sent
	APIKey string
	Body   string
}

// fake is a Jellyseerr answering "METHOD /path" routes and recording every
// request. Like Seerr's request validator, it refuses a query value with a
// reserved character or a "+" in it.
type fake struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []request
}

// reserved are the characters Seerr refuses unencoded in a query value.
const reserved = ":/?#[]@!$'()*+,;"

func newFake(t *testing.T, routes map[string]http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, request{r.Method, r.URL.RequestURI(), r.Header.Get("X-Api-Key"), string(body)})
		f.mu.Unlock()
		if r.Header.Get("Accept") != "application/json" || (len(body) > 0 && r.Header.Get("Content-Type") != "application/json") {
			t.Errorf("%s %s: Accept %q, Content-Type %q", r.Method, r.URL, r.Header.Get("Accept"), r.Header.Get("Content-Type"))
		}
		for _, kv := range strings.Split(r.URL.RawQuery, "&") {
			_, v, _ := strings.Cut(kv, "=")
			if strings.ContainsAny(v, reserved) {
				reply(400, `{"message":"Parameter 'query' must be url encoded. Its value may not contain reserved characters.","errors":[{"path":".query.query","message":"Parameter 'query' must be url encoded. Its value may not contain reserved characters."}]}`)(w, r)
				return
			}
		}
		h, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			reply(404, `{"message":"API Not Found"}`)(w, r)
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

func load(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fixture answers with a file of testdata.
func fixture(t *testing.T, name string) http.HandlerFunc {
	t.Helper()
	return reply(http.StatusOK, load(t, name))
}

func reply(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

func server(t *testing.T, base string, timeout time.Duration) pluginpb.PluginServer {
	t.Helper()
	t.Setenv("MMCP_PLUGIN_SEERR_URL", base)
	t.Setenv("MMCP_PLUGIN_SEERR_API_KEY", apiKey)
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

// jsonEqual checks that got and want are the same JSON value.
func jsonEqual(t *testing.T, what, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Errorf("%s: not JSON (%v): %q", what, err, got)
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

// wantRequests checks the requests the fake got (method and URI, in
// order), each with the key, and returns them for a look at their bodies.
func wantRequests(t *testing.T, f *fake, want ...string) []request {
	t.Helper()
	got := f.requests()
	var lines []string
	for _, r := range got {
		lines = append(lines, r.Method+" "+r.URI)
		if r.APIKey != apiKey {
			t.Errorf("%s %s: X-Api-Key %q", r.Method, r.URI, r.APIKey)
		}
	}
	if !slices.Equal(lines, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	return got
}

func TestDescribe(t *testing.T) {
	d, err := server(t, "http://jellyseerr:5055", time.Second).Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "seerr" || d.Version != "1.0.0" || len(d.SettingProblems) != 0 || !d.HasHealth || len(d.Contexts) != 0 {
		t.Errorf("describe: %v", d)
	}
	approval := map[string]bool{}
	var names []string
	for _, tl := range d.Tools {
		names = append(names, tl.Name)
		approval[tl.Name] = tl.NeedsApproval
		if len(tl.Description) > 400 || len(tl.ArgsSchema) > 2048 {
			t.Errorf("%s: description of %d characters, schema of %d bytes", tl.Name, len(tl.Description), len(tl.ArgsSchema))
		}
	}
	if want := []string{"seerr_search", "seerr_request", "seerr_requests"}; !reflect.DeepEqual(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
	// A request starts a download: the user says yes first.
	if want := map[string]bool{"seerr_search": false, "seerr_request": true, "seerr_requests": false}; !reflect.DeepEqual(approval, want) {
		t.Errorf("needs approval %v, want %v", approval, want)
	}
	var req struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(d.Tools[1].ArgsSchema, &req); err != nil ||
		!reflect.DeepEqual(req.Required, []string{"media_type", "tmdb_id"}) ||
		!reflect.DeepEqual(req.Properties["media_type"].Enum, []string{"movie", "tv"}) {
		t.Errorf("request schema: %s", d.Tools[1].ArgsSchema)
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
	if want := []setting{{"URL", true, false}, {"API_KEY", true, true}}; !reflect.DeepEqual(got, want) {
		t.Errorf("settings %+v, want %+v", got, want)
	}
}

func TestSettings(t *testing.T) {
	cases := []struct {
		name, url, key string
		want           []string
	}{
		{"none", "", "", []string{"MMCP_PLUGIN_SEERR_URL is required", "MMCP_PLUGIN_SEERR_API_KEY is required"}},
		{"blank key", "http://jellyseerr:5055", "  ", []string{"MMCP_PLUGIN_SEERR_API_KEY is required"}},
		{"not a URL", "jellyseerr:5055", apiKey, []string{`MMCP_PLUGIN_SEERR_URL: "jellyseerr:5055" is not an http(s) URL`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("MMCP_PLUGIN_SEERR_URL", c.url)
			t.Setenv("MMCP_PLUGIN_SEERR_API_KEY", c.key)
			s := newPlugin(time.Second).Server()
			d, _ := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
			if !reflect.DeepEqual(d.SettingProblems, c.want) {
				t.Errorf("problems %q, want %q", d.SettingProblems, c.want)
			}
			if _, e := call(t, s, "seerr_requests", `{}`); !strings.Contains(e, c.want[0]) {
				t.Errorf("standby error %q", e)
			}
			if h, err := s.Health(context.Background(), &pluginpb.HealthRequest{}); err != nil || h.Ok || !strings.Contains(h.Problem, c.want[0]) {
				t.Errorf("health %v %v", h, err)
			}
		})
	}
}

func TestSearch(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/search": fixture(t, "search_dune.json")})
	r, e := call(t, server(t, f.URL, time.Second), "seerr_search", `{"query":" dune "}`)
	// The person is left out: people cannot be requested.
	jsonEqual(t, "search "+e, r, `{"items":[
		{"title":"Dune","type":"movie","year":2021,"tmdb_id":438631,"status":"not requested",
		 "overview":"Paul Atreides, a brilliant and gifted young man born into a great destiny beyond his understanding, must travel to the most dangerous planet in the universe to ..."},
		{"title":"Dune: Part Two","type":"movie","year":2024,"tmdb_id":693134,"status":"available",
		 "overview":"Follow the mythic journey of Paul Atreides as he unites with Chani and the Fremen while on a path of revenge against the conspirators who destroyed his family."},
		{"title":"Dune: Prophecy","type":"tv","year":2024,"tmdb_id":90228,"status":"pending approval",
		 "overview":"Ten thousand years before the ascension of Paul Atreides, two Harkonnen sisters combat forces that threaten the future of humankind, and establish the fabled se..."},
		{"title":"Dune","type":"movie","year":1984,"tmdb_id":841,"status":"not requested","overview":"In the year 10,191, the most precious substance in the universe is the spice Melange."},
		{"title":"Frank Herbert's Dune","type":"tv","year":2000,"tmdb_id":2000,"status":"partially available"}]}`)
	wantRequests(t, f, "GET /api/v1/search?page=1&query=dune")
}

// Seerr refuses "+" for a space and any reserved character: the query is
// sent fully percent-encoded.
func TestSearchEncoding(t *testing.T) {
	cases := []struct{ query, uri string }{
		{"Dune: Part Two", "/api/v1/search?page=1&query=Dune%3A%20Part%20Two"},
		{"It's Always Sunny (2005)!", "/api/v1/search?page=1&query=It%27s%20Always%20Sunny%20%282005%29%21"},
		{"C++ & you", "/api/v1/search?page=1&query=C%2B%2B%20%26%20you"},
		{"Amélie", "/api/v1/search?page=1&query=Am%C3%A9lie"},
	}
	for _, c := range cases {
		f := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/search": reply(200, `{"page":1,"totalPages":0,"totalResults":0,"results":[]}`)})
		args, _ := json.Marshal(map[string]string{"query": c.query})
		if r, e := call(t, server(t, f.URL, time.Second), "seerr_search", string(args)); r != `{"items":[]}` || e != "" {
			t.Errorf("%q: %s %q", c.query, r, e)
		}
		wantRequests(t, f, "GET "+c.uri)
	}
}

// Many results: ten listed; more counts the rest of the page and the other
// pages.
func TestSearchMore(t *testing.T) {
	var items []string
	for i := range 14 {
		items = append(items, `{"id":`+string(rune('1'+i%9))+`,"mediaType":"movie","title":"Film","releaseDate":""}`)
	}
	f := newFake(t, map[string]http.HandlerFunc{"GET /api/v1/search": reply(200, `{"page":1,"totalPages":3,"totalResults":54,"results":[`+strings.Join(items, ",")+`]}`)})
	r, _ := call(t, server(t, f.URL, time.Second), "seerr_search", `{"query":"film"}`)
	var got searchResult
	if err := json.Unmarshal([]byte(r), &got); err != nil || len(got.Items) != 10 || got.More != 44 || got.Items[0].Year != 0 {
		t.Errorf("search: %s", r)
	}
}

func TestSearchEmptyQuery(t *testing.T) {
	f := newFake(t, nil)
	s := server(t, f.URL, time.Second)
	for _, args := range []string{`{"query":"  "}`, `{"query":""}`, `{}`} {
		if _, e := call(t, s, "seerr_search", args); e == "" {
			t.Errorf("%s: no error", args)
		}
	}
	wantRequests(t, f)
}

func TestRequest(t *testing.T) {
	const (
		movie = "GET /api/v1/movie/438631"
		tv    = "GET /api/v1/tv/90228"
		post  = "POST /api/v1/request"
	)
	available := strings.Replace(load(t, "movie_438631.json"), `"title": "Dune",`, `"title": "Dune", "mediaInfo": {"status": 5},`, 1)
	pending := strings.Replace(load(t, "movie_438631.json"), `"title": "Dune",`, `"title": "Dune", "mediaInfo": {"status": 2},`, 1)
	tvCreated := `{"id":15,"status":1,"type":"tv","is4k":false,"media":{"tmdbId":90228,"status":2},"seasons":[{"seasonNumber":1,"status":1}],"requestedBy":{"displayName":"alice"}}`
	cases := []struct {
		name, args string
		replies    map[string]http.HandlerFunc
		requests   []string
		body       string // of the POST, when there is one
		result     string
		err        string // the whole tool error
	}{
		{
			name: "film", args: `{"media_type":"movie","tmdb_id":438631}`,
			replies:  map[string]http.HandlerFunc{movie: fixture(t, "movie_438631.json"), post: reply(201, load(t, "request_created.json"))},
			requests: []string{movie, post}, body: `{"mediaType":"movie","mediaId":438631}`,
			result: `{"requested":"Dune (2021)","type":"movie","tmdb_id":438631,"request_id":12,"status":"approved"}`,
		},
		{
			name: "every season", args: `{"media_type":"tv","tmdb_id":90228}`,
			replies:  map[string]http.HandlerFunc{tv: fixture(t, "tv_90228.json"), post: reply(201, tvCreated)},
			requests: []string{tv, post}, body: `{"mediaType":"tv","mediaId":90228,"seasons":"all"}`,
			result: `{"requested":"Dune: Prophecy (2024)","type":"tv","tmdb_id":90228,"seasons":"all","request_id":15,"status":"pending approval"}`,
		},
		{
			name: "some seasons", args: `{"media_type":"tv","tmdb_id":90228,"seasons":[1,1,0]}`,
			replies:  map[string]http.HandlerFunc{tv: fixture(t, "tv_90228.json"), post: reply(201, tvCreated)},
			requests: []string{tv, post}, body: `{"mediaType":"tv","mediaId":90228,"seasons":[1,0]}`,
			result: `{"requested":"Dune: Prophecy (2024)","type":"tv","tmdb_id":90228,"seasons":[1,0],"request_id":15,"status":"pending approval"}`,
		},
		{
			name: "no such season", args: `{"media_type":"tv","tmdb_id":90228,"seasons":[1,3]}`,
			replies:  map[string]http.HandlerFunc{tv: fixture(t, "tv_90228.json")},
			requests: []string{tv},
			err:      "Dune: Prophecy (2024) has no season 3; its seasons: 0, 1",
		},
		{
			name: "seasons of a film", args: `{"media_type":"movie","tmdb_id":438631,"seasons":[1]}`,
			err: "seasons are for a series (media_type tv); a film is requested whole",
		},
		{
			name: "negative season", args: `{"media_type":"tv","tmdb_id":90228,"seasons":[-1]}`,
			err: "season -1: season numbers start at 0 (specials) and 1",
		},
		{
			name: "available", args: `{"media_type":"movie","tmdb_id":438631}`,
			replies:  map[string]http.HandlerFunc{movie: reply(200, available)},
			requests: []string{movie},
			err:      "Dune (2021) is already available",
		},
		{
			name: "pending", args: `{"media_type":"movie","tmdb_id":438631}`,
			replies:  map[string]http.HandlerFunc{movie: reply(200, pending)},
			requests: []string{movie},
			err:      "Dune (2021) is already requested (pending approval)",
		},
		{
			name: "requested meanwhile", args: `{"media_type":"movie","tmdb_id":438631}`,
			replies:  map[string]http.HandlerFunc{movie: fixture(t, "movie_438631.json"), post: reply(409, `{"message":"Request for this media already exists."}`)},
			requests: []string{movie, post}, body: `{"mediaType":"movie","mediaId":438631}`,
			err: "Dune (2021) is already requested",
		},
		{
			// The series is pending as a whole, but its seasons might not be:
			// Seerr is asked, and says there is nothing left.
			name: "nothing left", args: `{"media_type":"tv","tmdb_id":90228}`,
			replies:  map[string]http.HandlerFunc{tv: fixture(t, "tv_90228.json"), post: reply(202, `{"message":"No seasons available to request"}`)},
			requests: []string{tv, post}, body: `{"mediaType":"tv","mediaId":90228,"seasons":"all"}`,
			err: "Seerr made no request for Dune: Prophecy (2024): No seasons available to request",
		},
		{
			name: "unknown id", args: `{"media_type":"movie","tmdb_id":438631}`,
			replies:  map[string]http.HandlerFunc{movie: reply(500, `{"message":"Unable to retrieve movie."}`)},
			requests: []string{movie},
			err:      "Seerr found no film with TMDB id 438631 (or could not reach TMDB); check the id with seerr_search",
		},
		{
			name: "unknown series", args: `{"media_type":"tv","tmdb_id":90228}`,
			replies:  map[string]http.HandlerFunc{tv: reply(500, `{"message":"Unable to retrieve series."}`)},
			requests: []string{tv},
			err:      "Seerr found no series with TMDB id 90228 (or could not reach TMDB); check the id with seerr_search",
		},
		{
			name: "request fails", args: `{"media_type":"movie","tmdb_id":438631}`,
			replies:  map[string]http.HandlerFunc{movie: fixture(t, "movie_438631.json"), post: reply(500, `{"message":"SQLITE_BUSY: database is locked"}`)},
			requests: []string{movie, post}, body: `{"mediaType":"movie","mediaId":438631}`,
			err: "Seerr failed (500 Internal Server Error on POST /api/v1/request): SQLITE_BUSY: database is locked: service error",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, c.replies)
			r, e := call(t, server(t, f.URL, time.Second), "seerr_request", c.args)
			if c.err != "" && (e != c.err || r != "") {
				t.Errorf("error %q (result %s), want %q", e, r, c.err)
			}
			if c.err == "" {
				jsonEqual(t, "result "+e, r, c.result)
			}
			got := wantRequests(t, f, c.requests...)
			for _, req := range got {
				if req.Method == http.MethodPost {
					jsonEqual(t, "POST body", req.Body, c.body)
				} else if req.Body != "" {
					t.Errorf("%s %s with a body: %s", req.Method, req.URI, req.Body)
				}
			}
		})
	}
}

func TestRequests(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/request":      fixture(t, "requests.json"),
		"GET /api/v1/tv/90228":     fixture(t, "tv_90228.json"),
		"GET /api/v1/movie/693134": reply(200, `{"id":693134,"title":"Dune: Part Two","releaseDate":"2024-02-27","mediaInfo":{"status":5}}`),
	})
	r, e := call(t, server(t, f.URL, time.Second), "seerr_requests", `{}`)
	// The 4K request shows the 4K copy's state.
	jsonEqual(t, "requests "+e, r, `{"total":5,"items":[
		{"id":14,"title":"Dune: Prophecy (2024)","type":"tv","tmdb_id":90228,"seasons":[1],"status":"pending approval","media_status":"pending approval","requested_by":"bob","requested_on":"2025-01-18"},
		{"id":13,"title":"Dune: Part Two (2024)","type":"movie","tmdb_id":693134,"status":"approved","media_status":"available","requested_by":"alice","requested_on":"2024-05-02"},
		{"id":11,"title":"Dune: Part Two (2024)","type":"movie","tmdb_id":693134,"4k":true,"status":"approved","media_status":"processing","requested_by":"alice","requested_on":"2024-03-01"}
	],"more":2}`)
	// The list, then each title once, in any order.
	got := f.requests()
	var lines []string
	for _, r := range got {
		lines = append(lines, r.Method+" "+r.URI)
	}
	if len(lines) != 3 || lines[0] != "GET /api/v1/request?filter=all&skip=0&sort=added&take=10" {
		t.Fatalf("requests %q", lines)
	}
	slices.Sort(lines[1:])
	if want := []string{"GET /api/v1/movie/693134", "GET /api/v1/tv/90228"}; !slices.Equal(lines[1:], want) {
		t.Errorf("title requests %q, want %q", lines[1:], want)
	}
	for _, r := range got {
		if r.APIKey != apiKey {
			t.Errorf("%s without the key", r.URI)
		}
	}
}

func TestRequestsArgs(t *testing.T) {
	cases := []struct{ args, uri string }{
		{`{"filter":"pending"}`, "/api/v1/request?filter=pending&skip=0&sort=added&take=10"},
		{`{"filter":"available","sort":"modified","limit":20}`, "/api/v1/request?filter=available&skip=0&sort=modified&take=20"},
		{`{"limit":1}`, "/api/v1/request?filter=all&skip=0&sort=added&take=1"},
	}
	for _, c := range cases {
		f := newFake(t, map[string]http.HandlerFunc{
			"GET /api/v1/request": fixture(t, "requests.json"),
			// A title Seerr cannot give is left out; the id remains.
			"GET /api/v1/tv/90228":     reply(500, `{"message":"Unable to retrieve series."}`),
			"GET /api/v1/movie/693134": reply(500, `{"message":"Unable to retrieve movie."}`),
		})
		r, e := call(t, server(t, f.URL, time.Second), "seerr_requests", c.args)
		if c.args == `{"limit":1}` {
			// A server that answers more than asked for is cut to the limit.
			jsonEqual(t, "limit 1 "+e, r, `{"total":5,"items":[
				{"id":14,"type":"tv","tmdb_id":90228,"seasons":[1],"status":"pending approval","media_status":"pending approval","requested_by":"bob","requested_on":"2025-01-18"}],"more":4}`)
			wantRequests(t, f, "GET "+c.uri, "GET /api/v1/tv/90228")
			continue
		}
		if got := f.requests(); len(got) == 0 || got[0].URI != c.uri {
			t.Errorf("%s: asked %+v, want %s first", c.args, got, c.uri)
		}
	}
	for _, bad := range []string{`{"filter":"declined"}`, `{"sort":"title"}`, `{"limit":0}`, `{"limit":21}`} {
		if _, e := call(t, server(t, "http://seerr", time.Second), "seerr_requests", bad); !strings.HasPrefix(e, "invalid arguments") {
			t.Errorf("%s: %q", bad, e)
		}
	}
}

// TestFailures calls each tool against a Seerr that fails in each way it
// can, and checks the one-line error the model gets.
func TestFailures(t *testing.T) {
	calls := map[string]string{
		"seerr_search":   `{"query":"dune"}`,
		"seerr_request":  `{"media_type":"movie","tmdb_id":438631}`,
		"seerr_requests": `{}`,
	}
	cases := []struct {
		what    string
		handler http.HandlerFunc // nil: nothing listens
		want    []string
	}{
		{"401", reply(401, ""), []string{"Seerr refused the credentials (401); check MMCP_PLUGIN_SEERR_API_KEY"}},
		{"403", reply(403, `{"status":403,"error":"You do not have permission to access this endpoint"}`),
			[]string{"Seerr refused the credentials (403): You do not have permission to access this endpoint; check MMCP_PLUGIN_SEERR_API_KEY"}},
		{"404", reply(404, `<!DOCTYPE html><html><body>Cannot GET</body></html>`),
			[]string{"Seerr: not found (GET /api/v1/", "check that MMCP_PLUGIN_SEERR_URL is the address of Jellyseerr or Overseerr"}},
		{"429", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(429)
		}, []string{"Seerr is rate limiting requests; try again in 30s"}},
		{"500", reply(500, `{"message":"Something went wrong."}`), []string{"Seerr failed (500 Internal Server Error on GET /api/v1/", "): Something went wrong."}},
		{"malformed JSON", reply(200, `{"results": [`), []string{"Seerr answered GET /api/v1/", "with something that is not the expected JSON"}},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, []string{"Seerr did not answer within 1s at http://127.0.0.1:"}},
		{"unreachable", nil, []string{"Seerr is unreachable at http://127.0.0.1:", "check MMCP_PLUGIN_SEERR_URL"}},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			ts := httptest.NewServer(c.handler)
			t.Cleanup(ts.Close)
			if c.handler == nil {
				ts.Close()
			}
			s := server(t, ts.URL, time.Second) // room for a loaded machine's fast answers
			for tool, args := range calls {
				r, e := call(t, s, tool, args)
				if r != "" || e == "" || strings.Contains(e, "\n") {
					t.Errorf("%s: error %q, result %q", tool, e, r)
				}
				for _, want := range c.want {
					if !strings.Contains(e, want) {
						t.Errorf("%s: %q, want it to contain %q", tool, e, want)
					}
				}
			}
		})
	}
}

// A call ends with the call's own deadline when Seerr is slower than it:
// the host, not the tool, reports that.
func TestDeadline(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(ts.Close)
	s := server(t, ts.URL, 15*time.Second)
	began := time.Now()
	_, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: "seerr_request", Args: []byte(`{"media_type":"movie","tmdb_id":438631}`), TimeoutMs: 100})
	if status.Code(err) != codes.DeadlineExceeded || time.Since(began) > 2*time.Second {
		t.Errorf("call past its deadline: %v after %v", err, time.Since(began))
	}
}

func TestBasePath(t *testing.T) {
	f := newFake(t, map[string]http.HandlerFunc{"GET /seerr/api/v1/search": reply(200, `{"page":1,"totalPages":0,"totalResults":0,"results":[]}`)})
	if _, e := call(t, server(t, f.URL+"/seerr/", time.Second), "seerr_search", `{"query":"dune"}`); e != "" {
		t.Error(e)
	}
	wantRequests(t, f, "GET /seerr/api/v1/search?page=1&query=dune")
}

func TestHelpers(t *testing.T) {
	for _, c := range []struct {
		m    media
		want string
	}{
		{media{Title: "Dune", ReleaseDate: "2021-09-15"}, "Dune (2021)"},
		{media{Name: "Severance", FirstAirDate: "2022-02-17"}, "Severance (2022)"},
		{media{Title: "Untitled", ReleaseDate: ""}, "Untitled"},
		{media{Title: "Odd", ReleaseDate: "soon"}, "Odd"},
	} {
		if got := c.m.label(); got != c.want {
			t.Errorf("label %q, want %q", got, c.want)
		}
	}
	if got := statusName(mediaStatuses, 9); got != "status 9" {
		t.Errorf("unknown status: %q", got)
	}
	for ts, want := range map[string]string{"2025-01-18T14:03:22.000Z": "2025-01-18", "": "", "yesterday": ""} {
		if got := dateOnly(ts); got != want {
			t.Errorf("dateOnly(%q) = %q, want %q", ts, got, want)
		}
	}
}
