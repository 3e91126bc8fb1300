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

// start serves the plugin against a fake Lidarr answering replies.
func start(t *testing.T, replies map[string]reply) (pluginpb.PluginServer, *arrtest.Fake) {
	t.Helper()
	f := arrtest.NewFake(t, replies)
	return arrtest.Start(t, "lidarr", f.URL, newPlugin, arrtest.Env()), f
}

func TestDescribe(t *testing.T) {
	s, _ := start(t, nil)
	arrtest.Describe(t, s, "lidarr", map[string]bool{
		"lidarr_lookup": false, "lidarr_add": true, "lidarr_queue": false, "lidarr_calendar": false,
	})
	d, _ := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	if !strings.Contains(d.Settings[0].Description, "http://localhost:8686 for Lidarr") {
		t.Errorf("URL setting: %q", d.Settings[0].Description)
	}
	for _, tool := range d.Tools {
		if tool.Name != "lidarr_add" {
			continue
		}
		var schema struct {
			Required   []string
			Properties map[string]struct {
				Enum    []string
				Pattern string
			}
		}
		if err := json.Unmarshal(tool.ArgsSchema, &schema); err != nil ||
			fmt.Sprint(schema.Required) != "[musicbrainz_id]" || len(schema.Properties) != 7 ||
			fmt.Sprint(schema.Properties["monitor"].Enum) != "[all future missing existing first latest none]" ||
			fmt.Sprint(schema.Properties["monitor_new_items"].Enum) != "[all new none]" ||
			schema.Properties["musicbrainz_id"].Pattern == "" {
			t.Errorf("lidarr_add schema: %s", tool.ArgsSchema)
		}
	}
}

func TestSettings(t *testing.T) {
	arrtest.Settings(t, "lidarr", newPlugin, "lidarr_queue", `{}`)
}

func TestLookup(t *testing.T) {
	s, f := start(t, map[string]reply{"GET /api/v1/artist/lookup": {Body: arrtest.Fixture(t, "lookup.json")}})
	res, msg := arrtest.Call(t, s, "lidarr_lookup", `{"term":"nirvana"}`)
	if msg != "" {
		t.Fatal(msg)
	}
	// Only the first three genres; the library's Nirvana has an id.
	arrtest.JSONEqual(t, "result", res, `{"items":[
		{"name":"Nirvana","disambiguation":"US grunge band","type":"Group","status":"ended","genres":["Alternative Rock","Grunge","Punk Rock"],
		 "musicbrainz_id":"5b11f4ce-a62d-471e-81fc-a69a8278c7da","in_library":true},
		{"name":"Nirvana","disambiguation":"60s band from the UK","type":"Group","status":"continuing","genres":["Psychedelic Pop"],
		 "musicbrainz_id":"9282c8b4-ca0b-4c6b-b7e3-4f7762dfc4d6","in_library":false},
		{"name":"Nirvana Tribute Band","type":"Group","status":"continuing","musicbrainz_id":"0f2a6b3c-1d4e-4f5a-8b6c-7d8e9f0a1b2c","in_library":false}]}`)
	f.Expect(t, "GET /api/v1/artist/lookup?term=nirvana")
}

func TestLookupBounded(t *testing.T) {
	var many []string
	for i := 1; i <= 10; i++ {
		many = append(many, fmt.Sprintf(`{"artistName":"Band %d","foreignArtistId":"00000000-0000-4000-8000-%012d"}`, i, i))
	}
	s, _ := start(t, map[string]reply{"GET /api/v1/artist/lookup": {Body: "[" + strings.Join(many, ",") + "]"}})
	res, msg := arrtest.Call(t, s, "lidarr_lookup", `{"term":"band"}`)
	var got struct {
		Items []candidate
		More  int
	}
	if err := json.Unmarshal([]byte(res), &got); err != nil || msg != "" || len(got.Items) != 8 || got.More != 2 ||
		got.Items[7].Name != "Band 8" || got.Items[7].MBID != "00000000-0000-4000-8000-000000000008" {
		t.Errorf("%s %q", res, msg)
	}
	s, _ = start(t, map[string]reply{"GET /api/v1/artist/lookup": {Body: `[]`}})
	res, _ = arrtest.Call(t, s, "lidarr_lookup", `{"term":"zzzz"}`)
	arrtest.JSONEqual(t, "nothing found", res, `{"items":[]}`)
}

func TestAdd(t *testing.T) {
	const mbid = "e0a2a5d8-4f3b-4d5c-9a1e-2b7c6d8f9e01"
	wetLeg := arrtest.Fixture(t, "lookup_mbid.json")
	var found []json.RawMessage
	if err := json.Unmarshal([]byte(wetLeg), &found); err != nil {
		t.Fatal(err)
	}
	body := func(quality int, folder string, metadata int, monitor, monitorNew string, search bool) string {
		return arrtest.Merge(t, string(found[0]), map[string]any{
			"qualityProfileId": quality, "rootFolderPath": folder, "metadataProfileId": metadata, "monitored": true,
			"monitorNewItems": monitorNew,
			"addOptions":      map[string]any{"monitor": monitor, "searchForMissingAlbums": search},
		})
	}
	const (
		lookup   = "GET /api/v1/artist/lookup?term=lidarr%3A" + mbid
		profiles = "GET /api/v1/qualityprofile"
		folders  = "GET /api/v1/rootfolder"
		metadata = "GET /api/v1/metadataprofile"
		post     = "POST /api/v1/artist"
	)
	all := []string{lookup, profiles, folders, metadata, post}
	args := `{"musicbrainz_id":"` + mbid + `"}`
	const added = `{"added":"Wet Leg","path":"/music/Wet Leg","quality_profile":"Any","metadata_profile":"Albums and EPs",
		"root_folder":"/music/","monitor":"all","searching":true}`
	arrtest.Adds(t, "lidarr", "lidarr_add", newPlugin, map[string]reply{
		"GET /api/v1/artist/lookup": {Body: wetLeg},
		profiles:                    {Body: arrtest.Fixture(t, "qualityprofile.json")},
		folders:                     {Body: arrtest.Fixture(t, "rootfolder.json")},
		metadata:                    {Body: arrtest.Fixture(t, "metadataprofile.json")},
		post:                        {Body: arrtest.Fixture(t, "artist_added.json")},
	}, []arrtest.AddCase{
		{
			// None comes first but is never the default: it fetches nothing.
			Name: "defaults", Args: args, Requests: all,
			Body: body(1, "/music/", 3, "all", "all", true), Result: added,
		},
		{
			Name: "chosen",
			Args: `{"musicbrainz_id":"` + mbid + `","quality_profile":"lossless","root_folder":"/data/flac/","metadata_profile":"everything",
				"monitor":"future","monitor_new_items":"new","search_now":false}`,
			Requests: all,
			Body:     body(3, "/data/flac", 4, "future", "new", false),
			Result: `{"added":"Wet Leg","path":"/music/Wet Leg","quality_profile":"Lossless","metadata_profile":"Everything",
				"root_folder":"/data/flac","monitor":"future","searching":false}`,
		},
		{
			Name: "None asked for", Args: `{"musicbrainz_id":"` + mbid + `","metadata_profile":"none","monitor":"none"}`, Requests: all,
			Body: body(1, "/music/", 2, "none", "all", true),
			Result: `{"added":"Wet Leg","path":"/music/Wet Leg","quality_profile":"Any","metadata_profile":"None",
				"root_folder":"/music/","monitor":"none","searching":true}`,
		},
		{
			// MusicBrainz ids are lower case; one copied in upper case is the same id.
			Name: "upper case id", Args: `{"musicbrainz_id":"` + strings.ToUpper(mbid) + `"}`,
			Requests: append([]string{"GET /api/v1/artist/lookup?term=lidarr%3A" + strings.ToUpper(mbid)}, all[1:]...),
			Body:     body(1, "/music/", 3, "all", "all", true), Result: added,
		},
		{
			Name: "in the library", Args: `{"musicbrainz_id":"5b11f4ce-a62d-471e-81fc-a69a8278c7da"}`,
			Replies:  map[string]reply{"GET /api/v1/artist/lookup": {Body: arrtest.Fixture(t, "lookup.json")}},
			Requests: []string{"GET /api/v1/artist/lookup?term=lidarr%3A5b11f4ce-a62d-471e-81fc-a69a8278c7da"},
			Err:      "Nirvana (US grunge band) is already in Lidarr",
		},
		{
			Name: "added meanwhile", Args: args, Requests: all, Body: body(1, "/music/", 3, "all", "all", true),
			Replies: map[string]reply{post: {Status: 400, Body: `[{"propertyName":"ForeignArtistId","errorMessage":"This artist has already been added.","attemptedValue":"` + mbid + `","severity":"error"}]`}},
			Err:     "Wet Leg is already in Lidarr",
		},
		{
			Name: "refused", Args: args, Requests: all, Body: body(1, "/music/", 3, "all", "all", true),
			Replies: map[string]reply{post: {Status: 400, Body: `[{"propertyName":"RootFolderPath","errorMessage":"Root folder '/music/' does not exist","severity":"error"}]`}},
			Err:     "Lidarr refused POST /api/v1/artist (400 Bad Request): Root folder '/music/' does not exist: unexpected response",
		},
		{
			Name: "unknown metadata profile", Args: `{"musicbrainz_id":"` + mbid + `","metadata_profile":"Standard"}`, Requests: all[:4],
			Err: `Lidarr has no metadata profile "Standard"; choose one of: None, Albums and EPs, Everything`,
		},
		{
			Name: "only None", Args: args, Requests: all[:4],
			Replies: map[string]reply{metadata: {Body: `[{"id":2,"name":"None","primaryAlbumTypes":[],"secondaryAlbumTypes":[],"releaseStatuses":[]}]`}},
			Err:     "Lidarr has no metadata profile yet; create one in its settings first",
		},
		{
			Name: "unknown quality profile", Args: `{"musicbrainz_id":"` + mbid + `","quality_profile":"FLAC 24bit"}`, Requests: all[:2],
			Err: `Lidarr has no quality profile "FLAC 24bit"; choose one of: Any, Lossless`,
		},
		{
			Name: "unknown folder", Args: `{"musicbrainz_id":"` + mbid + `","root_folder":"/srv/music"}`, Requests: all[:3],
			Err: `Lidarr has no root folder "/srv/music"; choose one of: /music/, /data/flac`,
		},
		{
			Name: "unknown id", Args: args, Requests: all[:1],
			Replies: map[string]reply{"GET /api/v1/artist/lookup": {Body: `[]`}},
			Err:     "Lidarr knows no artist with MusicBrainz id " + mbid + "; find the id with lidarr_lookup",
		},
		{
			Name: "metadata server down", Args: args, Requests: all[:1],
			Replies: map[string]reply{"GET /api/v1/artist/lookup": {Status: 500, Body: `{"message":"Search for 'lidarr:` + mbid + `' failed. Unable to communicate with LidarrAPI."}`}},
			Err:     "Lidarr failed (500 Internal Server Error on GET /api/v1/artist/lookup): Search for 'lidarr:" + mbid + "' failed. Unable to communicate with LidarrAPI.: service error",
		},
	})
}

// A MusicBrainz id of the wrong shape never reaches Lidarr.
func TestAddBadID(t *testing.T) {
	s, f := start(t, nil)
	for _, id := range []string{"nirvana", "5b11f4ce-a62d-471e-81fc", "5b11f4ce-a62d-471e-81fc-a69a8278c7da-1"} {
		if res, msg := arrtest.Call(t, s, "lidarr_add", `{"musicbrainz_id":"`+id+`"}`); res != "" || !strings.Contains(msg, "invalid arguments") {
			t.Errorf("%s: %q %q", id, res, msg)
		}
	}
	f.Expect(t)
}

func TestQueue(t *testing.T) {
	s, f := start(t, map[string]reply{"GET /api/v1/queue": {Body: arrtest.Fixture(t, "queue.json")}})
	res, msg := arrtest.Call(t, s, "lidarr_queue", `{}`)
	if msg != "" {
		t.Fatal(msg)
	}
	arrtest.JSONEqual(t, "result", res, `{"items":[
		{"title":"Wet Leg - Moisturizer","release":"Wet Leg - Moisturizer (2025) [FLAC]","progress_percent":75,
		 "size":"400.0 MiB","time_left":"3m20s","status":"downloading","state":"downloading"},
		{"title":"Nirvana - In Utero","release":"Nirvana-In_Utero-1993-MP3-320","progress_percent":100,
		 "size":"120.0 MiB","status":"completed","state":"importBlocked","health":"warning",
		 "messages":["Not an upgrade for existing track file(s)",
		             "12 - All Apologies.mp3: Album match is not close enough: 62.5% vs 80% [Track Count]"]},
		{"title":"VA-Summer_Hits_2026-WEB","progress_percent":50,"size":"1.0 GiB","time_left":"26h3m5s",
		 "status":"warning","state":"downloading","health":"warning","error":"The download is stalled with no connections",
		 "messages":["Unknown Artist"]}]}`)
	f.Expect(t, "GET /api/v1/queue?includeAlbum=true&includeArtist=true&includeUnknownArtistItems=true&pageSize=20")
}

func TestCalendar(t *testing.T) {
	s, f := start(t, map[string]reply{"GET /api/v1/calendar": {Body: arrtest.Fixture(t, "calendar.json")}})
	res, msg := arrtest.Call(t, s, "lidarr_calendar", `{}`)
	if msg != "" {
		t.Fatal(msg)
	}
	// Sorted by day; the single of 2026-11-28 is the day after the window,
	// which Lidarr includes and the tool does not.
	arrtest.JSONEqual(t, "result", res, `{"items":[
		{"artist":"Nirvana","album":"Live at Reading (Deluxe)","type":"Album","release_date":"2026-11-21","tracks":25,"tracks_on_disk":9},
		{"artist":"Wet Leg","album":"Songs for the Drive","type":"EP","release_date":"2026-11-24","tracks":5,"tracks_on_disk":0}]}`)
	arrtest.Call(t, s, "lidarr_calendar", `{"days":60}`)
	f.Expect(t,
		"GET /api/v1/calendar?end=2026-11-28&includeArtist=true&start=2026-11-21&unmonitored=false",
		"GET /api/v1/calendar?end=2027-01-20&includeArtist=true&start=2026-11-21&unmonitored=false")
	if _, msg := arrtest.Call(t, s, "lidarr_calendar", `{"days":0}`); !strings.Contains(msg, "invalid arguments") {
		t.Errorf("0 days: %q", msg)
	}
}

func TestFailures(t *testing.T) {
	arrtest.Failures(t, "lidarr", newPlugin, map[string]string{
		"lidarr_lookup":   `{"term":"wet leg"}`,
		"lidarr_add":      `{"musicbrainz_id":"e0a2a5d8-4f3b-4d5c-9a1e-2b7c6d8f9e01"}`,
		"lidarr_queue":    `{}`,
		"lidarr_calendar": `{"days":3}`,
	})
	arrtest.Deadline(t, "lidarr", newPlugin, "lidarr_add", `{"musicbrainz_id":"e0a2a5d8-4f3b-4d5c-9a1e-2b7c6d8f9e01"}`)
}
