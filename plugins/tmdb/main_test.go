package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
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

// Credentials of both kinds, shaped like TMDB's: a v4 read access token is a
// JWT, a v3 key 32 hex characters.
const (
	v4Token   = "eyJhbGciOiJIUzI1NiJ9.eyJhdWQiOiIwMTIzNDU2Nzg5YWJjZGVmIiwibmJmIjoxNzAwMDAwMDAwLCJzdWIiOiI2NTQzMjEiLCJzY29wZXMiOlsiYXBpX3JlYWQiXSwidmVyc2lvbiI6MX0.c2lnbmF0dXJlLW9mLXRoZS10b2tlbi1zaWduYXR1cmU"
	testV3Key = "0123456789abcdef0123456789ABCDEF"
)

// seen is what the fake TMDB received.
type seen struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
}

// fake stands in for api.themoviedb.org under /3, recording each request.
type fake struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newFake(t *testing.T, h http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.reqs = append(f.reqs, seen{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone()})
		f.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fake) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// only returns the one request the fake got.
func (f *fake) only(t *testing.T) seen {
	t.Helper()
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1: %+v", len(reqs), reqs)
	}
	return reqs[0]
}

// answer serves body with status code, as TMDB does (JSON).
func answer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json;charset=utf-8")
		w.WriteHeader(code)
		w.Write([]byte(body))
	}
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// settingVars are the plugin's variables; env sets those given and unsets
// the others, so the host's environment cannot leak into a test.
var settingVars = []string{"API_KEY", "BASE_URL", "LANGUAGE"}

func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range settingVars {
		name := "MMCP_PLUGIN_TMDB_" + k
		v, ok := env[k]
		t.Setenv(name, v) // restores the old value afterwards
		if !ok {
			os.Unsetenv(name)
		}
	}
}

// plugin starts the plugin against base with the v4 token and the default
// language, plus env.
func plugin(t *testing.T, base string, env map[string]string) pluginpb.PluginServer {
	t.Helper()
	all := map[string]string{"API_KEY": v4Token, "BASE_URL": base + "/3"}
	for k, v := range env {
		all[k] = v
	}
	setEnv(t, all)
	return newPlugin(requestTimeout).Server()
}

func call(t *testing.T, s pluginpb.PluginServer, tool, args string) *pluginpb.CallResponse {
	t.Helper()
	r, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: tool, Args: []byte(args)})
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	return r
}

// wantJSON compares a result with the expected JSON, byte for byte once the
// expectation is compacted: field order included.
func wantJSON(t *testing.T, r *pluginpb.CallResponse, want string) {
	t.Helper()
	if r.Error != "" {
		t.Fatalf("tool error: %s", r.Error)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(want)); err != nil {
		t.Fatalf("bad expectation: %v", err)
	}
	if string(r.Result) != buf.String() {
		t.Errorf("result:\n%s\nwant:\n%s", r.Result, buf.String())
	}
}

// wantRequest checks one GET as the plugin must send it with the v4 token.
func wantRequest(t *testing.T, got seen, path string, query url.Values) {
	t.Helper()
	if got.Method != http.MethodGet || got.Path != path || !reflect.DeepEqual(got.Query, query) {
		t.Errorf("request %s %s %v\nwant GET %s %v", got.Method, got.Path, got.Query, path, query)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer "+v4Token {
		t.Errorf("Authorization %q", a)
	}
	if a := got.Header.Get("Accept"); a != "application/json" {
		t.Errorf("Accept %q", a)
	}
}

func TestDescribe(t *testing.T) {
	d, err := plugin(t, "http://tmdb.invalid", nil).Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "tmdb" || d.Version != "1.0.0" || len(d.SettingProblems) != 0 || len(d.Contexts) != 0 {
		t.Errorf("describe: %v", d)
	}
	type setting struct {
		Key, Default     string
		Required, Secret bool
	}
	var settings []setting
	for _, s := range d.Settings {
		if s.Description == "" {
			t.Errorf("setting %s has no description", s.Key)
		}
		settings = append(settings, setting{s.Key, s.Default, s.Required, s.Secret})
	}
	wantSettings := []setting{
		{Key: "API_KEY", Required: true, Secret: true},
		{Key: "BASE_URL", Default: "https://api.themoviedb.org/3"},
		{Key: "LANGUAGE", Default: "en-US"},
	}
	if !reflect.DeepEqual(settings, wantSettings) {
		t.Errorf("settings %+v\nwant %+v", settings, wantSettings)
	}

	type schema struct {
		Required   []string
		Properties map[string]struct {
			Type    string
			Enum    []string
			Default any
		}
	}
	wantTools := []struct {
		name     string
		required []string
		enums    map[string][]string
	}{
		{"tmdb_search", []string{"query"}, map[string][]string{"media_type": {"movie", "tv"}}},
		{"tmdb_details", []string{"id", "media_type"}, map[string][]string{"media_type": {"movie", "tv"}}},
		{"tmdb_trending", nil, map[string][]string{"media_type": {"movie", "tv", "all"}, "window": {"day", "week"}}},
	}
	if len(d.Tools) != len(wantTools) {
		t.Fatalf("tools: %v", d.Tools)
	}
	for i, want := range wantTools {
		tool := d.Tools[i]
		var s schema
		if err := json.Unmarshal(tool.ArgsSchema, &s); err != nil {
			t.Fatal(err)
		}
		if tool.Name != want.name || tool.NeedsApproval || tool.TimeoutMs != 0 || tool.Description == "" || !slices.Equal(s.Required, want.required) {
			t.Errorf("tool %d: %v (required %v), want %s requiring %v", i, tool, s.Required, want.name, want.required)
		}
		for prop, enum := range want.enums {
			if !slices.Equal(s.Properties[prop].Enum, enum) {
				t.Errorf("%s.%s enum %v, want %v", want.name, prop, s.Properties[prop].Enum, enum)
			}
		}
	}
}

func TestStandbyWithoutKey(t *testing.T) {
	f := newFake(t, answer(200, `{}`))
	setEnv(t, map[string]string{"BASE_URL": f.URL + "/3"})
	s := newPlugin(requestTimeout).Server()
	d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil || !slices.Equal(d.SettingProblems, []string{"MMCP_PLUGIN_TMDB_API_KEY is required"}) {
		t.Fatalf("problems %v (%v)", d.GetSettingProblems(), err)
	}
	r := call(t, s, "tmdb_trending", `{}`)
	if !strings.Contains(r.Error, "MMCP_PLUGIN_TMDB_API_KEY is required") || len(f.requests()) != 0 {
		t.Errorf("call on standby: %q, %d requests", r.Error, len(f.requests()))
	}
}

// The two kinds of key travel differently: the v3 key only in the query, the
// v4 token only in the header. The language goes with every request.
func TestCredentialsAndLanguage(t *testing.T) {
	tests := []struct {
		name, key, language string
		wantQueryKey        string
		wantHeader          string
		wantLanguage        []string
	}{
		{name: "v4 token", key: v4Token, wantHeader: "Bearer " + v4Token, wantLanguage: []string{"en-US"}},
		{name: "v3 key", key: testV3Key, wantQueryKey: testV3Key, wantLanguage: []string{"en-US"}},
		{name: "v3 key pasted with a newline", key: " " + testV3Key + "\n", wantQueryKey: testV3Key, wantLanguage: []string{"en-US"}},
		{name: "v4 token and German", key: v4Token, language: "de-DE", wantHeader: "Bearer " + v4Token, wantLanguage: []string{"de-DE"}},
		{name: "v3 key and no language", key: testV3Key, language: "", wantQueryKey: testV3Key},
	}
	calls := []struct{ tool, args string }{
		{"tmdb_search", `{"query":"Dune"}`},
		{"tmdb_details", `{"id":438631,"media_type":"movie"}`},
		{"tmdb_trending", `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, answer(200, `{"id":438631,"results":[]}`))
			env := map[string]string{"API_KEY": tt.key, "BASE_URL": f.URL + "/3"}
			if tt.wantLanguage == nil || tt.language != "" {
				env["LANGUAGE"] = tt.language
			}
			s := newPluginWith(t, env)
			for _, c := range calls {
				if r := call(t, s, c.tool, c.args); r.Error != "" {
					t.Fatalf("%s: %s", c.tool, r.Error)
				}
			}
			reqs := f.requests()
			if len(reqs) != len(calls) {
				t.Fatalf("%d requests", len(reqs))
			}
			for _, req := range reqs {
				if got := req.Query["api_key"]; tt.wantQueryKey == "" && got != nil || tt.wantQueryKey != "" && !slices.Equal(got, []string{tt.wantQueryKey}) {
					t.Errorf("%s: api_key %q, want %q", req.Path, got, tt.wantQueryKey)
				}
				if got := req.Header.Values("Authorization"); tt.wantHeader == "" && got != nil || tt.wantHeader != "" && !slices.Equal(got, []string{tt.wantHeader}) {
					t.Errorf("%s: Authorization %q, want %q", req.Path, got, tt.wantHeader)
				}
				if got := req.Query["language"]; !slices.Equal(got, tt.wantLanguage) {
					t.Errorf("%s: language %q, want %q", req.Path, got, tt.wantLanguage)
				}
			}
		})
	}
}

func newPluginWith(t *testing.T, env map[string]string) pluginpb.PluginServer {
	t.Helper()
	setEnv(t, env)
	return newPlugin(requestTimeout).Server()
}

// A key of neither kind, or a base URL that is not one, is refused before
// anything is sent, naming the variable and never quoting the key.
func TestBadSettings(t *testing.T) {
	tests := []struct{ key, base, want string }{
		{"hunter2-not-a-tmdb-key", "", "MMCP_PLUGIN_TMDB_API_KEY is neither an API Read Access Token (a long string starting with eyJ) nor an API Key (32 hex characters); copy one from https://www.themoviedb.org/settings/api"},
		{"eyJhbGciOiJIUzI1NiJ9", "", "MMCP_PLUGIN_TMDB_API_KEY is neither an API Read Access Token"},
		{"0123456789abcdef0123456789abcdeg", "", "MMCP_PLUGIN_TMDB_API_KEY is neither an API Read Access Token"},
		{testV3Key, "api.themoviedb.org/3", `MMCP_PLUGIN_TMDB_BASE_URL: "api.themoviedb.org/3" is not an http(s) URL`},
	}
	for _, tt := range tests {
		f := newFake(t, answer(200, `{}`))
		base := tt.base
		if base == "" {
			base = f.URL + "/3"
		}
		s := newPluginWith(t, map[string]string{"API_KEY": tt.key, "BASE_URL": base})
		// The daemon learns it from Describe and puts the plugin on standby.
		d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
		if err != nil || len(d.SettingProblems) != 1 || !strings.HasPrefix(d.SettingProblems[0], tt.want) || strings.Contains(d.SettingProblems[0], tt.key) {
			t.Errorf("key %q base %q: setting problems %q (%v)\nwant %q", tt.key, tt.base, d.GetSettingProblems(), err, tt.want)
		}
		r := call(t, s, "tmdb_search", `{"query":"Dune"}`)
		if !strings.Contains(r.Error, tt.want) || strings.Contains(r.Error, tt.key) || len(f.requests()) != 0 {
			t.Errorf("key %q base %q: %q, %d requests\nwant %q", tt.key, tt.base, r.Error, len(f.requests()), tt.want)
		}
	}
}

func TestSearch(t *testing.T) {
	tests := []struct {
		name, args, fixture string
		path                string
		query               url.Values
		want                string
	}{
		{
			name: "movie with year", args: `{"query":"Dune","year":2021}`, fixture: "search_movie_dune.json",
			path:  "/3/search/movie",
			query: url.Values{"query": {"Dune"}, "include_adult": {"false"}, "year": {"2021"}, "language": {"en-US"}},
			want: `{"media_type":"movie","total_results":63,"results":[
				{"id":438631,"title":"Dune","year":2021,"overview":"Paul Atreides, heir to a noble house, follows his family to Arrakis, the most dangerous planet in the universe and the only source of the most precious substance in existence. When his family is betra...","rating":7.8},
				{"id":693134,"title":"Dune: Part Two","year":2024,"overview":"Paul Atreides joins Chani and the Fremen on a path of revenge against those who destroyed his family.","rating":8.2},
				{"id":841,"title":"Dune","year":1984,"overview":"In the year 10,191 the spice melange is the most valuable substance in the universe, and it is found only on the desert planet Arrakis.","rating":6.2},
				{"id":209403,"title":"Jodorowsky's Dune","year":2013,"overview":"The story of a visionary director's attempt to film the unfilmable novel in the 1970s.","rating":8},
				{"id":1170608,"title":"Dune: Part Three"}]}`,
		},
		{
			name: "tv with year", args: `{"query":"Severance","media_type":"tv","year":2022}`, fixture: "search_tv_severance.json",
			path:  "/3/search/tv",
			query: url.Values{"query": {"Severance"}, "include_adult": {"false"}, "first_air_date_year": {"2022"}, "language": {"en-US"}},
			want: `{"media_type":"tv","total_results":1,"results":[
				{"id":95396,"title":"Severance","year":2022,"overview":"Mark leads a team of office workers whose memories have been surgically divided between their work and personal lives.","rating":8.4}]}`,
		},
		{
			name: "nothing without a year", args: `{"query":"  Blade Runner 2049 "}`, fixture: "search_empty.json",
			path:  "/3/search/movie",
			query: url.Values{"query": {"Blade Runner 2049"}, "include_adult": {"false"}, "language": {"en-US"}},
			want:  `{"media_type":"movie","total_results":0,"results":[],"message":"Nothing on TMDB matched \"Blade Runner 2049\" as a movie. Try again with media_type tv, or with fewer or differently spelled words."}`,
		},
		{
			name: "nothing with a year", args: `{"query":"Severance","media_type":"tv","year":2019}`, fixture: "search_empty.json",
			path:  "/3/search/tv",
			query: url.Values{"query": {"Severance"}, "include_adult": {"false"}, "first_air_date_year": {"2019"}, "language": {"en-US"}},
			want:  `{"media_type":"tv","total_results":0,"results":[],"message":"Nothing on TMDB matched \"Severance\" as a tv show from 2019. Try again without the year, or with media_type movie."}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, answer(200, fixture(t, tt.fixture)))
			r := call(t, plugin(t, f.URL, nil), "tmdb_search", tt.args)
			wantRequest(t, f.only(t), tt.path, tt.query)
			wantJSON(t, r, tt.want)
		})
	}
}

const duneDetailsUS = `{"id":438631,"media_type":"movie","title":"Dune","year":2021,"status":"Released","runtime_minutes":155,
	"genres":["Science Fiction","Adventure"],"rating":7.8,"certification":"PG-13",
	"overview":"Paul Atreides, heir to a noble house, follows his family to Arrakis, the most dangerous planet in the universe.",
	"directors":["Denis Villeneuve"],
	"cast":["Timothée Chalamet as Paul Atreides","Rebecca Ferguson as Lady Jessica","Oscar Isaac as Duke Leto Atreides","Josh Brolin as Gurney Halleck","Stellan Skarsgård as Baron Vladimir Harkonnen"],
	"release_date":"2021-09-15",
	"releases":{"country":"US","dates":[
		{"type":"Premiere","date":"2021-10-21","note":"Fantastic Fest"},
		{"type":"Theatrical","date":"2021-10-22"},
		{"type":"Digital","date":"2021-10-22","note":"HBO Max"},
		{"type":"Physical","date":"2022-01-11","note":"4K UHD, Blu-ray, DVD"}]},
	"tmdb_url":"https://www.themoviedb.org/movie/438631","imdb_id":"tt1160419","imdb_url":"https://www.imdb.com/title/tt1160419/"}`

func TestDetails(t *testing.T) {
	movieQuery := func(lang string) url.Values {
		return url.Values{"append_to_response": {"credits,release_dates"}, "language": {lang}}
	}
	tests := []struct {
		name, language, args, body string
		path                       string
		query                      url.Values
		want                       string
	}{
		{
			name: "movie", args: `{"id":438631,"media_type":"movie"}`, body: fixture(t, "movie_438631.json"),
			path: "/3/movie/438631", query: movieQuery("en-US"), want: duneDetailsUS,
		},
		{
			name: "movie in German: German dates", language: "de-DE", args: `{"id":438631,"media_type":"movie"}`, body: fixture(t, "movie_438631.json"),
			path: "/3/movie/438631", query: movieQuery("de-DE"),
			want: strings.NewReplacer(`"PG-13"`, `"12"`, `{"country":"US","dates":[
		{"type":"Premiere","date":"2021-10-21","note":"Fantastic Fest"},
		{"type":"Theatrical","date":"2021-10-22"},
		{"type":"Digital","date":"2021-10-22","note":"HBO Max"},
		{"type":"Physical","date":"2022-01-11","note":"4K UHD, Blu-ray, DVD"}]}`, `{"country":"DE","dates":[
		{"type":"Theatrical","date":"2021-09-16"},{"type":"Physical","date":"2022-01-27","note":"Blu-ray"}]}`).Replace(duneDetailsUS),
		},
		{
			name: "movie in French: no French dates, so American ones", language: "fr-FR", args: `{"id":438631,"media_type":"movie"}`, body: fixture(t, "movie_438631.json"),
			path: "/3/movie/438631", query: movieQuery("fr-FR"), want: duneDetailsUS,
		},
		{
			name: "movie released only in Japan, still to come", args: `{"id":12,"media_type":"movie"}`,
			body: `{"id":12,"title":"Kaiju","original_title":"怪獣","release_date":"","runtime":0,"status":"Post Production","genres":[],"imdb_id":null,
				"vote_average":0,"vote_count":0,"overview":"","credits":{"cast":[{"name":"Someone","character":"","order":0}],"crew":[]},
				"release_dates":{"results":[{"iso_3166_1":"JP","release_dates":[{"certification":"","iso_639_1":"","note":"","release_date":"2027-07-01T00:00:00.000Z","type":3}]}]}}`,
			path: "/3/movie/12", query: movieQuery("en-US"),
			want: `{"id":12,"media_type":"movie","title":"Kaiju","original_title":"怪獣","status":"Post Production","cast":["Someone"],
				"releases":{"country":"JP","dates":[{"type":"Theatrical","date":"2027-07-01"}]},"tmdb_url":"https://www.themoviedb.org/movie/12"}`,
		},
		{
			name: "tv", args: `{"id":95396,"media_type":"tv"}`, body: fixture(t, "tv_95396.json"),
			path: "/3/tv/95396", query: url.Values{"append_to_response": {"credits,content_ratings,external_ids"}, "language": {"en-US"}},
			want: `{"id":95396,"media_type":"tv","title":"Severance","year":2022,"status":"Returning Series","seasons":2,"episodes":19,
				"genres":["Drama","Mystery","Sci-Fi & Fantasy"],"rating":8.4,"certification":"TV-MA",
				"overview":"Mark leads a team of office workers whose memories have been surgically divided between their work and personal lives.",
				"created_by":["Dan Erickson"],"networks":["Apple TV+"],
				"cast":["Adam Scott as Mark Scout","Zach Cherry as Dylan George","Britt Lower as Helly Riggs","Tramell Tillman as Seth Milchick","Jen Tullock as Devon Scout-Hale"],
				"first_air_date":"2022-02-17","last_air_date":"2025-03-20",
				"last_episode":{"episode":"S02E10","name":"Cold Harbor","air_date":"2025-03-20"},
				"tmdb_url":"https://www.themoviedb.org/tv/95396","imdb_id":"tt11280740","imdb_url":"https://www.imdb.com/title/tt11280740/"}`,
		},
		{
			name: "tv airing now, rated elsewhere", args: `{"id":7,"media_type":"tv"}`,
			body: `{"id":7,"name":"Show","original_name":"Show","first_air_date":"2026-01-05","last_air_date":"2026-02-02","number_of_seasons":1,"number_of_episodes":8,
				"status":"Returning Series","genres":[{"id":35,"name":"Comedy"}],"vote_average":6.66,"vote_count":3,"created_by":[],"networks":[{"id":4,"name":"BBC One"}],
				"last_episode_to_air":{"name":"Four","air_date":"2026-02-02","season_number":1,"episode_number":4},
				"next_episode_to_air":{"name":"Five","air_date":"2026-02-09","season_number":1,"episode_number":5},
				"credits":{"cast":[],"crew":[]},"content_ratings":{"results":[{"iso_3166_1":"GB","rating":"15"}]},"external_ids":{"imdb_id":null}}`,
			path: "/3/tv/7", query: url.Values{"append_to_response": {"credits,content_ratings,external_ids"}, "language": {"en-US"}},
			want: `{"id":7,"media_type":"tv","title":"Show","year":2026,"status":"Returning Series","seasons":1,"episodes":8,"genres":["Comedy"],"rating":6.7,
				"certification":"15","networks":["BBC One"],"first_air_date":"2026-01-05","last_air_date":"2026-02-02",
				"last_episode":{"episode":"S01E04","name":"Four","air_date":"2026-02-02"},"next_episode":{"episode":"S01E05","name":"Five","air_date":"2026-02-09"},
				"tmdb_url":"https://www.themoviedb.org/tv/7"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, answer(200, tt.body))
			var env map[string]string
			if tt.language != "" {
				env = map[string]string{"LANGUAGE": tt.language}
			}
			r := call(t, plugin(t, f.URL, env), "tmdb_details", tt.args)
			wantRequest(t, f.only(t), tt.path, tt.query)
			wantJSON(t, r, tt.want)
		})
	}
}

func TestTrending(t *testing.T) {
	tests := []struct {
		name, args, body, path, want string
	}{
		{
			name: "defaults: movies this week", args: `{}`,
			body: `{"page":1,"results":[
				{"id":693134,"title":"Dune: Part Two","original_title":"Dune: Part Two","media_type":"movie","release_date":"2024-02-27","vote_average":8.152,"vote_count":6320},
				{"id":1170608,"title":"Dune: Part Three","original_title":"Dune: Part Three","media_type":"movie","release_date":"","vote_average":0,"vote_count":0}],
				"total_pages":1,"total_results":2}`,
			path: "/3/trending/movie/week",
			want: `{"media_type":"movie","window":"week","total_results":2,"results":[
				{"id":693134,"title":"Dune: Part Two","media_type":"movie","year":2024,"rating":8.2},
				{"id":1170608,"title":"Dune: Part Three","media_type":"movie"}]}`,
		},
		{
			name: "everything today: the top 10", args: `{"media_type":"all","window":"day"}`, body: fixture(t, "trending_all_day.json"),
			path: "/3/trending/all/day",
			want: `{"media_type":"all","window":"day","total_results":10000,"results":[
				{"id":693134,"title":"Dune: Part Two","media_type":"movie","year":2024,"rating":8.2},
				{"id":95396,"title":"Severance","media_type":"tv","year":2022,"rating":8.4},
				{"id":1190668,"title":"Timothée Chalamet","media_type":"person"},
				{"id":1396,"title":"Breaking Bad","media_type":"tv","year":2008,"rating":8.9},
				{"id":550,"title":"Fight Club","media_type":"movie","year":1999,"rating":8.4},
				{"id":603,"title":"The Matrix","media_type":"movie","year":1999,"rating":8.2},
				{"id":1399,"title":"Game of Thrones","media_type":"tv","year":2011,"rating":8.5},
				{"id":157336,"title":"Interstellar","media_type":"movie","year":2014,"rating":8.5},
				{"id":1170608,"title":"Dune: Part Three","media_type":"movie"},
				{"id":100088,"title":"The Last of Us","media_type":"tv","year":2023,"rating":8.6}]}`,
		},
		{
			name: "tv without media_type on its items", args: `{"media_type":"tv","window":"week"}`,
			body: `{"page":1,"results":[{"id":1396,"name":"Breaking Bad","first_air_date":"2008-01-20","vote_average":8.918,"vote_count":15020}],"total_pages":1,"total_results":1}`,
			path: "/3/trending/tv/week",
			want: `{"media_type":"tv","window":"week","total_results":1,"results":[{"id":1396,"title":"Breaking Bad","media_type":"tv","year":2008,"rating":8.9}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, answer(200, tt.body))
			r := call(t, plugin(t, f.URL, nil), "tmdb_trending", tt.args)
			wantRequest(t, f.only(t), tt.path, url.Values{"language": {"en-US"}})
			wantJSON(t, r, tt.want)
		})
	}
}

// TMDB's error bodies, as its API reference documents them.
const (
	invalidKey = `{"status_code":7,"status_message":"Invalid API key: You must be granted a valid key.","success":false}`
	notFound34 = `{"success":false,"status_code":34,"status_message":"The resource you requested could not be found."}`
	overLimit  = `{"status_code":25,"status_message":"Your request count (41) is over the allowed limit of (40).","success":false}`
	internal   = `{"status_code":11,"status_message":"Internal error: Something went wrong, contact TMDb.","success":false}`
)

func TestErrors(t *testing.T) {
	tests := []struct {
		name, tool, args string
		handler          http.HandlerFunc
		want             string
	}{
		{"bad credentials", "tmdb_search", `{"query":"Dune"}`, answer(401, invalidKey),
			"TMDB refused the credentials (401): Invalid API key: You must be granted a valid key.; check MMCP_PLUGIN_TMDB_API_KEY: credentials refused"},
		{"no such movie", "tmdb_details", `{"id":999999999,"media_type":"movie"}`, answer(404, notFound34),
			"no movie with TMDB id 999999999; check the id and media_type, or find it with tmdb_search"},
		{"no such show", "tmdb_details", `{"id":42,"media_type":"tv"}`, answer(404, notFound34),
			"no tv show with TMDB id 42; check the id and media_type, or find it with tmdb_search"},
		{"not found elsewhere: a wrong base URL", "tmdb_trending", `{}`, answer(404, notFound34),
			"TMDB: not found (GET /trending/movie/week): The resource you requested could not be found.: not found"},
		{"rate limited", "tmdb_search", `{"query":"Dune"}`, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "10")
			answer(429, overLimit)(w, r)
		}, "TMDB is rate limiting requests; try again in 10s: rate limited"},
		{"server error", "tmdb_search", `{"query":"Dune"}`, answer(500, internal),
			"TMDB failed (500 Internal Server Error on GET /search/movie): Internal error: Something went wrong, contact TMDb.: service error"},
		{"proxy error page", "tmdb_trending", `{}`, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(502)
			w.Write([]byte("<html><body>Bad Gateway</body></html>"))
		}, "TMDB failed (502 Bad Gateway on GET /trending/movie/week): service error"},
		{"malformed JSON", "tmdb_details", `{"id":438631,"media_type":"movie"}`, answer(200, `{"id":438631,"title":"Dune",`),
			"TMDB answered GET /movie/438631 with something that is not the expected JSON (unexpected end of JSON input): unexpected response"},
		{"wrong JSON shape", "tmdb_search", `{"query":"Dune"}`, answer(200, `{"results":{"id":1}}`),
			// the decoder's own words follow, in the parentheses
			"TMDB answered GET /search/movie with something that is not the expected JSON ("},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, tt.handler)
			r := call(t, plugin(t, f.URL, map[string]string{"API_KEY": testV3Key}), tt.tool, tt.args)
			exact := !strings.HasSuffix(tt.want, "(")
			if exact && r.Error != tt.want || !strings.HasPrefix(r.Error, tt.want) || len(r.Result) != 0 {
				t.Errorf("error %q\nwant  %q", r.Error, tt.want)
			}
			if strings.Contains(r.Error, testV3Key) {
				t.Errorf("the key is in the error: %q", r.Error)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	f := newFake(t, answer(200, `{}`))
	f.Close() // nothing listens there any more
	r := call(t, plugin(t, f.URL, nil), "tmdb_trending", `{}`)
	prefix := "TMDB is unreachable at " + f.URL + "/3 ("
	suffix := "); check MMCP_PLUGIN_TMDB_BASE_URL: service unreachable"
	if !strings.HasPrefix(r.Error, prefix) || !strings.HasSuffix(r.Error, suffix) {
		t.Errorf("error %q", r.Error)
	}
}

// hang is a TMDB that never answers, until the client gives up.
func hang(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

// A TMDB that does not answer costs one tool error, at the client's timeout.
func TestSlowService(t *testing.T) {
	f := newFake(t, hang)
	setEnv(t, map[string]string{"API_KEY": v4Token, "BASE_URL": f.URL + "/3"})
	s := newPlugin(200 * time.Millisecond).Server()
	start := time.Now()
	r := call(t, s, "tmdb_search", `{"query":"Dune"}`)
	if want := "TMDB did not answer within 200ms at " + f.URL + "/3: service unreachable"; r.Error != want {
		t.Errorf("error %q\nwant  %q", r.Error, want)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
}

// The call's own deadline, shorter than the client's timeout, ends the call
// as a deadline the host reports.
func TestCallDeadline(t *testing.T) {
	f := newFake(t, hang)
	s := plugin(t, f.URL, nil)
	start := time.Now()
	_, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: "tmdb_details", Args: []byte(`{"id":1,"media_type":"movie"}`), TimeoutMs: 150})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("err %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestBadArguments(t *testing.T) {
	tests := []struct{ tool, args string }{
		{"tmdb_search", `{}`},
		{"tmdb_search", `{"query":""}`},
		{"tmdb_search", `{"query":"Dune","media_type":"book"}`},
		{"tmdb_search", `{"query":"Dune","year":"2021"}`},
		{"tmdb_details", `{"media_type":"movie"}`},
		{"tmdb_details", `{"id":0,"media_type":"movie"}`},
		{"tmdb_details", `{"id":550}`},
		{"tmdb_trending", `{"window":"month"}`},
		{"tmdb_trending", `{"media_type":"person"}`},
	}
	f := newFake(t, answer(200, `{}`))
	s := plugin(t, f.URL, nil)
	for _, tt := range tests {
		if r := call(t, s, tt.tool, tt.args); !strings.HasPrefix(r.Error, "invalid arguments: ") {
			t.Errorf("%s %s: %q", tt.tool, tt.args, r.Error)
		}
	}
	r := call(t, s, "tmdb_search", `{"query":"   "}`)
	if r.Error != "query is empty: give a title to look for" {
		t.Errorf("blank query: %q", r.Error)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests for bad arguments", n)
	}
}

func TestReleaseTypes(t *testing.T) {
	want := []string{"type 0", "Premiere", "Theatrical (limited)", "Theatrical", "Digital", "Physical", "TV", "type 7"}
	for n, w := range want {
		if got := releaseType(n); got != w {
			t.Errorf("%d: %q, want %q", n, got, w)
		}
	}
}

// A film with many releases in one country gets the first ten by date and
// says how many more there were; one without any gets no releases at all.
func TestReleaseBounds(t *testing.T) {
	us := countryDates{Country: "US"}
	for day := 12; day >= 1; day-- {
		us.Dates = append(us.Dates, releaseDate{ReleaseDate: fmt.Sprintf("2024-01-%02dT00:00:00.000Z", day), Type: 4})
	}
	var d apiDetails
	d.ReleaseDates.Results = []countryDates{us}
	api := &tmdb{region: "US"}
	var out details
	api.movie(&out, &d)
	if out.Releases == nil || len(out.Releases.Dates) != 10 || out.Releases.More != 2 ||
		out.Releases.Dates[0].Date != "2024-01-01" || out.Releases.Dates[9].Date != "2024-01-10" {
		t.Errorf("releases %+v", out.Releases)
	}
	out = details{}
	api.movie(&out, &apiDetails{})
	if out.Releases != nil {
		t.Errorf("releases of a film without any: %+v", out.Releases)
	}
}
