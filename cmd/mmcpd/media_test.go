package main

import (
	"bytes"
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

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// The end-to-end path of a media request: the model looks a film up on TMDB,
// asks to add it to Radarr, the user approves, Radarr gets it, the model
// answers. Real daemon, real tmdb and radarr plugins; TMDB, Radarr and
// Ollama are fakes that record what they are asked.

const (
	// mediaTMDBKey is a v3 API key (32 hex characters): it travels as api_key.
	mediaTMDBKey = "6f1d2c3b4a59687766554433221100ff"
	// mediaRadarrKey is Radarr's API key: it travels as X-Api-Key.
	mediaRadarrKey = "c0ffee00c0ffee00c0ffee00c0ffee00"
	mediaDuneID    = 438631
)

// mediaDuneLookup is what Radarr answers GET /api/v3/movie/lookup/tmdb?tmdbId=438631
// for a film it does not have: no id, no path, the metadata Radarr got from
// TMDB (the shape of plugins/radarr/testdata/lookup_tmdb.json).
const mediaDuneLookup = `{
  "title": "Dune",
  "originalTitle": "Dune",
  "originalLanguage": {"id": 1, "name": "English"},
  "alternateTitles": [{"sourceType": "tmdb", "movieMetadataId": 0, "title": "Dune: Part One"}],
  "secondaryYearSourceId": 0,
  "sortTitle": "dune",
  "sizeOnDisk": 0,
  "status": "released",
  "overview": "Paul Atreides, a brilliant and gifted young man born into a great destiny beyond his understanding, must travel to the most dangerous planet in the universe to ensure the future of his family and his people.",
  "inCinemas": "2021-09-15T00:00:00Z",
  "physicalRelease": "2021-11-26T00:00:00Z",
  "digitalRelease": "2021-10-21T00:00:00Z",
  "releaseDate": "2021-10-21T00:00:00Z",
  "images": [{"coverType": "poster", "url": "https://image.tmdb.org/t/p/original/d5NXSklXo0qyIYkgV94XAgMIckC.jpg", "remoteUrl": "https://image.tmdb.org/t/p/original/d5NXSklXo0qyIYkgV94XAgMIckC.jpg"}],
  "website": "https://www.dunemovie.com",
  "year": 2021,
  "youTubeTrailerId": "8g18jFHCLXk",
  "studio": "Legendary Pictures",
  "qualityProfileId": 0,
  "hasFile": false,
  "movieFileId": 0,
  "monitored": false,
  "minimumAvailability": "tba",
  "isAvailable": true,
  "runtime": 155,
  "cleanTitle": "dune",
  "imdbId": "tt1160419",
  "tmdbId": 438631,
  "titleSlug": "438631",
  "certification": "PG-13",
  "genres": ["Science Fiction", "Adventure"],
  "keywords": ["desert", "based on novel or book"],
  "tags": [],
  "added": "0001-01-01T00:00:00Z",
  "ratings": {"imdb": {"votes": 900000, "value": 8.0, "type": "user"}, "tmdb": {"votes": 13000, "value": 7.8, "type": "user"}},
  "collection": {"title": "Dune Collection", "tmdbId": 726871},
  "popularity": 120.5
}`

// mediaRequest is one request a fake service received.
type mediaRequest struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Body   string
}

// line is the request as "METHOD /path?query", the query in sorted order.
func (r mediaRequest) line() string {
	if len(r.Query) == 0 {
		return r.Method + " " + r.Path
	}
	return r.Method + " " + r.Path + "?" + r.Query.Encode()
}

// mediaProbes are the plugins' health probes (SPEC.md, Plugins): the fakes
// answer them apart, and leave them out of the requests the tests count,
// which are the tools' own.
var mediaProbes = map[string]bool{"GET /3/configuration": true, "GET /api/v3/system/status": true}

// mediaService is an HTTP service that records every request and answers
// through reply; a health probe it answers with an empty object.
type mediaService struct {
	*httptest.Server
	mu  sync.Mutex
	got []mediaRequest
}

func newMediaService(t *testing.T, reply func(w http.ResponseWriter, r *http.Request, body []byte)) *mediaService {
	t.Helper()
	f := &mediaService{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if mediaProbes[r.Method+" "+r.URL.Path] {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			io.WriteString(w, `{}`)
			return
		}
		f.mu.Lock()
		f.got = append(f.got, mediaRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: string(body)})
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		reply(w, r, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *mediaService) requests() []mediaRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

func (f *mediaService) lines() []string {
	var out []string
	for _, r := range f.requests() {
		out = append(out, r.line())
	}
	return out
}

func mediaFixture(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mediaTMDB plays api.themoviedb.org/3: the film search for Dune, from the
// tmdb plugin's own fixture; anything else is TMDB's 404.
func mediaTMDB(t *testing.T) *mediaService {
	search := mediaFixture(t, "../../plugins/tmdb/testdata/search_movie_dune.json")
	return newMediaService(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if r.Method == http.MethodGet && r.URL.Path == "/3/search/movie" {
			w.Write(search)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"success":false,"status_code":34,"status_message":"The resource you requested could not be found."}`)
	})
}

// mediaRadarr plays a Radarr v3 that does not have Dune (2021) yet, with the
// radarr plugin's fixtures for its quality profiles and root folders. A POST
// /api/v3/movie answers 201 with the film as added.
func mediaRadarr(t *testing.T) *mediaService {
	replies := map[string][]byte{
		"GET /api/v3/movie":             []byte(`[]`),
		"GET /api/v3/movie/lookup/tmdb": []byte(mediaDuneLookup),
		"GET /api/v3/qualityprofile":    mediaFixture(t, "../../plugins/radarr/testdata/qualityprofile.json"),
		"GET /api/v3/rootfolder":        mediaFixture(t, "../../plugins/radarr/testdata/rootfolder.json"),
	}
	return newMediaService(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.Header.Get("X-Api-Key") != mediaRadarrKey {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && r.URL.Path == "/api/v3/movie" {
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `[{"propertyName":"","errorMessage":"invalid JSON"}]`)
				return
			}
			m["id"], m["path"], m["added"] = 8, "/movies/Dune (2021)", "2026-11-21T13:03:02Z"
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(m)
			return
		}
		if b, ok := replies[r.Method+" "+r.URL.Path]; ok {
			w.Write(b)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"message":"NotFound"}`)
	})
}

// mediaPluginsFolder makes a plugins folder with the named bundled plugins,
// each ready to take mediaFixture's certificate.
func mediaPluginsFolder(t *testing.T, names ...string) string {
	t.Helper()
	bundled, _ := bundledPlugins(t)
	dir := pluginUserDir(t, false)
	for _, n := range names {
		name := plugins.FilePrefix + n
		src, dst := filepath.Join(bundled, name), filepath.Join(dir, name)
		if os.Link(src, dst) != nil {
			if err := os.WriteFile(dst, mediaFixture(t, src), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// startMediaDaemon starts a daemon over the plugins in dir, with tmdb and
// radarr wired to fakes and extra settings, and waits until it is ready.
func startMediaDaemon(t *testing.T, dir string, extra ...string) *mediaStack {
	t.Helper()
	s := &mediaStack{tmdb: mediaTMDB(t), radarr: mediaRadarr(t), ollama: ollamatest.New(t)}
	s.addr, s.logs, _ = startDaemon(t, append([]string{
		"MMCP_OLLAMA_HOST=" + s.ollama.URL,
		"MMCP_API_TOKEN=" + canary,
		"MMCP_PLUGINS_DIR=" + dir,
		"MMCP_PLUGIN_TMDB_API_KEY=" + mediaTMDBKey,
		"MMCP_PLUGIN_TMDB_BASE_URL=" + s.tmdb.URL + "/3",
		"MMCP_PLUGIN_RADARR_URL=" + s.radarr.URL,
		"MMCP_PLUGIN_RADARR_API_KEY=" + mediaRadarrKey,
	}, extra...))
	if !waitFor(30*time.Second, func() bool { code, _ := apiGet(t, s.addr, "/readyz"); return code == 200 }) {
		_, body := apiGet(t, s.addr, "/readyz")
		t.Fatalf("/readyz never 200: %s\nlogs:\n%s", body, s.logs)
	}
	return s
}

// mediaStack is a daemon with the tmdb and radarr plugins, wired to fakes.
type mediaStack struct {
	tmdb, radarr *mediaService
	ollama       *ollamatest.Server
	addr         string
	logs         *syncBuffer
}

func startMediaStack(t *testing.T) *mediaStack {
	t.Helper()
	s := startMediaDaemon(t, mediaPluginsFolder(t, "tmdb", "radarr"))
	tools := listTools(t, s.addr)
	for _, name := range []string{"tmdb_search", "radarr_add"} {
		if tl, ok := tools[name]; !ok || tl.Disabled != "" {
			t.Fatalf("%s: listed %v, disabled %q\nlogs:\n%s", name, ok, tl.Disabled, s.logs)
		}
	}
	if !tools["radarr_add"].NeedsApproval || tools["tmdb_search"].NeedsApproval {
		t.Errorf("needs_approval: radarr_add %v (want true), tmdb_search %v (want false)", tools["radarr_add"].NeedsApproval, tools["tmdb_search"].NeedsApproval)
	}
	return s
}

// post sends body as JSON to the daemon with the token; it returns the
// status and the answer.
func (s *mediaStack) post(t *testing.T, path string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+canary)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v\nlogs:\n%s", path, err, s.logs)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// chatResponse posts to path and wants a 200 ChatResponse.
func (s *mediaStack) chatResponse(t *testing.T, path string, body any) server.ChatResponse {
	t.Helper()
	code, out := s.post(t, path, body)
	var resp server.ChatResponse
	if code != http.StatusOK || json.Unmarshal(out, &resp) != nil {
		t.Fatalf("POST %s: %d %s\nlogs:\n%s", path, code, out, s.logs)
	}
	return resp
}

// session is GET /v1/sessions/{id}.
func (s *mediaStack) session(t *testing.T, id string) server.SessionView {
	t.Helper()
	code, body := apiGet(t, s.addr, "/v1/sessions/"+id)
	var v server.SessionView
	if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
		t.Fatalf("GET /v1/sessions/%s: %d %s", id, code, body)
	}
	return v
}

// askForDune runs the first half of every variant: the user asks, the model
// searches TMDB and then asks to add Dune to Radarr; the daemon stops there
// with an action request. It checks what TMDB got and what the model was
// told, and that Radarr got nothing yet.
func (s *mediaStack) askForDune(t *testing.T, final ollamatest.Reply) server.ChatResponse {
	t.Helper()
	s.ollama.Push(
		ollamatest.Reply{Content: `{"thought":"Find the film's TMDB id first.","action":"tmdb_search","args":{"query":"Dune","year":2021}}`},
		ollamatest.Reply{Content: `{"thought":"The **2021** Dune is TMDB id 438631; I add it to Radarr.","action":"radarr_add","args":{"tmdb_id":438631}}`},
		final,
	)
	resp := s.chatResponse(t, "/v1/chat", server.ChatRequest{Message: "Add Dune (2021) to my films"})

	// The action request: the call the model chose, and its reason in
	// plain words.
	if resp.Type != server.TypeActionRequest || resp.ApprovalID == "" || resp.Answer != "" || resp.SessionID == "" {
		t.Fatalf("chat: want an action request, got %+v", resp)
	}
	if resp.Tool != "radarr_add" {
		t.Errorf("action request tool %q, want radarr_add", resp.Tool)
	}
	mediaJSONEqual(t, "action request args", string(resp.Args), `{"tmdb_id":438631}`)
	if want := "The 2021 Dune is TMDB id 438631; I add it to Radarr."; resp.Explanation != want {
		t.Errorf("explanation %q, want %q", resp.Explanation, want)
	}
	if len(resp.Steps) != 2 || resp.Steps[0].Action != "tmdb_search" || resp.Steps[1].Action != "radarr_add" ||
		resp.Steps[0].Error != "" || !strings.Contains(resp.Steps[0].Observation, `"id":438631`) || resp.Steps[1].Observation != "" {
		t.Errorf("steps before the approval: %+v", resp.Steps)
	}

	// TMDB got exactly the search, with the v3 key as api_key and the
	// default language; the key is never a header.
	got := s.tmdb.requests()
	if len(got) != 1 {
		t.Fatalf("TMDB got %d requests, want 1: %q", len(got), s.tmdb.lines())
	}
	wantQuery := url.Values{"query": {"Dune"}, "year": {"2021"}, "include_adult": {"false"}, "language": {"en-US"}, "api_key": {mediaTMDBKey}}
	if r := got[0]; r.Method != http.MethodGet || r.Path != "/3/search/movie" || !reflect.DeepEqual(r.Query, wantQuery) {
		t.Errorf("TMDB request %s, want GET /3/search/movie?%s", r.line(), wantQuery.Encode())
	}
	if a := got[0].Header.Get("Authorization"); a != "" {
		t.Errorf("TMDB request with a v3 key carries Authorization %q", a)
	}

	// Radarr must not hear of the add before the user says yes.
	if lines := s.radarr.lines(); len(lines) != 0 {
		t.Errorf("Radarr was called before the approval: %q", lines)
	}

	// The model was asked twice: the second time with TMDB's answer.
	reqs := s.ollama.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model was asked %d times before the approval, want 2", len(reqs))
	}
	var format bytes.Buffer
	_ = json.Compact(&format, reqs[0].Format)
	for _, tool := range []string{"tmdb_search", "radarr_add"} {
		if !strings.Contains(format.String(), `"const":"`+tool+`"`) {
			t.Errorf("the reply schema sent to the model lacks %s: %s", tool, reqs[0].Format)
		}
	}
	obs := lastUserMessage(reqs[1])
	if !strings.HasPrefix(obs, "Result of tmdb_search:\n") || !strings.Contains(obs, `{"id":438631,"title":"Dune","year":2021`) {
		t.Errorf("the model was told after tmdb_search:\n%s", obs)
	}
	return resp
}

// mediaWantItems checks a session's one turn: its status and its items' types
// and tools.
func mediaWantItems(t *testing.T, v server.SessionView, status string, want ...string) []server.Item {
	t.Helper()
	if len(v.Turns) != 1 {
		t.Fatalf("session has %d turns, want 1: %+v", len(v.Turns), v.Turns)
	}
	return mediaWantTurn(t, v.Turns[0], status, want...)
}

// mediaWantTurn checks a turn's status and its items' types and tools.
func mediaWantTurn(t *testing.T, turn server.TurnView, status string, want ...string) []server.Item {
	t.Helper()
	var got []string
	for _, it := range turn.Items {
		got = append(got, strings.TrimSuffix(it.Type+" "+it.Tool, " "))
	}
	if !slices.Equal(got, want) || turn.Status != status {
		t.Errorf("turn %s with items %q\nwant %s with %q", turn.Status, got, status, want)
	}
	return turn.Items
}

func mediaJSONEqual(t *testing.T, what, got, want string) {
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
		t.Errorf("%s:\n%s\nwant:\n%s", what, got, want)
	}
}

// noSecrets checks that neither service key reached the daemon's log or a
// response body.
func (s *mediaStack) noSecrets(t *testing.T, bodies ...string) {
	t.Helper()
	for _, key := range []string{mediaTMDBKey, mediaRadarrKey} {
		if strings.Contains(s.logs.String(), key) {
			t.Errorf("a service key reached the daemon's log")
		}
		for _, b := range bodies {
			if strings.Contains(b, key) {
				t.Errorf("a service key reached a response: %s", b)
			}
		}
	}
}

func TestMediaAddApproved(t *testing.T) {
	s := startMediaStack(t)
	pending := s.askForDune(t, ollamatest.Reply{Content: `{"thought":"Radarr has it now.","action":"final_response","args":{"answer":"Added Dune (2021) to Radarr."}}`})

	approve := server.RespondRequest{SessionID: pending.SessionID, ApprovalID: pending.ApprovalID, Decision: "approve"}
	resp := s.chatResponse(t, "/v1/chat/respond", approve)
	if resp.Type != server.TypeAnswer || resp.Answer != "Added Dune (2021) to Radarr." || resp.SessionID != pending.SessionID || resp.ApprovalID != "" {
		t.Errorf("respond: %+v", resp)
	}
	const added = `{"added":"Dune (2021)","path":"/movies/Dune (2021)","quality_profile":"Any","root_folder":"/movies","searching":true}`
	if len(resp.Steps) != 2 || resp.Steps[0].Action != "radarr_add" || resp.Steps[0].Error != "" || resp.Steps[1].Action != "final_response" {
		t.Errorf("steps after the approval: %+v", resp.Steps)
	} else {
		mediaJSONEqual(t, "radarr_add's result", resp.Steps[0].Observation, added)
	}

	// Radarr: is it there already, its metadata, where to put it, then the
	// add, every request with the key.
	want := []string{
		"GET /api/v3/movie?tmdbId=438631",
		"GET /api/v3/movie/lookup/tmdb?tmdbId=438631",
		"GET /api/v3/qualityprofile",
		"GET /api/v3/rootfolder",
		"POST /api/v3/movie",
	}
	got := s.radarr.requests()
	if lines := s.radarr.lines(); !slices.Equal(lines, want) {
		t.Fatalf("Radarr got:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, r := range got {
		if k := r.Header.Get("X-Api-Key"); k != mediaRadarrKey {
			t.Errorf("%s: X-Api-Key %q", r.line(), k)
		}
	}
	// The POST is the lookup result, placed in the first profile and root
	// folder, monitored, searched for at once.
	var body map[string]any
	if err := json.Unmarshal([]byte(got[4].Body), &body); err != nil {
		t.Fatalf("POST body is not JSON: %v\n%s", err, got[4].Body)
	}
	for k, v := range map[string]any{
		"tmdbId": float64(mediaDuneID), "title": "Dune", "year": float64(2021), "titleSlug": "438631",
		"qualityProfileId": float64(1), "rootFolderPath": "/movies", "monitored": true, "minimumAvailability": "released",
		"addOptions": map[string]any{"searchForMovie": true},
	} {
		if !reflect.DeepEqual(body[k], v) {
			t.Errorf("POST body %s = %#v, want %#v", k, body[k], v)
		}
	}
	// Nothing else: the rest is the lookup result as Radarr sent it.
	var whole map[string]any
	if err := json.Unmarshal([]byte(mediaDuneLookup), &whole); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"qualityProfileId": 1, "rootFolderPath": "/movies", "monitored": true, "minimumAvailability": "released", "addOptions": map[string]any{"searchForMovie": true}} {
		whole[k] = v
	}
	wholeJSON, _ := json.Marshal(whole)
	mediaJSONEqual(t, "POST body", got[4].Body, string(wholeJSON))

	// The model's third request carries the add's result.
	reqs := s.ollama.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the model was asked %d times, want 3", len(reqs))
	}
	obs := lastUserMessage(reqs[2])
	if !strings.HasPrefix(obs, "Result of radarr_add:\n") {
		t.Errorf("the model was told after radarr_add:\n%s", obs)
	} else {
		mediaJSONEqual(t, "the observation of radarr_add", strings.TrimPrefix(obs, "Result of radarr_add:\n"), added)
	}
	if !mediaHasUserMessage(reqs[2], "Result of tmdb_search:\n") {
		t.Error("the model's last request lost the tmdb_search observation")
	}

	// The session shows the whole turn, once.
	items := mediaWantItems(t, s.session(t, pending.SessionID), "done",
		"user", "tool_call tmdb_search", "tool_result tmdb_search", "tool_call radarr_add", "tool_result radarr_add", "assistant")
	if len(items) == 6 {
		mediaJSONEqual(t, "tool_call radarr_add args", string(items[3].Args), `{"tmdb_id":438631}`)
		mediaJSONEqual(t, "tool_call tmdb_search args", string(items[1].Args), `{"query":"Dune","year":2021}`)
		if items[0].Content != "Add Dune (2021) to my films" || items[5].Content != "Added Dune (2021) to Radarr." ||
			!strings.Contains(items[2].Content, `"id":438631`) || !strings.Contains(items[4].Content, `"added":"Dune (2021)"`) {
			t.Errorf("session items: %+v", items)
		}
	}

	// An approval is used once: a replay runs nothing.
	for _, decision := range []string{"approve", "deny"} {
		replay := approve
		replay.Decision = decision
		code, out := s.post(t, "/v1/chat/respond", replay)
		var e server.ErrorBody
		if code != http.StatusConflict || json.Unmarshal(out, &e) != nil || e.Error.Code != "approval_used" {
			t.Errorf("replayed %s: %d %s", decision, code, out)
		}
	}
	if n := len(s.radarr.requests()); n != len(want) {
		t.Errorf("Radarr got %d more requests after the replays: %q", n-len(want), s.radarr.lines()[len(want):])
	}
	if n := len(s.ollama.Requests()); n != 3 {
		t.Errorf("the model was asked %d more times after the replays", n-3)
	}
	if n := len(s.tmdb.requests()); n != 1 {
		t.Errorf("TMDB got %d requests in all, want 1", n)
	}
	_, sessionBody := apiGet(t, s.addr, "/v1/sessions/"+pending.SessionID)
	s.noSecrets(t, string(sessionBody))
}

func TestMediaAddDenied(t *testing.T) {
	s := startMediaStack(t)
	pending := s.askForDune(t, ollamatest.Reply{Content: `{"thought":"The user said no.","action":"final_response","args":{"answer":"All right, I did not add Dune (2021)."}}`})

	deny := server.RespondRequest{SessionID: pending.SessionID, ApprovalID: pending.ApprovalID, Decision: "deny"}
	resp := s.chatResponse(t, "/v1/chat/respond", deny)
	if resp.Type != server.TypeAnswer || resp.Answer != "All right, I did not add Dune (2021)." {
		t.Errorf("respond: %+v", resp)
	}
	if len(resp.Steps) != 2 || resp.Steps[0].Action != "radarr_add" || resp.Steps[0].Error != "the user declined this call" || resp.Steps[0].Observation != "" {
		t.Errorf("steps after the denial: %+v", resp.Steps)
	}
	if lines := s.radarr.lines(); len(lines) != 0 {
		t.Errorf("Radarr was called although the user said no: %q", lines)
	}

	reqs := s.ollama.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the model was asked %d times, want 3", len(reqs))
	}
	const declined = "radarr_add was not run: the user declined it. Do not call it again for this request; answer without it."
	if obs := lastUserMessage(reqs[2]); obs != declined {
		t.Errorf("the model was told after the denial:\n%s\nwant:\n%s", obs, declined)
	}

	items := mediaWantItems(t, s.session(t, pending.SessionID), "done",
		"user", "tool_call tmdb_search", "tool_result tmdb_search", "tool_call radarr_add", "tool_result radarr_add", "assistant")
	if len(items) == 6 && items[4].Content != declined {
		t.Errorf("the session shows radarr_add's result as %q", items[4].Content)
	}

	code, out := s.post(t, "/v1/chat/respond", server.RespondRequest{SessionID: pending.SessionID, ApprovalID: pending.ApprovalID, Decision: "approve"})
	if code != http.StatusConflict || !strings.Contains(string(out), "approval_used") {
		t.Errorf("approving after the denial: %d %s", code, out)
	}
	if lines := s.radarr.lines(); len(lines) != 0 {
		t.Errorf("Radarr was called after a late approval: %q", lines)
	}
	s.noSecrets(t)
}

// A new message instead of an answer is a "not now": the paused call never
// runs, the model reads so, and the approval cannot be used afterwards.
func TestMediaAddSuperseded(t *testing.T) {
	s := startMediaStack(t)
	pending := s.askForDune(t, ollamatest.Reply{Content: `{"thought":"The user moved on.","action":"final_response","args":{"answer":"Fine, Dune stays out of Radarr."}}`})

	resp := s.chatResponse(t, "/v1/chat", server.ChatRequest{SessionID: pending.SessionID, Message: "Actually, leave it."})
	if resp.Type != server.TypeAnswer || resp.Answer != "Fine, Dune stays out of Radarr." {
		t.Errorf("chat: %+v", resp)
	}
	reqs := s.ollama.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the model was asked %d times, want 3", len(reqs))
	}
	// The closed call, then the new message.
	msgs := reqs[2].Messages
	const superseded = "radarr_add was not run: the user sent a new message instead of approving it."
	if n := len(msgs); n < 2 || msgs[n-1].Content != "Actually, leave it." || msgs[n-2].Content != superseded {
		t.Errorf("the model's request after the new message ends with:\n%+v", msgs[max(0, len(msgs)-3):])
	}

	code, out := s.post(t, "/v1/chat/respond", server.RespondRequest{SessionID: pending.SessionID, ApprovalID: pending.ApprovalID, Decision: "approve"})
	if code != http.StatusConflict || !strings.Contains(string(out), "approval_used") {
		t.Errorf("approving a superseded request: %d %s", code, out)
	}
	if lines := s.radarr.lines(); len(lines) != 0 {
		t.Errorf("Radarr was called for a superseded request: %q", lines)
	}
	if n := len(s.ollama.Requests()); n != 3 {
		t.Errorf("the model was asked %d more times after the late approval", n-3)
	}

	v := s.session(t, pending.SessionID)
	if len(v.Turns) != 2 {
		t.Fatalf("session has %d turns, want 2: %+v", len(v.Turns), v.Turns)
	}
	items := mediaWantTurn(t, v.Turns[0], "cancelled", "user", "tool_call tmdb_search", "tool_result tmdb_search", "tool_call radarr_add", "tool_result radarr_add")
	if len(items) == 5 && items[4].Content != superseded {
		t.Errorf("the session shows radarr_add's result as %q", items[4].Content)
	}
	mediaWantTurn(t, v.Turns[1], "done", "user", "assistant")
}

// mediaHasUserMessage reports whether any user message of req starts with prefix.
func mediaHasUserMessage(req api.ChatRequest, prefix string) bool {
	for _, m := range req.Messages {
		if m.Role == "user" && strings.HasPrefix(m.Content, prefix) {
			return true
		}
	}
	return false
}
