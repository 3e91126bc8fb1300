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

// start serves the plugin against a fake Prowlarr answering replies.
func start(t *testing.T, replies map[string]reply) (pluginpb.PluginServer, *arrtest.Fake) {
	t.Helper()
	f := arrtest.NewFake(t, replies)
	return arrtest.Start(t, "prowlarr", f.URL, newPlugin, arrtest.Env()), f
}

// noSecrets checks that a result quotes none of the credentials the
// fixtures hold: Prowlarr's key (in its download links), an indexer's API
// key, cookie and passkey.
func noSecrets(t *testing.T, res string) {
	t.Helper()
	for _, secret := range []string{arrtest.APIKey, "nzbgeek-key-8c41d2e7", "ck-5e3f1a9b7c2d", "ipt-passkey-77aa", "apikey", "magnet:"} {
		if strings.Contains(res, secret) {
			t.Errorf("the result quotes %q: %s", secret, res)
		}
	}
}

func TestDescribe(t *testing.T) {
	s, _ := start(t, nil)
	arrtest.Describe(t, s, "prowlarr", map[string]bool{"prowlarr_indexers": false, "prowlarr_search": false})
	d, _ := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	if !strings.Contains(d.Settings[0].Description, "http://localhost:9696 for Prowlarr") {
		t.Errorf("URL setting: %q", d.Settings[0].Description)
	}
	for _, tool := range d.Tools {
		if tool.Name != "prowlarr_search" {
			continue
		}
		var schema struct {
			Required   []string
			Properties map[string]struct {
				Enum  []string
				Items struct{ Minimum *int }
			}
		}
		if err := json.Unmarshal(tool.ArgsSchema, &schema); err != nil ||
			fmt.Sprint(schema.Required) != "[query]" || len(schema.Properties) != 4 ||
			fmt.Sprint(schema.Properties["type"].Enum) != "[search movie tvsearch music]" ||
			schema.Properties["indexer_ids"].Items.Minimum == nil || *schema.Properties["indexer_ids"].Items.Minimum != -2 {
			t.Errorf("prowlarr_search schema: %s", tool.ArgsSchema)
		}
	}
}

func TestSettings(t *testing.T) {
	arrtest.Settings(t, "prowlarr", newPlugin, "prowlarr_indexers", `{}`)
}

func TestIndexers(t *testing.T) {
	s, f := start(t, map[string]reply{
		"GET /api/v1/indexer":       {Body: arrtest.Fixture(t, "indexer.json")},
		"GET /api/v1/indexerstatus": {Body: arrtest.Fixture(t, "indexerstatus.json")},
		"GET /api/v1/health":        {Body: arrtest.Fixture(t, "health.json")},
	})
	res, msg := arrtest.Call(t, s, "prowlarr_indexers", `{}`)
	if msg != "" {
		t.Fatal(msg)
	}
	// Failing first, disabled last. Times in Paris, where the test's clock
	// is (UTC+01:00, 14:03): IPTorrents' time out ended at 13:00, so it is
	// tried again; Old Tracker is off whatever its status says.
	arrtest.JSONEqual(t, "result", res, `{"summary":"4 indexers: 2 ok, 1 failing, 1 disabled","items":[
		{"id":2,"name":"NZBgeek","protocol":"usenet","privacy":"private","status":"failing",
		 "disabled_until":"Sat 2026-11-21 16:03","failing_since":"Fri 2026-11-20 23:40","last_failure":"Sat 2026-11-21 13:03"},
		{"id":1,"name":"1337x","protocol":"torrent","privacy":"public","status":"ok"},
		{"id":5,"name":"IPTorrents","protocol":"torrent","privacy":"private","status":"ok","last_failure":"Sat 2026-11-21 12:55"},
		{"id":4,"name":"Old Tracker","protocol":"torrent","privacy":"semiPrivate","status":"disabled"}],
		"health":["warning: Indexers unavailable due to failures: NZBgeek","error: Applications unavailable due to failures: Lidarr"]}`)
	noSecrets(t, res)
	f.Expect(t, "GET /api/v1/indexer", "GET /api/v1/indexerstatus", "GET /api/v1/health")
}

// A failure after the first request is the tool's error all the same.
func TestIndexersHalfAnswered(t *testing.T) {
	s, f := start(t, map[string]reply{
		"GET /api/v1/indexer":       {Body: arrtest.Fixture(t, "indexer.json")},
		"GET /api/v1/indexerstatus": {Body: arrtest.Fixture(t, "indexerstatus.json")},
		"GET /api/v1/health":        {Status: 500, Body: `{"message":"database is locked"}`},
	})
	res, msg := arrtest.Call(t, s, "prowlarr_indexers", `{}`)
	if want := "Prowlarr failed (500 Internal Server Error on GET /api/v1/health): database is locked: service error"; res != "" || msg != want {
		t.Errorf("%q (result %s), want %q", msg, res, want)
	}
	f.Expect(t, "GET /api/v1/indexer", "GET /api/v1/indexerstatus", "GET /api/v1/health")
}

func TestIndexersBounded(t *testing.T) {
	var many, health []string
	for i := 1; i <= 25; i++ {
		many = append(many, fmt.Sprintf(`{"id":%d,"name":"Indexer %02d","enable":%v,"protocol":"torrent","privacy":"public"}`, i, i, i%5 != 0))
		health = append(health, fmt.Sprintf(`{"source":"IndexerVIPCheck","type":"warning","message":"Indexer VIP benefits expiring soon: Indexer %02d"}`, i))
	}
	s, _ := start(t, map[string]reply{
		"GET /api/v1/indexer":       {Body: "[" + strings.Join(many, ",") + "]"},
		"GET /api/v1/indexerstatus": {Body: `[]`},
		"GET /api/v1/health":        {Body: "[" + strings.Join(health, ",") + "]"},
	})
	res, msg := arrtest.Call(t, s, "prowlarr_indexers", `{}`)
	var got indexerReport
	if err := json.Unmarshal([]byte(res), &got); err != nil || msg != "" {
		t.Fatalf("%s %q", res, msg)
	}
	if got.Summary != "25 indexers: 20 ok, 0 failing, 5 disabled" || len(got.Items) != 20 || got.More != 5 ||
		got.Items[19].Name != "Indexer 24" || len(got.Health) != 10 {
		t.Errorf("%s", res)
	}

	s, _ = start(t, map[string]reply{
		"GET /api/v1/indexer":       {Body: `[]`},
		"GET /api/v1/indexerstatus": {Body: `[]`},
		"GET /api/v1/health":        {Body: `[]`},
	})
	res, _ = arrtest.Call(t, s, "prowlarr_indexers", `{}`)
	arrtest.JSONEqual(t, "no indexer", res, `{"summary":"0 indexers: 0 ok, 0 failing, 0 disabled","items":[]}`)
}

func TestSearch(t *testing.T) {
	s, f := start(t, map[string]reply{"GET /api/v1/search": {Body: arrtest.Fixture(t, "search.json")}})
	res, msg := arrtest.Call(t, s, "prowlarr_search", `{"query":"dune part two","type":"movie","indexer_ids":[1,-2],"categories":[2000,5000]}`)
	if msg != "" {
		t.Fatal(msg)
	}
	// The most seeded first, then usenet by grabs; never a link.
	arrtest.JSONEqual(t, "result", res, `{"items":[
		{"title":"Dune.Part.Two.2024.1080p.WEB-DL.DDP5.1.Atmos.H.264-FLUX","indexer":"1337x","size":"6.5 GiB","seeders":850,"leechers":120,
		 "grabs":51234,"age":"245 days","protocol":"torrent","category":"Movies/HD"},
		{"title":"Dune.Part.Two.2024.2160p.UHD.BluRay.REMUX.HDR.HEVC.DTS-HD.MA.7.1-FGT","indexer":"IPTorrents","size":"66.0 GiB","seeders":312,
		 "leechers":4,"grabs":77,"age":"30 hours","protocol":"torrent","category":"Movies/UHD"},
		{"title":"Dune.Part.Two.2024.720p.WEBRip.x264-GalaxyRG","indexer":"1337x","size":"1.2 GiB","seeders":0,"leechers":3,"grabs":0,
		 "age":"42 minutes","protocol":"torrent","category":"Movies"},
		{"title":"Dune.Part.Two.2024.1080p.BluRay.x264-SPARKS","indexer":"NZBgeek","size":"10.0 GiB","grabs":1400,"age":"150 days",
		 "protocol":"usenet","category":"Movies/HD"},
		{"title":"Dune Part Two 2024 1080p WEB H264-NOGROUP","indexer":"NZBgeek","size":"2.0 GiB","age":"200 days","protocol":"usenet"}]}`)
	noSecrets(t, res)

	arrtest.Call(t, s, "prowlarr_search", `{"query":"wet leg moisturizer"}`)
	f.Expect(t,
		"GET /api/v1/search?categories=2000&categories=5000&indexerIds=1&indexerIds=-2&limit=100&query=dune+part+two&type=movie",
		"GET /api/v1/search?limit=100&query=wet+leg+moisturizer&type=search")
}

func TestSearchBounded(t *testing.T) {
	var many []string
	for i := 1; i <= 27; i++ {
		many = append(many, fmt.Sprintf(`{"title":"Release %02d","indexer":"1337x","size":%d,"seeders":%d,"age":3,"ageHours":80,"ageMinutes":4800,"protocol":"torrent"}`, i, i<<20, i))
	}
	s, _ := start(t, map[string]reply{"GET /api/v1/search": {Body: "[" + strings.Join(many, ",") + "]"}})
	res, msg := arrtest.Call(t, s, "prowlarr_search", `{"query":"release"}`)
	var got struct {
		Items []result
		More  int
	}
	if err := json.Unmarshal([]byte(res), &got); err != nil || msg != "" || len(got.Items) != 20 || got.More != 7 ||
		got.Items[0].Title != "Release 27" || got.Items[19].Title != "Release 08" || got.Items[19].Size != "8.0 MiB" {
		t.Errorf("%s %q", res, msg)
	}

	s, _ = start(t, map[string]reply{"GET /api/v1/search": {Body: `[]`}})
	res, _ = arrtest.Call(t, s, "prowlarr_search", `{"query":"zzzz"}`)
	arrtest.JSONEqual(t, "nothing found", res, `{"items":[]}`)
}

func TestSearchRefused(t *testing.T) {
	tests := []struct {
		name  string
		reply reply
		want  string
	}{
		{"every indexer out", reply{Status: 400, Body: `{"message":"Search failed due to all selected indexers being unavailable"}`},
			"Prowlarr could not search: every indexer asked is disabled or failing; prowlarr_indexers says which"},
		{"another refusal", reply{Status: 400, Body: `{"message":"Query is invalid"}`},
			"Prowlarr refused GET /api/v1/search (400 Bad Request): Query is invalid: unexpected response"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := start(t, map[string]reply{"GET /api/v1/search": tc.reply})
			if res, msg := arrtest.Call(t, s, "prowlarr_search", `{"query":"dune","indexer_ids":[7]}`); res != "" || msg != tc.want {
				t.Errorf("%q (result %s), want %q", msg, res, tc.want)
			}
		})
	}
}

// Arguments the schema refuses never reach Prowlarr.
func TestSearchBadArgs(t *testing.T) {
	s, f := start(t, nil)
	for _, args := range []string{`{}`, `{"query":""}`, `{"query":"dune","type":"book"}`, `{"query":"dune","indexer_ids":[-3]}`, `{"query":"dune","categories":[0]}`} {
		if res, msg := arrtest.Call(t, s, "prowlarr_search", args); res != "" || !strings.Contains(msg, "invalid arguments") {
			t.Errorf("%s: %q %q", args, res, msg)
		}
	}
	f.Expect(t)
}

func TestAge(t *testing.T) {
	tests := []struct {
		days           int
		hours, minutes float64
		want           string
	}{
		{0, 0, -3, "0 minutes"}, // a clock ahead of Prowlarr's
		{0, 0, 0.4, "0 minutes"},
		{0, 0, 1, "1 minute"},
		{0, 0.99, 59.9, "59 minutes"},
		{0, 1, 60, "1 hour"},
		{1, 47.9, 2874, "47 hours"},
		{2, 48, 2880, "2 days"},
		{1, 25, 1500, "25 hours"},
		{3650, 87600, 5256000, "3650 days"},
	}
	for _, tc := range tests {
		if got := age(release{Age: tc.days, AgeHours: tc.hours, AgeMinutes: tc.minutes}); got != tc.want {
			t.Errorf("age(%d d, %v h, %v min) = %q, want %q", tc.days, tc.hours, tc.minutes, got, tc.want)
		}
	}
}

func TestFailures(t *testing.T) {
	arrtest.Failures(t, "prowlarr", newPlugin, map[string]string{
		"prowlarr_indexers": `{}`,
		"prowlarr_search":   `{"query":"dune","type":"movie"}`,
	})
	arrtest.Deadline(t, "prowlarr", newPlugin, "prowlarr_search", `{"query":"dune"}`)
}
