package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
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
	// testSID starts every session cookie the fake hands out; like the
	// password, it must never reach the model.
	testSID = "sidSECRETcookie"
)

// answer is what the fake sends for one request.
type answer struct {
	status int // 0: 200
	body   string
}

// fake is qBittorrent's Web API as its documentation (WebUI API for
// qBittorrent 4.1 and 5.0) describes it and qbittorrent-nox 4.5 answers:
// a request whose Origin or Referer names another host than its Host gets
// 401 (CSRF protection); auth/login answers "Ok." with a SID cookie or
// "Fails."; any other method without a valid SID cookie gets 403; then the
// method's answer, or 404 for a method the fake does not know. It records
// every request.
type fake struct {
	mu       sync.Mutex
	base     string // the path the API is under, as behind a reverse proxy
	sid      string // the valid session cookie; a new one at each login
	logins   int
	login    *answer             // when set, auth/login answers this instead
	answers  map[string][]answer // "GET torrents/info" -> successive answers; the last one repeats
	requests []request
}

// request is what the fake saw of one HTTP request.
type request struct {
	Method, Path, Query, Form            string
	ContentType, Cookie, Origin, Referer string
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.ParseForm()
	f.requests = append(f.requests, request{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Form: r.PostForm.Encode(),
		ContentType: r.Header.Get("Content-Type"), Cookie: r.Header.Get("Cookie"),
		Origin: r.Header.Get("Origin"), Referer: r.Header.Get("Referer"),
	})
	for _, h := range []string{"Origin", "Referer"} {
		if v := r.Header.Get(h); v != "" {
			if u, err := url.Parse(v); err != nil || u.Host != r.Host {
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
		}
	}
	method, ok := strings.CutPrefix(r.URL.Path, f.base+"/api/v2/")
	if !ok {
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	if method == "auth/login" {
		f.answerLogin(w, r)
		return
	}
	if c, err := r.Cookie("SID"); err != nil || f.sid == "" || c.Value != f.sid {
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	key := r.Method + " " + method
	as := f.answers[key]
	if len(as) == 0 {
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	if len(as) > 1 {
		f.answers[key] = as[1:]
	}
	write(w, as[0])
}

func (f *fake) answerLogin(w http.ResponseWriter, r *http.Request) {
	switch {
	case f.login != nil:
		write(w, *f.login)
	case r.Method != http.MethodPost:
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	case r.PostForm.Get("username") == testUser && r.PostForm.Get("password") == testPass:
		f.logins++
		f.sid = fmt.Sprintf("%s%d", testSID, f.logins)
		w.Header().Set("Set-Cookie", "SID="+f.sid+"; HttpOnly; path=/; SameSite=Strict")
		fmt.Fprint(w, "Ok.")
	default:
		fmt.Fprint(w, "Fails.")
	}
}

func write(w http.ResponseWriter, a answer) {
	if strings.HasPrefix(a.body, "[") || strings.HasPrefix(a.body, "{") {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	}
	w.WriteHeader(max(a.status, http.StatusOK))
	fmt.Fprint(w, a.body)
}

// expire ends the session, as qBittorrent does after its session timeout or
// a restart.
func (f *fake) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sid = "expired"
}

// seen is a copy of the requests so far.
func (f *fake) seen() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// loginCount is how many logins succeeded.
func (f *fake) loginCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logins
}

// calls are the requests as "METHOD method?query form", without the login
// when withLogin is false.
func (f *fake) calls(withLogin bool) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.requests {
		m := strings.TrimPrefix(r.Path, f.base+"/api/v2/")
		if m == "auth/login" && !withLogin {
			continue
		}
		s := r.Method + " " + m
		if r.Query != "" {
			s += "?" + r.Query
		}
		if r.Form != "" {
			s += " " + r.Form
		}
		out = append(out, s)
	}
	return out
}

// setup starts a fake qBittorrent answering with answers and a plugin
// configured for it.
func setup(t *testing.T, answers map[string][]answer) (*fake, pluginpb.PluginServer) {
	t.Helper()
	f := &fake{answers: answers}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Setenv(envURL, srv.URL)
	t.Setenv(envUser, testUser)
	t.Setenv(envPass, testPass)
	return f, newPlugin(5 * time.Second).Server()
}

// ok is a 200 answer with body.
func ok(body string) []answer { return []answer{{body: body}} }

// A torrents/info answer with the fields qbittorrent-nox 4.5 sends (the API
// docs list them), for torrents in most states, one of them named as 5.x
// names a paused one.
const torrentsFixture = `[
{"added_on":1714550000,"amount_left":3344000000,"auto_tmm":false,"availability":12.5,"category":"linux","completed":2770000000,"completion_on":0,"content_path":"/srv/downloads/ubuntu-24.04-desktop-amd64.iso","dl_limit":0,"dlspeed":1234567,"downloaded":2770000000,"eta":754,"f_l_piece_prio":false,"force_start":false,"hash":"8c212779b4abde7c6bc608063a0d008b7e40ce32","infohash_v1":"8c212779b4abde7c6bc608063a0d008b7e40ce32","infohash_v2":"","magnet_uri":"magnet:?xt=urn:btih:8c212779b4abde7c6bc608063a0d008b7e40ce32","name":"ubuntu-24.04-desktop-amd64.iso","num_leechs":2,"num_seeds":54,"priority":1,"progress":0.4531,"ratio":0,"save_path":"/srv/downloads","size":6114656256,"state":"downloading","tags":"","total_size":6114656256,"upspeed":20480},
{"added_on":1714540000,"amount_left":0,"category":"films","dlspeed":0,"eta":8640000,"hash":"54eddd830a5b58480a6143d616a97e3a6c23c439","name":"Big.Buck.Bunny.2008.1080p","priority":-1,"progress":1,"ratio":2.1,"save_path":"/srv/media/films","size":928670754,"state":"stalledUP","tags":"","total_size":928670754,"upspeed":512000},
{"added_on":1714530000,"category":"linux","dlspeed":0,"eta":8640000,"hash":"b3f2c4a5d6e7f8091a2b3c4d5e6f708192a3b4c5","name":"debian-12.5.0-amd64-netinst.iso","progress":0.1,"save_path":"/srv/downloads","size":659554304,"state":"missingFiles","upspeed":0},
{"added_on":1714560000,"category":"","dlspeed":0,"eta":8640000,"hash":"0a1b2c3d4e5f60718293a4b5c6d7e8f901234567","name":"Sintel.2010.720p","progress":0,"save_path":"/srv/downloads","size":1234,"state":"queuedDL","upspeed":0},
{"added_on":1714520000,"category":"linux","dlspeed":0,"eta":8640000,"hash":"e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6","name":"archlinux-2024.05.01-x86_64.iso","progress":1,"save_path":"/srv/downloads","size":1101352960,"state":"pausedUP","upspeed":0},
{"added_on":1714570000,"category":"","dlspeed":0,"eta":8640000,"hash":"0123456789abcdef0123456789abcdef01234567","name":"mmcp-magnet","progress":0,"save_path":"/srv/downloads","size":0,"state":"stoppedDL","total_size":-1,"upspeed":0}
]`

func TestDescribe(t *testing.T) {
	_, s := setup(t, nil)
	d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "qbittorrent" || d.Version != "1.0.0" || len(d.SettingProblems) != 0 || !d.HasHealth {
		t.Errorf("describe: %v", d)
	}
	wantTools := []struct {
		name     string
		approval bool
		schema   []string // parts the argument schema must have
	}{
		{"qbittorrent_list", false, []string{`"enum":["all","downloading","seeding","paused","completed","errored"]`, `"default":"all"`, `"category":{"type":"string","maxLength":200`,
			`"description":"Which torrents: all; downloading (queued and stalled ones included) or seeding; paused; completed (fully downloaded); errored"`}},
		{"qbittorrent_add", false, []string{`"required":["source"]`, `"paused":{"type":"boolean"`, `"save_path":{"type":"string"`, `"category":{"type":"string"`}},
		{"qbittorrent_pause", false, []string{`"required":["torrents"]`, `"minItems":1`, `"maxItems":100`, `"items":{"type":"string"}`,
			`"description":"Torrents by hash as qbittorrent_list shows them or by name (a part of the name that only one torrent has is enough)"`}},
		{"qbittorrent_resume", false, []string{`"required":["torrents"]`, `"minItems":1`}},
		{"qbittorrent_remove", true, []string{`"required":["torrents"]`, `"delete_files":{"type":"boolean"`, `"default":false`}},
		{"qbittorrent_transfer", false, []string{`"properties":{}`}},
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
	if u := settings["URL"]; u == nil || u.Default != "http://127.0.0.1:8080" || u.Required || u.Secret {
		t.Errorf("URL setting: %v", u)
	}
	if u := settings["USERNAME"]; u == nil || u.Default != "admin" || u.Required || u.Secret {
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

// TestRequests: the first call logs in with a form, then sends the session
// cookie; every request carries an Origin and a Referer naming the host it
// goes to, also under a reverse proxy's base path.
func TestRequests(t *testing.T) {
	for _, base := range []string{"", "/qbittorrent"} {
		t.Run("base "+base, func(t *testing.T) {
			f := &fake{base: base, answers: map[string][]answer{"GET torrents/info": ok(`[]`)}}
			srv := httptest.NewServer(f)
			defer srv.Close()
			t.Setenv(envURL, srv.URL+base+"/")
			t.Setenv(envUser, testUser)
			t.Setenv(envPass, testPass)
			s := newPlugin(5 * time.Second).Server()
			callTool(t, s, "qbittorrent_list", `{}`)
			callTool(t, s, "qbittorrent_list", `{"category":"films & tv"}`)
			want := []request{
				{Method: "POST", Path: base + "/api/v2/auth/login", Form: "password=" + testPass + "&username=" + testUser,
					ContentType: "application/x-www-form-urlencoded", Origin: srv.URL, Referer: srv.URL + base + "/"},
				{Method: "GET", Path: base + "/api/v2/torrents/info", Cookie: "SID=" + testSID + "1", Origin: srv.URL, Referer: srv.URL + base + "/"},
				{Method: "GET", Path: base + "/api/v2/torrents/info", Query: "category=films+%26+tv", Cookie: "SID=" + testSID + "1", Origin: srv.URL, Referer: srv.URL + base + "/"},
			}
			if got := f.seen(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("requests:\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestList(t *testing.T) {
	f, s := setup(t, map[string][]answer{"GET torrents/info": ok(torrentsFixture)})
	r := callTool(t, s, "qbittorrent_list", `{}`)
	want := `{"torrents":[` +
		`{"hash":"0a1b2c3d4e5f60718293a4b5c6d7e8f901234567","name":"Sintel.2010.720p","state":"queued to download","percent":0,"eta":"unknown","size":"1.2 KiB","dir":"/srv/downloads"},` +
		`{"hash":"8c212779b4abde7c6bc608063a0d008b7e40ce32","name":"ubuntu-24.04-desktop-amd64.iso","state":"downloading","percent":45.3,"down":"1.2 MiB/s","up":"20.0 KiB/s","eta":"12m","size":"5.7 GiB","category":"linux","dir":"/srv/downloads"},` +
		`{"hash":"54eddd830a5b58480a6143d616a97e3a6c23c439","name":"Big.Buck.Bunny.2008.1080p","state":"seeding","percent":100,"up":"500.0 KiB/s","eta":"done","size":"885.6 MiB","category":"films","dir":"/srv/media/films"},` +
		`{"hash":"b3f2c4a5d6e7f8091a2b3c4d5e6f708192a3b4c5","name":"debian-12.5.0-amd64-netinst.iso","state":"files missing","percent":10,"eta":"unknown","size":"629.0 MiB","category":"linux","dir":"/srv/downloads"},` +
		`{"hash":"e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6","name":"archlinux-2024.05.01-x86_64.iso","state":"paused","percent":100,"eta":"done","size":"1.0 GiB","category":"linux","dir":"/srv/downloads"},` +
		`{"hash":"0123456789abcdef0123456789abcdef01234567","name":"mmcp-magnet","state":"paused","percent":0,"eta":"unknown","size":"unknown","dir":"/srv/downloads"}],` +
		`"totals":{"torrents":6,"downloading":2,"seeding":1,"paused":2,"with_errors":1,"down":"1.2 MiB/s","up":"520.0 KiB/s","size":"8.2 GiB"}}`
	if r.Error != "" || string(r.Result) != want {
		t.Errorf("list:\n%s\n%q\nwant\n%s", r.Result, r.Error, want)
	}
	if got := f.calls(false); fmt.Sprint(got) != "[GET torrents/info]" {
		t.Errorf("requests: %q", got)
	}
}

func TestListFilters(t *testing.T) {
	_, s := setup(t, map[string][]answer{"GET torrents/info": ok(torrentsFixture)})
	for _, c := range []struct {
		filter string
		want   []string // names, in order
	}{
		{"all", []string{"Sintel.2010.720p", "ubuntu-24.04-desktop-amd64.iso", "Big.Buck.Bunny.2008.1080p", "debian-12.5.0-amd64-netinst.iso", "archlinux-2024.05.01-x86_64.iso", "mmcp-magnet"}},
		{"downloading", []string{"Sintel.2010.720p", "ubuntu-24.04-desktop-amd64.iso"}},
		{"seeding", []string{"Big.Buck.Bunny.2008.1080p"}},
		{"paused", []string{"archlinux-2024.05.01-x86_64.iso", "mmcp-magnet"}},
		{"completed", []string{"Big.Buck.Bunny.2008.1080p", "archlinux-2024.05.01-x86_64.iso"}},
		{"errored", []string{"debian-12.5.0-amd64-netinst.iso"}},
	} {
		var res listResult
		r := callTool(t, s, "qbittorrent_list", fmt.Sprintf(`{"filter":%q}`, c.filter))
		if err := json.Unmarshal(r.Result, &res); err != nil || r.Error != "" {
			t.Fatalf("%s: %s %q", c.filter, r.Result, r.Error)
		}
		var names []string
		for _, tr := range res.Torrents {
			names = append(names, tr.Name)
		}
		if fmt.Sprint(names) != fmt.Sprint(c.want) || res.Totals.Torrents != len(c.want) {
			t.Errorf("%s: %v totals %+v, want %v", c.filter, names, res.Totals, c.want)
		}
	}
	if r := callTool(t, s, "qbittorrent_list", `{"filter":"stalled"}`); !strings.HasPrefix(r.Error, "invalid arguments: ") {
		t.Errorf("unknown filter: %q", r.Error)
	}
}

func TestListCut(t *testing.T) {
	var ts []string
	for i := 1; i <= 23; i++ {
		ts = append(ts, fmt.Sprintf(`{"hash":"%040d","name":"t%02d","state":"downloading","progress":0.5,"dlspeed":1024,"upspeed":0,"eta":%d,"size":1048576}`, i, i, i*60))
	}
	_, s := setup(t, map[string][]answer{"GET torrents/info": ok("[" + strings.Join(ts, ",") + "]")})
	var res listResult
	r := callTool(t, s, "qbittorrent_list", `{}`)
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatal(err, r.Error)
	}
	if len(res.Torrents) != 20 || res.More != 3 || res.Totals.Torrents != 23 || res.Totals.Down != "23.0 KiB/s" || res.Totals.Size != "23.0 MiB" || res.Torrents[19].Name != "t20" {
		t.Errorf("cut: %d shown, %+v", len(res.Torrents), res)
	}
	if !strings.Contains(string(r.Result), `"more":3`) {
		t.Errorf("result does not say how many more: %s", r.Result)
	}
}

func TestListEmpty(t *testing.T) {
	_, s := setup(t, map[string][]answer{"GET torrents/info": ok(`[]`)})
	want := `{"torrents":[],"totals":{"torrents":0,"downloading":0,"seeding":0,"paused":0,"down":"0 B/s","up":"0 B/s","size":"0 B"}}`
	if r := callTool(t, s, "qbittorrent_list", `{}`); string(r.Result) != want {
		t.Errorf("empty list: %s %q", r.Result, r.Error)
	}
}

const (
	magnetHex  = "magnet:?xt=urn:btih:0123456789ABCDEF0123456789ABCDEF01234567&dn=mmcp-magnet"
	magnetB32  = "magnet:?xt=urn:btih:AERUKZ4JVPG66AJDIVTYTK6N54ASGRLH&dn=mmcp-magnet" // the same hash in base32
	magnetTor  = `{"hash":"0123456789abcdef0123456789abcdef01234567","name":"mmcp-magnet","state":"pausedDL","progress":0,"eta":8640000,"size":0}`
	newTorrent = `{"hash":"1111111111111111111111111111111111111111","name":"new.iso","state":"downloading","progress":0,"eta":8640000,"size":1000}`
	oldTorrent = `{"hash":"2222222222222222222222222222222222222222","name":"old.iso","state":"stalledUP","progress":1,"eta":8640000,"size":1000}`
)

func TestAdd(t *testing.T) {
	addWait, addPoll = 300*time.Millisecond, 10*time.Millisecond
	t.Cleanup(func() { addWait, addPoll = 5*time.Second, 200*time.Millisecond })
	const hashQuery = "GET torrents/info?hashes=0123456789abcdef0123456789abcdef01234567"
	const newestQuery = "GET torrents/info?limit=20&reverse=true&sort=added_on"
	cases := []struct {
		name     string
		args     string
		answers  map[string][]answer
		wantReqs []string
		want     string // the result, or the error
	}{
		{"magnet paused, with category and folder",
			fmt.Sprintf(`{"source":%q,"category":"films","save_path":" /srv/films ","paused":true}`, magnetHex),
			map[string][]answer{"GET torrents/info": {{body: `[]`}, {body: `[` + magnetTor + `]`}}, "POST torrents/add": ok("Ok.")},
			[]string{hashQuery, "POST torrents/add category=films&paused=true&savepath=%2Fsrv%2Ffilms&stopped=true&urls=" + url.QueryEscape(magnetHex), hashQuery},
			`{"result":"added","hash":"0123456789abcdef0123456789abcdef01234567","name":"mmcp-magnet","state":"paused"}`},
		{"magnet in base32, listed after a moment",
			fmt.Sprintf(`{"source":%q}`, magnetB32),
			map[string][]answer{"GET torrents/info": {{body: `[]`}, {body: `[]`}, {body: `[` + magnetTor + `]`}}, "POST torrents/add": ok("Ok.")},
			[]string{hashQuery, "POST torrents/add urls=" + url.QueryEscape(magnetB32), hashQuery, hashQuery},
			`{"result":"added","hash":"0123456789abcdef0123456789abcdef01234567","name":"mmcp-magnet","state":"paused"}`},
		{"magnet already there",
			fmt.Sprintf(`{"source":%q}`, magnetHex),
			map[string][]answer{"GET torrents/info": ok(`[` + magnetTor + `]`)},
			[]string{hashQuery},
			`{"result":"already present","hash":"0123456789abcdef0123456789abcdef01234567","name":"mmcp-magnet","state":"paused"}`},
		{"URL, started",
			`{"source":"https://example.org/new.iso.torrent","paused":false}`,
			map[string][]answer{"GET torrents/info": {{body: `[` + oldTorrent + `]`}, {body: `[` + newTorrent + `,` + oldTorrent + `]`}}, "POST torrents/add": ok("Ok.")},
			[]string{newestQuery, "POST torrents/add paused=false&stopped=false&urls=https%3A%2F%2Fexample.org%2Fnew.iso.torrent", newestQuery},
			`{"result":"added","hash":"1111111111111111111111111111111111111111","name":"new.iso","state":"downloading"}`},
		{"URL, 5.x answers JSON",
			`{"source":"http://example.org/new.iso.torrent"}`,
			map[string][]answer{"GET torrents/info": {{body: `[]`}, {body: `[` + newTorrent + `]`}},
				"POST torrents/add": {{status: 202, body: `{"added_torrent_ids":[],"failure_count":0,"pending_count":1,"success_count":0}`}}},
			[]string{newestQuery, "POST torrents/add urls=http%3A%2F%2Fexample.org%2Fnew.iso.torrent", newestQuery},
			`{"result":"added","hash":"1111111111111111111111111111111111111111","name":"new.iso","state":"downloading"}`},
		{"URL, not listed in time",
			`{"source":"https://example.org/slow.torrent"}`,
			map[string][]answer{"GET torrents/info": ok(`[` + oldTorrent + `]`), "POST torrents/add": ok("Ok.")},
			nil, // as many looks as fit in addWait
			`{"result":"requested","note":"qBittorrent took the source but lists no new torrent yet: it may still be fetching the .torrent file, have failed to (its log says why), or have this torrent already; qbittorrent_list shows it once it is there"}`},
		{"Fails. (before 5.2)",
			`{"source":"https://example.org/bad.torrent"}`,
			map[string][]answer{"GET torrents/info": ok(`[]`), "POST torrents/add": ok("Fails.")},
			[]string{newestQuery, "POST torrents/add urls=https%3A%2F%2Fexample.org%2Fbad.torrent"},
			"qBittorrent did not add the torrent: it has it already, or cannot use the source"},
		{"409 (since 5.2)",
			`{"source":"https://example.org/bad.torrent"}`,
			map[string][]answer{"GET torrents/info": ok(`[]`), "POST torrents/add": {{status: 409, body: "Conflict"}}},
			[]string{newestQuery, "POST torrents/add urls=https%3A%2F%2Fexample.org%2Fbad.torrent"},
			"qBittorrent did not add the torrent: it has it already, or cannot use the source"},
		{"415",
			`{"source":"https://example.org/bad.torrent"}`,
			map[string][]answer{"GET torrents/info": ok(`[]`), "POST torrents/add": {{status: 415, body: "Error: 'x' is not a valid torrent file."}}},
			[]string{newestQuery, "POST torrents/add urls=https%3A%2F%2Fexample.org%2Fbad.torrent"},
			"qBittorrent refused POST torrents/add (415 Unsupported Media Type): Error: 'x' is not a valid torrent file.: unexpected response"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, s := setup(t, c.answers)
			r := callTool(t, s, "qbittorrent_add", c.args)
			if got := string(r.Result) + r.Error; got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			if c.wantReqs != nil && fmt.Sprint(f.calls(false)) != fmt.Sprint(c.wantReqs) {
				t.Errorf("requests:\n%q\nwant\n%q", f.calls(false), c.wantReqs)
			}
		})
	}
}

func TestAddRefusesBadSources(t *testing.T) {
	f, s := setup(t, nil)
	for source, want := range map[string]string{
		"/etc/passwd":                            "source must be a magnet: link or an http(s) URL of a .torrent file, not ",
		"file:///srv/a.torrent":                  "source must be a magnet: link or an http(s) URL of a .torrent file, not ",
		"bc://bt/abc":                            "source must be a magnet: link or an http(s) URL of a .torrent file, not ",
		"magnet:?dn=no-hash":                     `source "magnet:?dn=no-hash" is a magnet link without a torrent hash`,
		"http:///a.torrent":                      `source "http:///a.torrent" is a URL without a host`,
		"http://a/1.torrent\nhttp://b/2.torrent": "source must be one magnet link or URL, on one line",
		"":                                       "invalid arguments: ",
	} {
		if r := callTool(t, s, "qbittorrent_add", fmt.Sprintf(`{"source":%q}`, source)); !strings.HasPrefix(r.Error, want) {
			t.Errorf("%q: %q\nwant %q", source, r.Error, want)
		}
	}
	if got := f.seen(); len(got) != 0 {
		t.Errorf("a bad source reached qBittorrent: %+v", got)
	}
}

func TestMagnetHash(t *testing.T) {
	for link, want := range map[string]string{
		magnetHex: "0123456789abcdef0123456789abcdef01234567",
		magnetB32: "0123456789abcdef0123456789abcdef01234567",
		"magnet:?dn=x&xt=urn:btmh:1220" + strings.Repeat("ab", 32):                                        "",
		"magnet:?xt=urn:btmh:1220" + strings.Repeat("ab", 32) + "&xt=urn:btih:" + strings.Repeat("c", 40): strings.Repeat("c", 40),
		"magnet:?xt=urn:btih:xyz":       "",
		"https://example.org/a.torrent": "",
	} {
		if got := magnetHash(link); got != want {
			t.Errorf("magnetHash(%q) = %q, want %q", link, got, want)
		}
	}
}

const (
	hashUbuntu = "8c212779b4abde7c6bc608063a0d008b7e40ce32"
	hashBunny  = "54eddd830a5b58480a6143d616a97e3a6c23c439"
	refUbuntu  = `{"hash":"` + hashUbuntu + `","name":"ubuntu-24.04-desktop-amd64.iso"}`
	refBunny   = `{"hash":"` + hashBunny + `","name":"Big.Buck.Bunny.2008.1080p"}`
)

func TestActions(t *testing.T) {
	byHash := "GET torrents/info?hashes=" + hashBunny + "%7C" + hashUbuntu
	both := "hashes=" + hashBunny + "%7C" + hashUbuntu // sorted by name: Big.Buck.Bunny first
	cases := []struct {
		name, tool, args string
		answers          map[string][]answer
		wantReqs         []string
		want             string
	}{
		{"pause by hash, 5.x", "qbittorrent_pause", `{"torrents":["` + strings.ToUpper(hashUbuntu) + `","` + hashBunny + `","` + hashUbuntu + `"]}`,
			map[string][]answer{"POST torrents/stop": ok("")},
			[]string{byHash, "POST torrents/stop " + both},
			`{"done":"paused","torrents":[` + refBunny + `,` + refUbuntu + `]}`},
		{"pause by name, 4.x", "qbittorrent_pause", `{"torrents":["Big.Buck.Bunny.2008.1080p","ubuntu-24.04"]}`,
			map[string][]answer{"POST torrents/pause": ok("")},
			[]string{"GET torrents/info", "POST torrents/stop " + both, "POST torrents/pause " + both},
			`{"done":"paused","torrents":[` + refBunny + `,` + refUbuntu + `]}`},
		{"resume, 5.x", "qbittorrent_resume", `{"torrents":["bunny"]}`,
			map[string][]answer{"POST torrents/start": ok("")},
			[]string{"GET torrents/info", "POST torrents/start hashes=" + hashBunny},
			`{"done":"resumed","torrents":[` + refBunny + `]}`},
		{"resume, 4.x", "qbittorrent_resume", `{"torrents":["bunny"]}`,
			map[string][]answer{"POST torrents/resume": ok("")},
			[]string{"GET torrents/info", "POST torrents/start hashes=" + hashBunny, "POST torrents/resume hashes=" + hashBunny},
			`{"done":"resumed","torrents":[` + refBunny + `]}`},
		{"remove, keeping files", "qbittorrent_remove", `{"torrents":["` + hashUbuntu + `","` + hashBunny + `"]}`,
			map[string][]answer{"POST torrents/delete": ok("")},
			[]string{byHash, "POST torrents/delete deleteFiles=false&" + both},
			`{"done":"removed","torrents":[` + refBunny + `,` + refUbuntu + `]}`},
		{"remove with files", "qbittorrent_remove", `{"torrents":["ubuntu-24.04-desktop-amd64.iso"],"delete_files":true}`,
			map[string][]answer{"POST torrents/delete": ok("")},
			[]string{"GET torrents/info", "POST torrents/delete deleteFiles=true&hashes=" + hashUbuntu},
			`{"done":"removed","torrents":[` + refUbuntu + `],"files_deleted":true}`},
		{"neither name known", "qbittorrent_pause", `{"torrents":["bunny"]}`,
			nil,
			[]string{"GET torrents/info", "POST torrents/stop hashes=" + hashBunny, "POST torrents/pause hashes=" + hashBunny},
			"qBittorrent: no Web API method torrents/pause at URL (404); check MMCP_PLUGIN_QBITTORRENT_URL (qBittorrent's WebUI address, such as http://127.0.0.1:8080): not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.answers == nil {
				c.answers = map[string][]answer{}
			}
			c.answers["GET torrents/info"] = ok(torrentsFixture)
			f, s := setup(t, c.answers)
			r := callTool(t, s, c.tool, c.args)
			want := strings.ReplaceAll(c.want, " at URL", " at "+strings.TrimSuffix(getenv(t, envURL), "/"))
			if got := string(r.Result) + r.Error; got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			if got := f.calls(false); fmt.Sprint(got) != fmt.Sprint(c.wantReqs) {
				t.Errorf("requests:\n%q\nwant\n%q", got, c.wantReqs)
			}
		})
	}
}

// TestOldNamesRemembered: once qBittorrent answered torrents/pause, the
// plugin asks for that first.
func TestOldNamesRemembered(t *testing.T) {
	f, s := setup(t, map[string][]answer{"GET torrents/info": ok(torrentsFixture), "POST torrents/pause": ok(""), "POST torrents/resume": ok("")})
	for _, tool := range []string{"qbittorrent_pause", "qbittorrent_resume", "qbittorrent_pause"} {
		if r := callTool(t, s, tool, `{"torrents":["`+hashBunny+`"]}`); r.Error != "" {
			t.Fatal(r.Error)
		}
	}
	var posts []string
	for _, c := range f.calls(false) {
		if strings.HasPrefix(c, "POST ") {
			posts = append(posts, strings.Fields(c)[1])
		}
	}
	if want := "[torrents/stop torrents/pause torrents/resume torrents/pause]"; fmt.Sprint(posts) != want {
		t.Errorf("posts %v, want %s", posts, want)
	}
}

func TestActionsRefuseUnclearTorrents(t *testing.T) {
	cases := []struct {
		args, want string
	}{
		{`{"torrents":["nothing-like-it","` + strings.Repeat("9", 40) + `","bunny"]}`,
			`qBittorrent has no torrent matching "nothing-like-it", "` + strings.Repeat("9", 40) + `" (qbittorrent_list shows the hashes and names); nothing was paused`},
		{`{"torrents":[".iso"]}`,
			`".iso" matches 3 torrents (archlinux-2024.05.01-x86_64.iso, debian-12.5.0-amd64-netinst.iso, ubuntu-24.04-desktop-amd64.iso): give the hash or more of the name; nothing was paused`},
		{`{"torrents":["nothing","2","zzz"]}`,
			`qBittorrent has no torrent matching "nothing", "zzz" (qbittorrent_list shows the hashes and names); "2" matches 5 torrents (archlinux-2024.05.01-x86_64.iso, Big.Buck.Bunny.2008.1080p, debian-12.5.0-amd64-netinst.iso, ...): give the hash or more of the name; nothing was paused`},
		{`{"torrents":["  "]}`,
			"torrents holds an empty name; give hashes or names as qbittorrent_list shows them; nothing was paused"},
		{`{"torrents":[]}`, "invalid arguments: "},
	}
	for _, c := range cases {
		f, s := setup(t, map[string][]answer{"GET torrents/info": ok(torrentsFixture)})
		if r := callTool(t, s, "qbittorrent_pause", c.args); !strings.HasPrefix(r.Error, c.want) || (!strings.HasSuffix(c.want, ": ") && r.Error != c.want) {
			t.Errorf("%s: %q\nwant %q", c.args, r.Error, c.want)
		}
		for _, call := range f.calls(false) {
			if strings.HasPrefix(call, "POST") {
				t.Errorf("%s: acted: %q", c.args, f.calls(false))
			}
		}
	}
}

func TestTransfer(t *testing.T) {
	// The example of the API docs ("Get global transfer info").
	const info = `{"connection_status":"connected","dht_nodes":386,"dl_info_data":681521119,"dl_info_speed":0,"dl_rate_limit":0,"up_info_data":10747904,"up_info_speed":0,"up_rate_limit":1048576}`
	f, s := setup(t, map[string][]answer{"GET transfer/info": ok(info)})
	want := `{"connection":"connected","down":"0 B/s","up":"0 B/s","downloaded_this_session":"649.9 MiB","uploaded_this_session":"10.2 MiB","down_limit":"none","up_limit":"1.0 MiB/s","dht_nodes":386}`
	if r := callTool(t, s, "qbittorrent_transfer", `{}`); r.Error != "" || string(r.Result) != want {
		t.Errorf("transfer:\n%s %q\nwant\n%s", r.Result, r.Error, want)
	}
	if got := f.calls(false); fmt.Sprint(got) != "[GET transfer/info]" {
		t.Errorf("requests: %q", got)
	}

	_, s = setup(t, map[string][]answer{"GET transfer/info": ok(`{"connection_status":"firewalled","dl_info_speed":3145728,"up_info_speed":512}`)})
	want = `{"connection":"firewalled: peers cannot connect in (check the listening port's forwarding)","down":"3.0 MiB/s","up":"512 B/s","downloaded_this_session":"0 B","uploaded_this_session":"0 B","down_limit":"none","up_limit":"none","dht_nodes":0}`
	if r := callTool(t, s, "qbittorrent_transfer", `{}`); string(r.Result) != want {
		t.Errorf("firewalled:\n%s %q\nwant\n%s", r.Result, r.Error, want)
	}
}

func TestDownloadsContext(t *testing.T) {
	f, s := setup(t, map[string][]answer{"GET torrents/info": ok(torrentsFixture)})
	c, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "downloads"})
	if err != nil || c.Text != "1 downloading at 1.2 MiB/s, nearest done in 12m, 1 queued; 1 seeding; 1 with errors" {
		t.Errorf("context: %v %v", c, err)
	}
	if got := f.calls(false); fmt.Sprint(got) != "[GET torrents/info]" {
		t.Errorf("requests: %q", got)
	}
}

func TestDownloadsLine(t *testing.T) {
	cases := []struct {
		torrents []torrent
		want     string
	}{
		{nil, "nothing downloading"},
		{[]torrent{{State: "uploading"}, {State: "stalledUP"}, {State: "queuedUP"}, {State: "pausedUP"}}, "nothing downloading; 2 seeding"},
		{[]torrent{{State: "downloading", DLSpeed: 2_500_000, ETA: 7200}, {State: "stalledDL", DLSpeed: 700_000, ETA: 720}, {State: "forcedUP"}},
			"2 downloading at 3.1 MiB/s, nearest done in 12m; 1 seeding"},
		{[]torrent{{State: "metaDL", ETA: maxETA}}, "1 downloading at 0 B/s"},
		{[]torrent{{State: "queuedDL"}, {State: "error"}}, "nothing downloading, 1 queued; 1 with errors"},
	}
	for _, c := range cases {
		if got := downloadsLine(c.torrents); got != c.want {
			t.Errorf("%+v: %q, want %q", c.torrents, got, c.want)
		}
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1234567: "1.2 MiB", 1048575: "1.0 MiB", 6114656256: "5.7 GiB", 3 << 50: "3.0 PiB"} {
		if got := human.Binary.Size(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
	for s, want := range map[int64]string{0: "0s", 45: "45s", 754: "12m", 3600: "1h", 3900: "1h 5m", 86400: "1d", 183600: "2d 3h"} {
		if got := eta(s, 0.5); got != want {
			t.Errorf("eta(%d) = %q, want %q", s, got, want)
		}
	}
	if eta(maxETA, 0.5) != "unknown" || eta(-1, 0.5) != "unknown" || eta(maxETA, 1) != "done" || eta(30, 1) != "done" {
		t.Error("eta of unknown or done torrents")
	}
	for p, want := range map[float64]float64{0: 0, 0.291: 29.1, 0.4531: 45.3, 0.99999: 99.9, 1: 100} {
		if got := human.Percent(p); got != want {
			t.Errorf("percent(%v) = %v, want %v", p, got, want)
		}
	}
	if got := state("someNewState"); got.word != "someNewState" || got.kind != kindOther {
		t.Errorf("unknown state: %+v", got)
	}
}

// TestRelogin: a session qBittorrent no longer knows (403) is replaced by
// one new login and the request sent again; the new cookie is used from
// then on.
func TestRelogin(t *testing.T) {
	f, s := setup(t, map[string][]answer{"GET torrents/info": ok(`[]`), "GET transfer/info": ok(`{}`)})
	callTool(t, s, "qbittorrent_list", `{}`)
	f.expire()
	if r := callTool(t, s, "qbittorrent_transfer", `{}`); r.Error != "" {
		t.Fatal(r.Error)
	}
	callTool(t, s, "qbittorrent_list", `{}`)
	var got []string
	for _, r := range f.seen() {
		got = append(got, strings.TrimPrefix(r.Path, "/api/v2/")+" "+r.Cookie)
	}
	want := []string{
		"auth/login ", "torrents/info SID=" + testSID + "1",
		"transfer/info SID=" + testSID + "1", // refused: 403
		"auth/login ", "transfer/info SID=" + testSID + "2",
		"torrents/info SID=" + testSID + "2",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests (path cookie):\n%q\nwant\n%q", got, want)
	}
}

// TestReloginOnce: calls that find their session refused at the same time
// log in once between them.
func TestReloginOnce(t *testing.T) {
	f, s := setup(t, map[string][]answer{"GET torrents/info": ok(`[]`)})
	callTool(t, s, "qbittorrent_list", `{}`)
	f.expire()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if r := callTool(t, s, "qbittorrent_list", `{}`); r.Error != "" {
				t.Error(r.Error)
			}
		})
	}
	wg.Wait()
	if n := f.loginCount(); n != 2 {
		t.Errorf("%d logins, want 2 (the first and one new one)", n)
	}
}

func TestLoginErrors(t *testing.T) {
	const creds = "check MMCP_PLUGIN_QBITTORRENT_USERNAME and MMCP_PLUGIN_QBITTORRENT_PASSWORD: credentials refused"
	cases := []struct {
		name  string
		pass  string
		login *answer // nil: the fake's own
		want  string
	}{
		{"wrong password (Fails., up to 5.1)", "wrong-password", nil,
			"qBittorrent refused the user name and password; " + creds},
		{"wrong password (401, since 5.2)", "wrong-password", &answer{status: 401, body: "Unauthorized"},
			"qBittorrent refused the user name and password; " + creds},
		{"banned", testPass, &answer{status: 403, body: "Your IP address has been banned after too many failed authentication attempts."},
			"qBittorrent refused the login (403): Your IP address has been banned after too many failed authentication attempts.; it bans an address for a while after too many failed logins (Web UI ban duration); " + creds},
		{"another web page", testPass, &answer{body: "<html><body>Welcome to nginx!</body></html>"},
			`qBittorrent answered the login with "<html><body>Welcome to nginx!</body></html>", not Ok.; check that MMCP_PLUGIN_QBITTORRENT_URL is qBittorrent's WebUI address: unexpected response`},
		{"server error", testPass, &answer{status: 500, body: "boom"},
			"qBittorrent failed (500 Internal Server Error on auth/login): boom: service error"},
		{"no password", "", nil,
			"qBittorrent requires a login (403); set MMCP_PLUGIN_QBITTORRENT_PASSWORD (and MMCP_PLUGIN_QBITTORRENT_USERNAME unless the WebUI user is admin): credentials refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, _ := setup(t, map[string][]answer{"GET torrents/info": ok(`[]`)})
			f.login = c.login
			t.Setenv(envPass, c.pass)
			s := newPlugin(5 * time.Second).Server()
			for range 2 { // the second call tries again: the login may work now
				if r := callTool(t, s, "qbittorrent_list", `{}`); r.Error != c.want {
					t.Errorf("%q\nwant %q", r.Error, c.want)
				}
			}
			logins, lists := 0, 0
			for _, call := range f.calls(true) {
				switch strings.Fields(call)[1] {
				case "auth/login":
					logins++
				case "torrents/info":
					lists++
				}
			}
			if c.pass == "" && (logins != 0 || lists != 2) {
				t.Errorf("without a password: %q, want no login", f.calls(true))
			}
			if c.pass != "" && (logins != 2 || lists != 0) {
				t.Errorf("a refused login: %q, want two logins and nothing else", f.calls(true))
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	login := func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/auth/login") {
			w.Header().Set("Set-Cookie", "SID="+testSID)
			fmt.Fprint(w, "Ok.")
			return true
		}
		return false
	}
	cases := []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"404", http.NotFound,
			"qBittorrent: no Web API method auth/login at URL (404); check MMCP_PLUGIN_QBITTORRENT_URL (qBittorrent's WebUI address, such as http://127.0.0.1:8080): not found"},
		{"500", func(w http.ResponseWriter, r *http.Request) {
			if !login(w, r) {
				http.Error(w, "disk full", 500)
			}
		}, "qBittorrent failed (500 Internal Server Error on torrents/info): disk full: service error"},
		{"400", func(w http.ResponseWriter, r *http.Request) {
			if !login(w, r) {
				http.Error(w, "bad request", 400)
			}
		}, "qBittorrent refused GET torrents/info (400 Bad Request): bad request: unexpected response"},
		{"401 after a login", func(w http.ResponseWriter, r *http.Request) {
			if !login(w, r) {
				http.Error(w, "Unauthorized", 401)
			}
		}, "qBittorrent refused torrents/info as a request from another site (401); check that MMCP_PLUGIN_QBITTORRENT_URL is the address qBittorrent's WebUI is reached at (a reverse proxy must pass the Host header on): credentials refused"},
		{"403 after a login", func(w http.ResponseWriter, r *http.Request) {
			if !login(w, r) {
				http.Error(w, "Forbidden", 403)
			}
		}, "qBittorrent refused access (403) right after a login; check MMCP_PLUGIN_QBITTORRENT_USERNAME and MMCP_PLUGIN_QBITTORRENT_PASSWORD: credentials refused"},
		{"html", func(w http.ResponseWriter, r *http.Request) {
			if !login(w, r) {
				fmt.Fprint(w, "<html><body>qBittorrent Web UI</body></html>")
			}
		}, "qBittorrent answered torrents/info with something that is not the expected JSON (invalid character '<' looking for beginning of value); check that MMCP_PLUGIN_QBITTORRENT_URL is qBittorrent's WebUI address: unexpected response"},
		{"wrong shape", func(w http.ResponseWriter, r *http.Request) {
			if !login(w, r) {
				fmt.Fprint(w, `{"torrents":[]}`)
			}
		}, "qBittorrent answered torrents/info with something that is not the expected JSON (json: cannot unmarshal object into Go value of type []main.torrent); check that MMCP_PLUGIN_QBITTORRENT_URL is qBittorrent's WebUI address: unexpected response"},
		{"slow", hang,
			"qBittorrent did not answer within 300ms at URL: service unreachable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := pluginFor(t, c.h)
			want := strings.ReplaceAll(c.want, " at URL", " at "+getenv(t, envURL))
			if r := callTool(t, s, "qbittorrent_list", `{}`); r.Error != want {
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
	_, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: "qbittorrent_list", Args: []byte(`{}`), TimeoutMs: 50})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a call past its deadline: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	t.Setenv(envURL, srv.URL)
	t.Setenv(envPass, testPass)
	r := callTool(t, newPlugin(5*time.Second).Server(), "qbittorrent_list", `{}`)
	if !strings.HasPrefix(r.Error, "qBittorrent is unreachable at "+srv.URL+" (") ||
		!strings.HasSuffix(r.Error, "); check MMCP_PLUGIN_QBITTORRENT_URL: service unreachable") {
		t.Errorf("unreachable: %q", r.Error)
	}
	c, err := newPlugin(5*time.Second).Server().Context(context.Background(), &pluginpb.ContextRequest{Key: "downloads"})
	if err == nil || !strings.Contains(err.Error(), "qBittorrent is unreachable at ") {
		t.Errorf("context when unreachable: %v %v", c, err)
	}
}

func TestBadURLSetting(t *testing.T) {
	t.Setenv(envURL, "ftp://nas:8080")
	want := `MMCP_PLUGIN_QBITTORRENT_URL: "ftp://nas:8080" is not an http(s) URL`
	s := newPlugin(5 * time.Second).Server()
	for _, tool := range []string{"qbittorrent_list", "qbittorrent_transfer"} {
		if r := callTool(t, s, tool, `{}`); !strings.HasSuffix(r.Error, want) {
			t.Errorf("%s with a bad URL: %q\nwant it to end with %q", tool, r.Error, want)
		}
	}
	// The daemon learns it from Describe and puts the plugin on standby.
	if d, err := s.Describe(context.Background(), &pluginpb.DescribeRequest{}); err != nil || len(d.SettingProblems) != 1 || d.SettingProblems[0] != want {
		t.Errorf("setting problems %q (%v)", d.GetSettingProblems(), err)
	}
}

// TestSecretsStayOut: neither the password nor the session cookie reaches
// a result, a tool error, a context line or a health problem, whatever
// qBittorrent answers.
func TestSecretsStayOut(t *testing.T) {
	echo := func(w http.ResponseWriter, r *http.Request) {
		// A server that quotes the request back, cookie and form included.
		r.ParseForm()
		w.Header().Set("Set-Cookie", "SID="+testSID)
		if strings.HasSuffix(r.URL.Path, "/auth/login") {
			fmt.Fprintf(w, "%s %s", r.PostForm.Encode(), r.Header.Get("Cookie"))
			return
		}
		http.Error(w, r.Header.Get("Cookie")+" "+r.PostForm.Encode(), 500)
	}
	okLogin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "SID="+testSID)
		if strings.HasSuffix(r.URL.Path, "/auth/login") {
			fmt.Fprint(w, "Ok.")
			return
		}
		http.Error(w, r.Header.Get("Cookie"), 500)
	}
	for name, h := range map[string]http.HandlerFunc{"echo": echo, "quotes the cookie": okLogin, "hang": hang} {
		t.Run(name, func(t *testing.T) {
			s := pluginFor(t, h)
			var outs []string
			for _, tool := range []string{"qbittorrent_list", "qbittorrent_transfer", "qbittorrent_pause", "qbittorrent_add"} {
				args := map[string]string{"qbittorrent_pause": `{"torrents":["x"]}`, "qbittorrent_add": `{"source":"magnet:?xt=urn:btih:` + strings.Repeat("a", 40) + `"}`}[tool]
				r := callTool(t, s, tool, cmp.Or(args, `{}`))
				outs = append(outs, string(r.Result), r.Error)
			}
			c, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "downloads"})
			outs = append(outs, c.GetText(), fmt.Sprint(err))
			hr, err := s.Health(context.Background(), &pluginpb.HealthRequest{})
			outs = append(outs, hr.GetProblem(), fmt.Sprint(err))
			for _, o := range outs {
				if strings.Contains(o, testPass) || strings.Contains(o, testSID) {
					t.Errorf("a secret shows: %q", o)
				}
			}
		})
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

// pluginFor is a plugin whose qBittorrent is h.
func pluginFor(t *testing.T, h http.Handler) pluginpb.PluginServer {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Setenv(envURL, srv.URL)
	t.Setenv(envUser, testUser)
	t.Setenv(envPass, testPass)
	return newPlugin(300 * time.Millisecond).Server()
}

func getenv(t *testing.T, key string) string {
	t.Helper()
	v, ok := os.LookupEnv(key)
	if !ok {
		t.Fatalf("%s is not set", key)
	}
	return v
}
