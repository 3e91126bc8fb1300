package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/plugins/internal/arr/arrtest"
)

type reply = arrtest.Reply

// start serves the plugin against a fake Sonarr answering replies.
func start(t *testing.T, replies map[string]reply) (pluginpb.PluginServer, *arrtest.Fake) {
	t.Helper()
	f := arrtest.NewFake(t, replies)
	return arrtest.Start(t, "sonarr", f.URL, newPlugin, arrtest.Env()), f
}

func TestDescribe(t *testing.T) {
	s, _ := start(t, nil)
	arrtest.Describe(t, s, "sonarr", map[string]bool{
		"sonarr_lookup": false, "sonarr_add": true, "sonarr_queue": false, "sonarr_calendar": false,
	})
	d, _ := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	for _, tool := range d.Tools {
		if tool.Name != "sonarr_add" {
			continue
		}
		var schema struct {
			Required   []string
			Properties map[string]struct{ Enum []string }
		}
		if err := json.Unmarshal(tool.ArgsSchema, &schema); err != nil ||
			fmt.Sprint(schema.Required) != "[tvdb_id]" || fmt.Sprint(schema.Properties["monitor"].Enum) != "[all future none]" ||
			len(schema.Properties) != 5 {
			t.Errorf("sonarr_add schema: %s", tool.ArgsSchema)
		}
	}
}

func TestSettings(t *testing.T) {
	arrtest.Settings(t, "sonarr", newPlugin, "sonarr_queue", `{}`)
}

func TestLookup(t *testing.T) {
	s, f := start(t, map[string]reply{"GET /api/v3/series/lookup": {Body: arrtest.Fixture(t, "lookup.json")}})
	res, msg := arrtest.Call(t, s, "sonarr_lookup", `{"term":"the expanse"}`)
	if msg != "" {
		t.Fatal(msg)
	}
	arrtest.JSONEqual(t, "result", res, `{"items":[
		{"title":"The Expanse","year":2015,"tvdb_id":280619,"network":"Amazon","status":"ended","seasons":6,"in_library":true},
		{"title":"The Expanse: One Ship","year":2024,"tvdb_id":453128,"network":"YouTube","status":"continuing","seasons":1,"in_library":false}]}`)
	f.Expect(t, "GET /api/v3/series/lookup?term=the+expanse")
}

func TestLookupBounded(t *testing.T) {
	var many []string
	for i := 1; i <= 11; i++ {
		many = append(many, fmt.Sprintf(`{"title":"Show %d","tvdbId":%d,"seasons":[]}`, i, 1000+i))
	}
	s, _ := start(t, map[string]reply{"GET /api/v3/series/lookup": {Body: "[" + strings.Join(many, ",") + "]"}})
	res, msg := arrtest.Call(t, s, "sonarr_lookup", `{"term":"show"}`)
	var got struct {
		Items []candidate
		More  int
	}
	if err := json.Unmarshal([]byte(res), &got); err != nil || msg != "" || len(got.Items) != 8 || got.More != 3 ||
		got.Items[7] != (candidate{Title: "Show 8", TVDBID: 1008}) {
		t.Errorf("%s %q", res, msg)
	}
	s, _ = start(t, map[string]reply{"GET /api/v3/series/lookup": {Body: `[]`}})
	res, _ = arrtest.Call(t, s, "sonarr_lookup", `{"term":"zzzz"}`)
	arrtest.JSONEqual(t, "nothing found", res, `{"items":[]}`)
}

func TestAdd(t *testing.T) {
	severance := arrtest.Fixture(t, "lookup_tvdb.json")
	var found []json.RawMessage
	if err := json.Unmarshal([]byte(severance), &found); err != nil {
		t.Fatal(err)
	}
	body := func(profile int, folder, monitor string, search bool) string {
		return arrtest.Merge(t, string(found[0]), map[string]any{
			"qualityProfileId": profile, "rootFolderPath": folder, "monitored": true, "seasonFolder": true,
			"addOptions": map[string]any{"monitor": monitor, "searchForMissingEpisodes": search},
		})
	}
	const (
		lookup   = "GET /api/v3/series/lookup?term=tvdb%3A371980"
		profiles = "GET /api/v3/qualityprofile"
		folders  = "GET /api/v3/rootfolder"
		post     = "POST /api/v3/series"
	)
	all := []string{lookup, profiles, folders, post}
	refusal := func(msg string) map[string]reply {
		return map[string]reply{post: {Status: 400, Body: `[{"propertyName":"TvdbId","errorMessage":"` + msg + `","severity":"error"}]`}}
	}
	arrtest.Adds(t, "sonarr", "sonarr_add", newPlugin, map[string]reply{
		"GET /api/v3/series/lookup": {Body: severance},
		profiles:                    {Body: arrtest.Fixture(t, "qualityprofile.json")},
		folders:                     {Body: arrtest.Fixture(t, "rootfolder.json")},
		post:                        {Body: arrtest.Fixture(t, "series_added.json")},
	}, []arrtest.AddCase{
		{
			Name: "defaults", Args: `{"tvdb_id":371980}`, Requests: all,
			Body:   body(1, "/data/tv/", "all", true),
			Result: `{"added":"Severance (2022)","path":"/tv/Severance","quality_profile":"Any","root_folder":"/data/tv/","monitor":"all","searching":true}`,
		},
		{
			Name: "chosen", Args: `{"tvdb_id":371980,"quality_profile":"hd-1080p","root_folder":"/tv/","monitor":"future","search_now":false}`,
			Requests: all,
			Body:     body(4, "/tv", "future", false),
			Result:   `{"added":"Severance (2022)","path":"/tv/Severance","quality_profile":"HD-1080p","root_folder":"/tv","monitor":"future","searching":false}`,
		},
		{
			Name: "in the library", Args: `{"tvdb_id":280619}`,
			Replies:  map[string]reply{"GET /api/v3/series/lookup": {Body: arrtest.Fixture(t, "lookup.json")}},
			Requests: []string{"GET /api/v3/series/lookup?term=tvdb%3A280619"},
			Err:      "The Expanse (2015) is already in Sonarr",
		},
		{
			Name: "added meanwhile", Args: `{"tvdb_id":371980}`, Replies: refusal("This series has already been added"),
			Requests: all, Body: body(1, "/data/tv/", "all", true),
			Err: "Severance (2022) is already in Sonarr",
		},
		{
			Name: "refused", Args: `{"tvdb_id":371980}`, Replies: refusal("Root folder '/data/tv/' does not exist"),
			Requests: all, Body: body(1, "/data/tv/", "all", true),
			Err: "Sonarr refused POST /api/v3/series (400 Bad Request): Root folder '/data/tv/' does not exist: unexpected response",
		},
		{
			Name: "unknown profile", Args: `{"tvdb_id":371980,"quality_profile":"Ultra-HD"}`,
			Requests: []string{lookup, profiles},
			Err:      `Sonarr has no quality profile "Ultra-HD"; choose one of: Any, HD-1080p`,
		},
		{
			Name: "unknown folder", Args: `{"tvdb_id":371980,"root_folder":"/media/tv"}`,
			Requests: []string{lookup, profiles, folders},
			Err:      `Sonarr has no root folder "/media/tv"; choose one of: /data/tv/, /tv`,
		},
		{
			Name: "no profiles", Args: `{"tvdb_id":371980}`,
			Replies:  map[string]reply{profiles: {Body: `[]`}},
			Requests: []string{lookup, profiles},
			Err:      "Sonarr has no quality profile yet; create one in its settings first",
		},
		{
			Name: "unknown id", Args: `{"tvdb_id":371980}`,
			Replies:  map[string]reply{"GET /api/v3/series/lookup": {Body: `[]`}},
			Requests: []string{lookup},
			Err:      "Sonarr knows no series with TVDB id 371980; find the id with sonarr_lookup",
		},
	})
}

func TestQueue(t *testing.T) {
	s, f := start(t, map[string]reply{"GET /api/v3/queue": {Body: arrtest.Fixture(t, "queue.json")}})
	res, msg := arrtest.Call(t, s, "sonarr_queue", `{}`)
	if msg != "" {
		t.Fatal(msg)
	}
	arrtest.JSONEqual(t, "result", res, `{"items":[
		{"title":"Severance S02E05","release":"Severance.S02E05.1080p.ATVP.WEB-DL.DDP5.1.H.264-NTb","progress_percent":75,
		 "size":"3.0 GiB","time_left":"12m30s","status":"downloading","state":"downloading"},
		{"title":"The Expanse S06E01","release":"The.Expanse.S06E01.1080p.BluRay.x264-ROVERS","progress_percent":100,
		 "size":"4.0 GiB","status":"completed","state":"importBlocked","health":"warning",
		 "messages":["Not an upgrade for existing episode file(s). Existing quality: Bluray-1080p. New Quality Bluray-1080p.",
		             "The.Expanse.S06E01.1080p.BluRay.x264-ROVERS.sample.mkv: Sample"]},
		{"title":"Some.Random.Show.2024.S01E01.720p.HDTV.x264","progress_percent":50,"size":"700.0 MiB","time_left":"26h3m5s",
		 "status":"warning","state":"downloading","health":"warning","error":"The download is stalled with no connections",
		 "messages":["Unknown Series"]}]}`)
	f.Expect(t, "GET /api/v3/queue?includeEpisode=true&includeSeries=true&includeUnknownSeriesItems=true&pageSize=20")
}

func TestQueueMore(t *testing.T) {
	s, _ := start(t, map[string]reply{"GET /api/v3/queue": {Body: `{"page":1,"pageSize":20,"totalRecords":57,"records":[
		{"title":"A.Release","size":100,"sizeleft":100,"timeleft":"garbled","status":"queued","trackedDownloadStatus":"ok","trackedDownloadState":"downloading",
		 "series":{"title":"A Show"},"statusMessages":[{"title":"","messages":[]}]}]}`}})
	res, _ := arrtest.Call(t, s, "sonarr_queue", `{}`)
	arrtest.JSONEqual(t, "result", res, `{"items":[{"title":"A Show","release":"A.Release","progress_percent":0,"size":"100 B",
		"time_left":"garbled","status":"queued","state":"downloading"}],"more":56}`)
}

func TestCalendar(t *testing.T) {
	s, f := start(t, map[string]reply{"GET /api/v3/calendar": {Body: arrtest.Fixture(t, "calendar.json")}})
	res, msg := arrtest.Call(t, s, "sonarr_calendar", `{}`)
	if msg != "" {
		t.Fatal(msg)
	}
	// Times in Paris, where the test's clock is: UTC+01:00.
	arrtest.JSONEqual(t, "result", res, `{"items":[
		{"series":"Slow Horses","episode":"S01E08","title":"The Ballad of Hemingway","airs":"Sat 2026-11-21 03:00","has_file":true},
		{"series":"Slow Horses","episode":"S01E09","title":"TBA","airs":"Tue 2026-11-24 22:00","has_file":false},
		{"series":"Severance","episode":"S03E01","title":"Hello, Ms. Cobel","airs":"Fri 2026-11-27 03:00","has_file":false}]}`)
	arrtest.Call(t, s, "sonarr_calendar", `{"days":60}`)
	f.Expect(t,
		"GET /api/v3/calendar?end=2026-11-27T23%3A00%3A00Z&includeSeries=true&start=2026-11-20T23%3A00%3A00Z&unmonitored=false",
		"GET /api/v3/calendar?end=2027-01-19T23%3A00%3A00Z&includeSeries=true&start=2026-11-20T23%3A00%3A00Z&unmonitored=false")
	if _, msg := arrtest.Call(t, s, "sonarr_calendar", `{"days":61}`); !strings.Contains(msg, "invalid arguments") {
		t.Errorf("61 days: %q", msg)
	}
}

func TestFailures(t *testing.T) {
	arrtest.Failures(t, "sonarr", newPlugin, map[string]string{
		"sonarr_lookup":   `{"term":"severance"}`,
		"sonarr_add":      `{"tvdb_id":371980}`,
		"sonarr_queue":    `{}`,
		"sonarr_calendar": `{"days":3}`,
	})
	arrtest.Deadline(t, "sonarr", newPlugin, "sonarr_queue", `{}`)
}
