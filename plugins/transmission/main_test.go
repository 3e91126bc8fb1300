package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/plugins/internal/human"
)

const (
	testUser = "mmcp"
	testPass = "hunter2-secret"
	rpcPath  = "/transmission/rpc"
)

// fake is a Transmission RPC endpoint as rpc-spec.md describes it: basic
// auth first (401), then the session id (409 with the right one), then the
// answer for the RPC method. It records every request it gets.
type fake struct {
	mu       sync.Mutex
	session  string
	answers  map[string]string // RPC method -> response body
	requests []request
}

// request is what the fake saw of one HTTP request.
type request struct {
	HTTPMethod, Path, ContentType, Auth, Session string
	Method                                       string
	Arguments                                    string // compact JSON, keys sorted
	Tag                                          int64
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Method    string          `json:"method"`
		Arguments json.RawMessage `json:"arguments"`
		Tag       int64           `json:"tag"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	args := ""
	if body.Arguments != nil {
		var v any
		json.Unmarshal(body.Arguments, &v)
		var b strings.Builder // re-encoded: map keys come out sorted
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(v)
		args = strings.TrimSpace(b.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, request{
		HTTPMethod: r.Method, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"),
		Auth: r.Header.Get("Authorization"), Session: r.Header.Get(sessionHeader),
		Method: body.Method, Arguments: args, Tag: body.Tag,
	})
	if r.URL.Path != rpcPath {
		http.NotFound(w, r)
		return
	}
	if u, p, ok := r.BasicAuth(); !ok || u != testUser || p != testPass {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, "<h1>401: Unauthorized</h1>Unauthorized User")
		return
	}
	if r.Header.Get(sessionHeader) != f.session {
		w.Header().Set(sessionHeader, f.session)
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, "<h1>409: Conflict</h1><p>Your request had an invalid session-id header.</p><p><code>%s: %s</code></p>", sessionHeader, f.session)
		return
	}
	answer, ok := f.answers[body.Method]
	if !ok {
		answer = `{"arguments":{},"result":"method name not recognized"}`
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	fmt.Fprint(w, answer)
}

func (f *fake) setSession(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.session = id
}

// calls are the requests that got past auth and the handshake, as
// "method arguments".
func (f *fake) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.requests {
		if r.Session == f.session {
			out = append(out, r.Method+" "+r.Arguments)
		}
	}
	return out
}

// setup starts a fake Transmission answering with answers and a plugin
// configured for it, with a session already agreed on.
func setup(t *testing.T, answers map[string]string) (*fake, pluginpb.PluginServer) {
	t.Helper()
	f := &fake{session: "sid-1", answers: answers}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Setenv(envURL, srv.URL+rpcPath)
	t.Setenv(envUser, testUser)
	t.Setenv(envPass, testPass)
	return f, newPlugin(5 * time.Second).Server()
}

// Realistic torrent-get answers (rpc-spec 3.3), with the fields list asks for.
const torrentsFixture = `{"arguments":{"torrents":[
 {"downloadDir":"/srv/downloads","error":0,"errorString":"","eta":754,"id":1,"name":"ubuntu-24.04-desktop-amd64.iso","percentDone":0.4531,"rateDownload":1234567,"rateUpload":20480,"status":4,"totalSize":6114656256},
 {"downloadDir":"/srv/media/movies","error":0,"errorString":"","eta":-1,"id":2,"name":"Big.Buck.Bunny.2008.1080p","percentDone":1,"rateDownload":0,"rateUpload":512000,"status":6,"totalSize":928670754},
 {"downloadDir":"/srv/downloads","error":2,"errorString":"Tracker gave HTTP response code 404 (Not Found)","eta":-1,"id":3,"name":"debian-12.5.0-amd64-netinst.iso","percentDone":0.1,"rateDownload":0,"rateUpload":0,"status":0,"totalSize":659554304},
 {"downloadDir":"/srv/downloads","error":0,"errorString":"","eta":-2,"id":4,"name":"Sintel.2010.720p","percentDone":0,"rateDownload":0,"rateUpload":0,"status":3,"totalSize":1234},
 {"downloadDir":"/srv/downloads","error":0,"errorString":"","eta":-1,"id":5,"name":"archlinux-2024.05.01-x86_64.iso","percentDone":1,"rateDownload":0,"rateUpload":0,"status":0,"totalSize":1101352960}
]},"result":"success","tag":1}`

const listRequest = `torrent-get {"fields":["id","name","percentDone","rateDownload","rateUpload","eta","status","error","errorString","totalSize","downloadDir"]}`

func TestDescribe(t *testing.T) {
	_, s := setup(t, nil)
	d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "transmission" || d.Version != "1.0.0" || len(d.SettingProblems) != 0 {
		t.Errorf("describe: %v", d)
	}
	wantTools := []struct {
		name     string
		approval bool
		schema   []string // parts the argument schema must have
	}{
		{"transmission_list", false, []string{`"enum":["all","downloading","seeding","paused","done"]`, `"default":"all"`}},
		{"transmission_add", false, []string{`"required":["source"]`, `"paused":{"type":"boolean"`, `"download_dir":{"type":"string"`}},
		{"transmission_pause", false, []string{`"required":["ids"]`, `"minItems":1`, `"items":{"type":"integer"}`}},
		{"transmission_resume", false, []string{`"required":["ids"]`, `"minItems":1`}},
		{"transmission_remove", true, []string{`"required":["ids"]`, `"delete_data":{"type":"boolean"`, `"default":false`}},
	}
	if len(d.Tools) != len(wantTools) {
		t.Fatalf("tools: %v", d.Tools)
	}
	for i, w := range wantTools {
		got := d.Tools[i]
		if got.Name != w.name || got.NeedsApproval != w.approval {
			t.Errorf("tool %d: %s approval=%v, want %s approval=%v", i, got.Name, got.NeedsApproval, w.name, w.approval)
		}
		for _, part := range w.schema {
			if !strings.Contains(string(got.ArgsSchema), part) {
				t.Errorf("%s schema lacks %s: %s", got.Name, part, got.ArgsSchema)
			}
		}
	}
	settings := map[string]*pluginpb.Setting{}
	for _, st := range d.Settings {
		settings[st.Key] = st
	}
	if u := settings["URL"]; u == nil || u.Default != "http://127.0.0.1:9091/transmission/rpc" || u.Required || u.Secret {
		t.Errorf("URL setting: %v", u)
	}
	if u := settings["USERNAME"]; u == nil || u.Required || u.Secret {
		t.Errorf("USERNAME setting: %v", u)
	}
	if p := settings["PASSWORD"]; p == nil || !p.Secret || p.Required || p.Default != "" {
		t.Errorf("PASSWORD setting: %v", p)
	}
	if len(d.Settings) != 3 {
		t.Errorf("settings: %v", d.Settings)
	}
	if len(d.Contexts) != 1 || d.Contexts[0].Key != "downloads" {
		t.Errorf("contexts: %v", d.Contexts)
	}
}

func TestList(t *testing.T) {
	f, s := setup(t, map[string]string{"torrent-get": torrentsFixture})
	r := callTool(t, s, "transmission_list", `{}`)
	want := `{"torrents":[` +
		`{"id":1,"name":"ubuntu-24.04-desktop-amd64.iso","status":"downloading","percent":45.3,"down":"1.2 MB/s","up":"20.5 kB/s","eta":"12m","size":"6.1 GB","dir":"/srv/downloads"},` +
		`{"id":4,"name":"Sintel.2010.720p","status":"queued to download","percent":0,"eta":"unknown","size":"1.2 kB","dir":"/srv/downloads"},` +
		`{"id":2,"name":"Big.Buck.Bunny.2008.1080p","status":"seeding","percent":100,"up":"512.0 kB/s","eta":"done","size":"928.7 MB","dir":"/srv/media/movies"},` +
		`{"id":3,"name":"debian-12.5.0-amd64-netinst.iso","status":"stopped","percent":10,"eta":"unknown","size":"659.6 MB","dir":"/srv/downloads","error":"tracker error: Tracker gave HTTP response code 404 (Not Found)"},` +
		`{"id":5,"name":"archlinux-2024.05.01-x86_64.iso","status":"stopped","percent":100,"eta":"done","size":"1.1 GB","dir":"/srv/downloads"}],` +
		`"totals":{"torrents":5,"downloading":2,"seeding":1,"stopped":2,"with_errors":1,"down":"1.2 MB/s","up":"532.5 kB/s","size":"8.8 GB"}}`
	if r.Error != "" || string(r.Result) != want {
		t.Errorf("list:\n%s\n%q\nwant\n%s", r.Result, r.Error, want)
	}
	if got := f.calls(); len(got) != 1 || got[0] != listRequest {
		t.Errorf("requests: %q", got)
	}
	req := f.requests[len(f.requests)-1]
	if req.HTTPMethod != "POST" || req.Path != rpcPath || req.ContentType != "application/json" || req.Tag <= 0 ||
		req.Auth != "Basic "+base64.StdEncoding.EncodeToString([]byte(testUser+":"+testPass)) {
		t.Errorf("request: %+v", req)
	}
}

func TestListFilters(t *testing.T) {
	_, s := setup(t, map[string]string{"torrent-get": torrentsFixture})
	for filter, want := range map[string][]int{
		"all":         {1, 4, 2, 3, 5},
		"downloading": {1, 4},
		"seeding":     {2},
		"paused":      {3, 5},
		"done":        {2, 5},
	} {
		var res listResult
		r := callTool(t, s, "transmission_list", fmt.Sprintf(`{"filter":%q}`, filter))
		if err := json.Unmarshal(r.Result, &res); err != nil || r.Error != "" {
			t.Fatalf("%s: %s %q", filter, r.Result, r.Error)
		}
		var ids []int
		for _, tr := range res.Torrents {
			ids = append(ids, tr.ID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(want) || res.Totals.Torrents != len(want) {
			t.Errorf("%s: ids %v totals %+v, want %v", filter, ids, res.Totals, want)
		}
	}
	if r := callTool(t, s, "transmission_list", `{"filter":"stalled"}`); !strings.HasPrefix(r.Error, "invalid arguments: ") {
		t.Errorf("unknown filter: %q", r.Error)
	}
}

func TestListCut(t *testing.T) {
	var ts []string
	for i := 1; i <= 23; i++ {
		ts = append(ts, fmt.Sprintf(`{"downloadDir":"/d","error":0,"errorString":"","eta":%d,"id":%d,"name":"t%d","percentDone":0.5,"rateDownload":1000,"rateUpload":0,"status":4,"totalSize":1000000}`, i*60, i, i))
	}
	_, s := setup(t, map[string]string{"torrent-get": `{"arguments":{"torrents":[` + strings.Join(ts, ",") + `]},"result":"success"}`})
	var res listResult
	r := callTool(t, s, "transmission_list", `{}`)
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatal(err, r.Error)
	}
	if len(res.Torrents) != 20 || res.More != 3 || res.Totals.Torrents != 23 || res.Totals.Down != "23.0 kB/s" || res.Totals.Size != "23.0 MB" {
		t.Errorf("cut: %d shown, %+v", len(res.Torrents), res)
	}
	if !strings.Contains(string(r.Result), `"more":3`) {
		t.Errorf("result does not say how many more: %s", r.Result)
	}
}

func TestListEmpty(t *testing.T) {
	_, s := setup(t, map[string]string{"torrent-get": `{"arguments":{"torrents":[]},"result":"success"}`})
	want := `{"torrents":[],"totals":{"torrents":0,"downloading":0,"seeding":0,"stopped":0,"down":"0 B/s","up":"0 B/s","size":"0 B"}}`
	if r := callTool(t, s, "transmission_list", `{}`); string(r.Result) != want {
		t.Errorf("empty list: %s %q", r.Result, r.Error)
	}
}

func TestAdd(t *testing.T) {
	const magnet = "magnet:?xt=urn:btih:08ada5a7a6183aae1e09d831df6748d566095a10&dn=Sintel"
	added := `{"arguments":{"torrent-added":{"hashString":"08ada5a7a6183aae1e09d831df6748d566095a10","id":7,"name":"Sintel"}},"result":"success","tag":3}`
	duplicate := `{"arguments":{"torrent-duplicate":{"hashString":"08ada5a7a6183aae1e09d831df6748d566095a10","id":7,"name":"Sintel"}},"result":"success","tag":4}`
	cases := []struct {
		name, args, answer string
		wantReq, want      string
	}{
		{"magnet", `{"source":"` + magnet + `"}`, added,
			`torrent-add {"filename":"` + magnet + `"}`,
			`{"result":"added","id":7,"name":"Sintel"}`},
		{"url paused into a folder", `{"source":" https://example.org/sintel.torrent ","download_dir":"/srv/movies","paused":true}`, added,
			`torrent-add {"download-dir":"/srv/movies","filename":"https://example.org/sintel.torrent","paused":true}`,
			`{"result":"added","id":7,"name":"Sintel","paused":true}`},
		{"started on purpose", `{"source":"http://example.org/sintel.torrent","paused":false}`, added,
			`torrent-add {"filename":"http://example.org/sintel.torrent","paused":false}`,
			`{"result":"added","id":7,"name":"Sintel"}`},
		{"duplicate", `{"source":"` + magnet + `"}`, duplicate,
			`torrent-add {"filename":"` + magnet + `"}`,
			`{"result":"already present","id":7,"name":"Sintel"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, s := setup(t, map[string]string{"torrent-add": c.answer})
			r := callTool(t, s, "transmission_add", c.args)
			if r.Error != "" || string(r.Result) != c.want {
				t.Errorf("result %s %q, want %s", r.Result, r.Error, c.want)
			}
			if got := f.calls(); len(got) != 1 || got[0] != c.wantReq {
				t.Errorf("requests %q, want %q", got, c.wantReq)
			}
		})
	}
}

func TestAddRefused(t *testing.T) {
	for answer, want := range map[string]string{
		`{"arguments":{},"result":"invalid or corrupt torrent file"}`:               "Transmission could not add the torrent: invalid or corrupt torrent file",
		`{"arguments":{},"result":"gotMetadataFromURL: http error 404: Not Found"}`: "Transmission could not add the torrent: gotMetadataFromURL: http error 404: Not Found",
		`{"arguments":{},"result":"duplicate torrent"}`:                             "Transmission already has this torrent; transmission_list shows it",
		`{"arguments":{},"result":"success"}`:                                       "Transmission answered torrent-add without naming the torrent: unexpected response",
	} {
		_, s := setup(t, map[string]string{"torrent-add": answer})
		if r := callTool(t, s, "transmission_add", `{"source":"https://example.org/x.torrent"}`); r.Error != want {
			t.Errorf("%s: %q\nwant %q", answer, r.Error, want)
		}
	}
}

func TestAddBadSource(t *testing.T) {
	f, s := setup(t, nil)
	for source, want := range map[string]string{
		"ftp://example.org/x.torrent": `source must be a magnet: link or an http(s) URL of a .torrent file, not "ftp://example.org/x.torrent"`,
		"/etc/passwd":                 `source must be a magnet: link or an http(s) URL of a .torrent file, not "/etc/passwd"`,
		"file:///srv/x.torrent":       `source must be a magnet: link or an http(s) URL of a .torrent file, not "file:///srv/x.torrent"`,
		"magnet:?dn=Sintel":           `source "magnet:?dn=Sintel" is a magnet link without a torrent hash (xt=urn:btih:...)`,
		"http:///x.torrent":           `source "http:///x.torrent" is a URL without a host`,
		"":                            "invalid arguments: ",
	} {
		if r := callTool(t, s, "transmission_add", fmt.Sprintf(`{"source":%q}`, source)); !strings.HasPrefix(r.Error, want) {
			t.Errorf("%q: %q\nwant %q", source, r.Error, want)
		}
	}
	if len(f.requests) != 0 {
		t.Errorf("a bad source reached Transmission: %+v", f.requests)
	}
}

func TestActions(t *testing.T) {
	found := `{"arguments":{"torrents":[{"id":1,"name":"ubuntu-24.04-desktop-amd64.iso"},{"id":2,"name":"Big.Buck.Bunny.2008.1080p"}]},"result":"success"}`
	ok := `{"arguments":{},"result":"success"}`
	refs := `[{"id":1,"name":"ubuntu-24.04-desktop-amd64.iso"},{"id":2,"name":"Big.Buck.Bunny.2008.1080p"}]`
	cases := []struct {
		tool, args string
		wantReqs   []string
		want       string
	}{
		{"transmission_pause", `{"ids":[2,1,2]}`,
			[]string{`torrent-get {"fields":["id","name"],"ids":[1,2]}`, `torrent-stop {"ids":[1,2]}`},
			`{"done":"paused","torrents":` + refs + `}`},
		{"transmission_resume", `{"ids":[1,2]}`,
			[]string{`torrent-get {"fields":["id","name"],"ids":[1,2]}`, `torrent-start {"ids":[1,2]}`},
			`{"done":"resumed","torrents":` + refs + `}`},
		{"transmission_remove", `{"ids":[1,2]}`,
			[]string{`torrent-get {"fields":["id","name"],"ids":[1,2]}`, `torrent-remove {"delete-local-data":false,"ids":[1,2]}`},
			`{"done":"removed","torrents":` + refs + `}`},
		{"transmission_remove", `{"ids":[1,2],"delete_data":true}`,
			[]string{`torrent-get {"fields":["id","name"],"ids":[1,2]}`, `torrent-remove {"delete-local-data":true,"ids":[1,2]}`},
			`{"done":"removed","torrents":` + refs + `,"data_deleted":true}`},
	}
	for _, c := range cases {
		f, s := setup(t, map[string]string{"torrent-get": found, "torrent-stop": ok, "torrent-start": ok, "torrent-remove": ok})
		r := callTool(t, s, c.tool, c.args)
		if r.Error != "" || string(r.Result) != c.want {
			t.Errorf("%s %s: %s %q\nwant %s", c.tool, c.args, r.Result, r.Error, c.want)
		}
		if got := f.calls(); fmt.Sprint(got) != fmt.Sprint(c.wantReqs) {
			t.Errorf("%s %s: requests %q\nwant %q", c.tool, c.args, got, c.wantReqs)
		}
	}
}

func TestActionsUnknownIDs(t *testing.T) {
	found := `{"arguments":{"torrents":[{"id":1,"name":"ubuntu-24.04-desktop-amd64.iso"}]},"result":"success"}`
	cases := map[string]string{
		"transmission_pause":  "Transmission has no torrent with ids 7, 9 (transmission_list shows the ids); nothing was paused",
		"transmission_resume": "Transmission has no torrent with ids 7, 9 (transmission_list shows the ids); nothing was resumed",
		"transmission_remove": "Transmission has no torrent with ids 7, 9 (transmission_list shows the ids); nothing was removed",
	}
	for tool, want := range cases {
		f, s := setup(t, map[string]string{"torrent-get": found})
		if r := callTool(t, s, tool, `{"ids":[9,1,7]}`); r.Error != want {
			t.Errorf("%s: %q\nwant %q", tool, r.Error, want)
		}
		if got := f.calls(); len(got) != 1 || got[0] != `torrent-get {"fields":["id","name"],"ids":[1,7,9]}` {
			t.Errorf("%s acted on unknown ids: %q", tool, got)
		}
	}
	_, s := setup(t, map[string]string{"torrent-get": `{"arguments":{"torrents":[]},"result":"success"}`})
	if r := callTool(t, s, "transmission_pause", `{"ids":[4]}`); !strings.HasPrefix(r.Error, "Transmission has no torrent with id 4 (") {
		t.Errorf("one unknown id: %q", r.Error)
	}
	if r := callTool(t, s, "transmission_pause", `{"ids":[]}`); !strings.HasPrefix(r.Error, "invalid arguments: ") {
		t.Errorf("no ids: %q", r.Error)
	}
}

func TestDownloadsContext(t *testing.T) {
	f, s := setup(t, map[string]string{"torrent-get": torrentsFixture})
	c, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "downloads"})
	if err != nil || c.Text != "1 downloading at 1.2 MB/s, nearest done in 12m, 1 queued; 1 seeding; 1 with errors" {
		t.Errorf("context: %v %v", c, err)
	}
	if got := f.calls(); len(got) != 1 || got[0] != `torrent-get {"fields":["id","status","rateDownload","eta","percentDone","error"]}` {
		t.Errorf("requests: %q", got)
	}
}

func TestDownloadsLine(t *testing.T) {
	cases := []struct {
		torrents []torrent
		want     string
	}{
		{nil, "nothing downloading"},
		{[]torrent{{Status: statusSeed}, {Status: statusSeed}, {Status: statusStopped}}, "nothing downloading; 2 seeding"},
		{[]torrent{{Status: statusDownload, RateDownload: 2_500_000, ETA: 7200}, {Status: statusDownload, RateDownload: 600_000, ETA: 720}, {Status: statusSeed}},
			"2 downloading at 3.1 MB/s, nearest done in 12m; 1 seeding"},
		{[]torrent{{Status: statusDownload, ETA: -1}}, "1 downloading at 0 B/s"},
		{[]torrent{{Status: statusDownloadWait}}, "nothing downloading, 1 queued"},
	}
	for _, c := range cases {
		if got := downloadsLine(c.torrents); got != c.want {
			t.Errorf("%+v: %q, want %q", c.torrents, got, c.want)
		}
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 1234567: "1.2 MB", 999_999: "1.0 MB", 6114656256: "6.1 GB", 3e15: "3.0 PB"} {
		if got := human.Decimal.Size(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
	if got := human.Decimal.Rate(1_200_000); got != "1.2 MB/s" {
		t.Errorf("rate: %q", got)
	}
	for s, want := range map[int64]string{0: "0s", 45: "45s", 754: "12m", 3600: "1h", 3900: "1h 5m", 86400: "1d", 183600: "2d 3h"} {
		if got := eta(s, 0.5); got != want {
			t.Errorf("eta(%d) = %q, want %q", s, got, want)
		}
	}
	if eta(-1, 0.5) != "unknown" || eta(-2, 0.5) != "unknown" || eta(-1, 1) != "done" || eta(30, 1) != "done" {
		t.Error("eta of unknown or done torrents")
	}
	for done, want := range map[float64]float64{0: 0, 0.291: 29.1, 0.4531: 45.3, 0.99999: 99.9, 1: 100} {
		if got := human.Percent(done); got != want {
			t.Errorf("percent(%v) = %v, want %v", done, got, want)
		}
	}
	if got := statusWord(9); got != "status 9" {
		t.Errorf("unknown status: %q", got)
	}
	if got := errorText(3, "No data found! Ensure your drives are connected"); got != "local error: No data found! Ensure your drives are connected" {
		t.Errorf("errorText: %q", got)
	}
}

// TestHandshake: the first request has no session id and gets a 409; the
// id that comes with it is used from then on, until Transmission hands out
// another one.
func TestHandshake(t *testing.T) {
	f, s := setup(t, map[string]string{
		"torrent-get":  `{"arguments":{"torrents":[{"id":1,"name":"a"}]},"result":"success"}`,
		"torrent-stop": `{"arguments":{},"result":"success"}`,
	})
	if r := callTool(t, s, "transmission_list", `{}`); r.Error != "" {
		t.Fatal(r.Error)
	}
	f.setSession("sid-2") // Transmission restarted, or expired the id
	if r := callTool(t, s, "transmission_pause", `{"ids":[1]}`); r.Error != "" {
		t.Fatal(r.Error)
	}
	var got []string
	for _, r := range f.requests {
		got = append(got, fmt.Sprintf("%s %s %d", r.Session, r.Method, r.Tag))
	}
	want := []string{
		" torrent-get 1", "sid-1 torrent-get 1", // the handshake resends the same request
		"sid-1 torrent-get 2", "sid-2 torrent-get 2", // a stale id is replaced mid-way
		"sid-2 torrent-stop 3",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests (session method tag):\n%q\nwant\n%q", got, want)
	}
}

func TestHandshakeFails(t *testing.T) {
	n := 0
	cases := map[string]http.HandlerFunc{
		"Transmission refused its own session id twice for torrent-get (409); try again: conflict": func(w http.ResponseWriter, r *http.Request) {
			n++
			w.Header().Set(sessionHeader, fmt.Sprintf("sid-%d", n))
			w.WriteHeader(http.StatusConflict)
		},
		"Transmission answered torrent-get with 409 but no session id; check that MMCP_PLUGIN_TRANSMISSION_URL is Transmission's RPC URL: unexpected response": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusConflict)
		},
	}
	for want, h := range cases {
		s := pluginFor(t, h)
		if r := callTool(t, s, "transmission_list", `{}`); r.Error != want {
			t.Errorf("%q\nwant %q", r.Error, want)
		}
	}
}

func callTool(t *testing.T, s pluginpb.PluginServer, tool, args string) *pluginpb.CallResponse {
	t.Helper()
	r, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: tool, Args: []byte(args)})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return r
}

// pluginFor is a plugin whose Transmission is h.
func pluginFor(t *testing.T, h http.Handler) pluginpb.PluginServer {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Setenv(envURL, srv.URL+rpcPath)
	t.Setenv(envUser, testUser)
	t.Setenv(envPass, testPass)
	return newPlugin(300 * time.Millisecond).Server()
}

func TestAuth(t *testing.T) {
	f, _ := setup(t, nil)
	t.Setenv(envPass, "wrong-password")
	s := newPlugin(5 * time.Second).Server()
	want := "Transmission refused the credentials (401); check MMCP_PLUGIN_TRANSMISSION_USERNAME and MMCP_PLUGIN_TRANSMISSION_PASSWORD: credentials refused"
	if r := callTool(t, s, "transmission_list", `{}`); r.Error != want {
		t.Errorf("wrong password: %q\nwant %q", r.Error, want)
	}

	t.Setenv(envUser, "")
	t.Setenv(envPass, "")
	s = newPlugin(5 * time.Second).Server()
	want = "Transmission requires a user name and password (401); set MMCP_PLUGIN_TRANSMISSION_USERNAME and MMCP_PLUGIN_TRANSMISSION_PASSWORD: credentials refused"
	if r := callTool(t, s, "transmission_list", `{}`); r.Error != want {
		t.Errorf("no credentials: %q\nwant %q", r.Error, want)
	}
	if last := f.requests[len(f.requests)-1]; last.Auth != "" {
		t.Errorf("sent an Authorization header without credentials: %q", last.Auth)
	}
}

func TestHTTPErrors(t *testing.T) {
	const forbidden = "<h1>403: Forbidden</h1><p>Unauthorized IP Address.</p><p>Either disable the IP address whitelist or add your address to it.</p>"
	cases := []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"403", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(403); fmt.Fprint(w, forbidden) },
			"Transmission refused access (403): 403: Forbidden Unauthorized IP Address. Either disable the IP address whitelist or add your address to it.; check rpc-whitelist in its settings.json, MMCP_PLUGIN_TRANSMISSION_USERNAME and MMCP_PLUGIN_TRANSMISSION_PASSWORD: credentials refused"},
		{"404", http.NotFound,
			"Transmission: no RPC endpoint at URL (404); check MMCP_PLUGIN_TRANSMISSION_URL (it usually ends in /transmission/rpc): not found"},
		{"421", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(421) },
			"Transmission refused the host name of MMCP_PLUGIN_TRANSMISSION_URL (421); add it to rpc-host-whitelist in its settings.json or use an IP address: credentials refused"},
		{"429", func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Retry-After", "7"); w.WriteHeader(429) },
			"Transmission is rate limiting requests; try again in 7s: rate limited"},
		{"500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "disk full", 500) },
			"Transmission failed (500 Internal Server Error on torrent-get): disk full: service error"},
		{"400", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad request", 400) },
			"Transmission refused torrent-get (400 Bad Request): bad request: unexpected response"},
		{"html", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "<html><body>Transmission Web</body></html>")
		},
			"Transmission answered torrent-get with something that is not an RPC answer (invalid character '<' looking for beginning of value); check that MMCP_PLUGIN_TRANSMISSION_URL is Transmission's RPC URL: unexpected response"},
		{"no result", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"arguments":{}}`) },
			"Transmission answered torrent-get with something that is not an RPC answer (no result); check that MMCP_PLUGIN_TRANSMISSION_URL is Transmission's RPC URL: unexpected response"},
		{"wrong shape", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"arguments":{"torrents":{"id":1}},"result":"success"}`)
		}, "Transmission answered torrent-get with arguments of an unexpected shape (json: cannot unmarshal object into Go struct field torrentList.torrents of type []main.torrent): unexpected response"},
		{"rpc error", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"arguments":{},"result":"invalid argument"}`)
		},
			"Transmission refused torrent-get: invalid argument"},
		{"slow", hang,
			"Transmission did not answer within 300ms at URL: service unreachable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := pluginFor(t, c.h)
			want := strings.ReplaceAll(c.want, " at URL", " at "+os.Getenv(envURL))
			if r := callTool(t, s, "transmission_list", `{}`); r.Error != want {
				t.Errorf("%q\nwant %q", r.Error, want)
			}
		})
	}
}

// hang answers only when the client has gone. It reads the body first: the
// server notices a client that went away only once the body is read.
func hang(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

func TestDeadline(t *testing.T) {
	s := pluginFor(t, http.HandlerFunc(hang))
	_, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: "transmission_list", Args: []byte(`{}`), TimeoutMs: 50})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a call past its deadline: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + rpcPath
	srv.Close()
	t.Setenv(envURL, url)
	r := callTool(t, newPlugin(5*time.Second).Server(), "transmission_list", `{}`)
	if !strings.HasPrefix(r.Error, "Transmission is unreachable at "+url+" (") ||
		!strings.HasSuffix(r.Error, "); check MMCP_PLUGIN_TRANSMISSION_URL: service unreachable") {
		t.Errorf("unreachable: %q", r.Error)
	}
	c, err := newPlugin(5*time.Second).Server().Context(context.Background(), &pluginpb.ContextRequest{Key: "downloads"})
	if err == nil || !strings.Contains(err.Error(), "Transmission is unreachable at ") {
		t.Errorf("context when unreachable: %v %v", c, err)
	}
}

func TestBadURLSetting(t *testing.T) {
	t.Setenv(envURL, "ftp://nas:9091/transmission/rpc")
	want := `MMCP_PLUGIN_TRANSMISSION_URL: "ftp://nas:9091/transmission/rpc" is not an http(s) URL`
	s := newPlugin(5 * time.Second).Server()
	if r := callTool(t, s, "transmission_list", `{}`); !strings.HasSuffix(r.Error, want) {
		t.Errorf("bad URL: %q\nwant it to end with %q", r.Error, want)
	}
	// The daemon learns it from Describe and puts the plugin on standby.
	if d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{}); err != nil || len(d.SettingProblems) != 1 || d.SettingProblems[0] != want {
		t.Errorf("setting problems %q (%v)", d.GetSettingProblems(), err)
	}
}

// TestSecretsStayOut: the password never reaches a result or an error.
func TestSecretsStayOut(t *testing.T) {
	t.Setenv(envPass, testPass)
	t.Setenv(envURL, "http://mmcp:"+testPass+"@127.0.0.1:1/transmission/rpc")
	r := callTool(t, newPlugin(5*time.Second).Server(), "transmission_list", `{}`)
	if r.Error == "" || strings.Contains(r.Error, testPass) {
		t.Errorf("error with the secret: %q", r.Error)
	}
}
