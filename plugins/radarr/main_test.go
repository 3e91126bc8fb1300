package main

import (
	"testing"

	"github.com/mmcpd/mmcpd/plugins/internal/arr/arrtest"
)

type reply = arrtest.Reply

// call calls tool once against a fake Radarr answering replies, and returns
// the fake for a look at what it was asked.
func call(t *testing.T, replies map[string]reply, tool, args string) (string, string, *arrtest.Fake) {
	t.Helper()
	f := arrtest.NewFake(t, replies)
	res, msg := arrtest.Call(t, arrtest.Start(t, "radarr", f.URL, newPlugin, arrtest.Env()), tool, args)
	return res, msg, f
}

func TestDescribe(t *testing.T) {
	arrtest.Describe(t, arrtest.Start(t, "radarr", "http://radarr:7878", newPlugin, arrtest.Env()), "radarr", map[string]bool{
		"radarr_lookup": false, "radarr_add": true, "radarr_queue": false, "radarr_calendar": false,
	})
}

func TestSettings(t *testing.T) {
	arrtest.Settings(t, "radarr", newPlugin, "radarr_lookup", `{"term":"dune"}`)
}

func TestLookup(t *testing.T) {
	res, msg, f := call(t, map[string]reply{"GET /api/v3/movie/lookup": {Body: arrtest.Fixture(t, "lookup.json")}},
		"radarr_lookup", `{"term":"dune"}`)
	arrtest.JSONEqual(t, "result "+msg, res, `{"items":[
		{"title":"Dune","year":2021,"tmdb_id":438631,"imdb_id":"tt1160419","studio":"Legendary Pictures","in_library":true},
		{"title":"Dune: Part Two","year":2024,"tmdb_id":693134,"imdb_id":"tt15239678","studio":"Legendary Pictures","in_library":false},
		{"title":"Dune","year":1984,"tmdb_id":841,"imdb_id":"tt0087182","studio":"Dino De Laurentiis Company","in_library":false}]}`)
	f.Expect(t, "GET /api/v3/movie/lookup?term=dune")

	res, _, _ = call(t, map[string]reply{"GET /api/v3/movie/lookup": {Body: `[]`}}, "radarr_lookup", `{"term":"tmdb:1"}`)
	arrtest.JSONEqual(t, "nothing found", res, `{"items":[]}`)
}

func TestAdd(t *testing.T) {
	const (
		have     = "GET /api/v3/movie"
		lookup   = "GET /api/v3/movie/lookup/tmdb"
		profiles = "GET /api/v3/qualityprofile"
		folders  = "GET /api/v3/rootfolder"
		post     = "POST /api/v3/movie"
	)
	dune2 := arrtest.Fixture(t, "lookup_tmdb.json")
	asked := []string{have + "?tmdbId=693134", lookup + "?tmdbId=693134", profiles, folders, post}
	body := func(profile int, folder string, search bool) string {
		return arrtest.Merge(t, dune2, map[string]any{
			"qualityProfileId": profile, "rootFolderPath": folder, "monitored": true, "minimumAvailability": "released",
			"addOptions": map[string]any{"searchForMovie": search},
		})
	}
	const added = `{"added":"Dune: Part Two (2024)","path":"/movies/Dune - Part Two (2024)","quality_profile":"Any","root_folder":"/movies","searching":true}`
	const there = "Dune: Part Two (2024) is already in Radarr"
	const unknown = "Radarr knows no film with TMDB id 693134; find the id with radarr_lookup"
	arrtest.Adds(t, "radarr", "radarr_add", newPlugin, map[string]reply{
		have:     {Body: `[]`},
		lookup:   {Body: dune2},
		profiles: {Body: arrtest.Fixture(t, "qualityprofile.json")},
		folders:  {Body: arrtest.Fixture(t, "rootfolder.json")},
		post:     {Body: arrtest.Fixture(t, "movie_added.json")},
	}, []arrtest.AddCase{
		{Name: "defaults", Args: `{"tmdb_id":693134}`, Requests: asked, Body: body(1, "/movies", true), Result: added},
		{
			Name: "chosen", Args: `{"tmdb_id":693134,"quality_profile":"ULTRA-HD","root_folder":"/data/movies-4k","search_now":false}`,
			Requests: asked, Body: body(5, "/data/movies-4k/", false),
			Result: `{"added":"Dune: Part Two (2024)","path":"/movies/Dune - Part Two (2024)","quality_profile":"Ultra-HD","root_folder":"/data/movies-4k/","searching":false}`,
		},
		{
			Name: "in the library", Args: `{"tmdb_id":693134}`,
			Replies:  map[string]reply{have: {Body: `[` + arrtest.Fixture(t, "movie_added.json") + `]`}},
			Requests: asked[:1],
			Err:      there,
		},
		{
			Name: "added meanwhile", Args: `{"tmdb_id":693134}`, Requests: asked, Body: body(1, "/movies", true), Err: there,
			Replies: map[string]reply{post: {Status: 400, Body: `[{"propertyName":"TmdbId","errorMessage":"This movie has already been added","attemptedValue":693134,"severity":"error","errorCode":"MovieExistsValidator"}]`}},
		},
		{
			Name: "conflict", Args: `{"tmdb_id":693134}`, Requests: asked, Body: body(1, "/movies", true), Err: there,
			Replies: map[string]reply{post: {Status: 409, Body: `{"message":"UNIQUE constraint failed: Movies.MovieMetadataId"}`}},
		},
		{
			Name: "unknown profile", Args: `{"tmdb_id":693134,"quality_profile":"4K"}`, Requests: asked[:3],
			Err: `Radarr has no quality profile "4K"; choose one of: Any, HD-1080p, Ultra-HD`,
		},
		{
			Name: "unknown folder", Args: `{"tmdb_id":693134,"root_folder":"/srv/films"}`, Requests: asked[:4],
			Err: `Radarr has no root folder "/srv/films"; choose one of: /movies, /data/movies-4k/`,
		},
		{
			Name: "no root folder", Args: `{"tmdb_id":693134}`, Requests: asked[:4],
			Replies: map[string]reply{folders: {Body: `[]`}},
			Err:     "Radarr has no root folder yet; create one in its settings first",
		},
		{
			Name: "unknown id", Args: `{"tmdb_id":693134}`, Requests: asked[:2], Err: unknown,
			Replies: map[string]reply{lookup: {Status: 500, Body: `{"message":"Movie with tmdbId 693134 was not found, it may have been removed from TMDb.","description":"NzbDrone.Core.Exceptions.MovieNotFoundException"}`}},
		},
		{
			Name: "unknown id (404)", Args: `{"tmdb_id":693134}`, Requests: asked[:2], Err: unknown,
			Replies: map[string]reply{lookup: {Status: 404, Body: `{"message":"NotFound"}`}},
		},
		{
			Name: "lookup fails", Args: `{"tmdb_id":693134}`, Requests: asked[:2],
			Replies: map[string]reply{lookup: {Status: 503, Body: `{"message":"Unable to communicate with RadarrAPI."}`}},
			Err:     "Radarr failed (503 Service Unavailable on GET /api/v3/movie/lookup/tmdb): Unable to communicate with RadarrAPI.: service error",
		},
	})
}

func TestQueue(t *testing.T) {
	res, msg, f := call(t, map[string]reply{"GET /api/v3/queue": {Body: arrtest.Fixture(t, "queue.json")}}, "radarr_queue", ``)
	arrtest.JSONEqual(t, "result "+msg, res, `{"items":[
		{"title":"Dune: Part Two (2024)","release":"Dune.Part.Two.2024.1080p.BluRay.x264-SPARKS","progress_percent":75,
		 "size":"10.0 GiB","time_left":"45m10s","status":"downloading","state":"downloading"},
		{"title":"Oppenheimer (2023)","release":"Oppenheimer.2023.2160p.UHD.BluRay.REMUX.HDR.HEVC.DTS-HD.MA.5.1-FGT","progress_percent":100,
		 "size":"70.0 GiB","status":"completed","state":"importBlocked","health":"warning",
		 "messages":["No files found are eligible for import in /downloads/complete/Oppenheimer.2023.2160p.UHD.BluRay.REMUX.HDR.HEVC.DTS-HD.MA.5.1-FGT"]}]}`)
	f.Expect(t, "GET /api/v3/queue?includeMovie=true&includeUnknownMovieItems=true&pageSize=20")
}

func TestCalendar(t *testing.T) {
	replies := map[string]reply{"GET /api/v3/calendar": {Body: arrtest.Fixture(t, "calendar.json")}}
	res, msg, f := call(t, replies, "radarr_calendar", `{"days":7}`)
	// Hamnet's disc comes out on 2026-11-28: the day after the window, which
	// Radarr includes and the tool does not.
	arrtest.JSONEqual(t, "result "+msg, res, `{"items":[
		{"title":"Zootopia 2","year":2025,"releases":[{"type":"physical","date":"2026-11-21"}],"has_file":true},
		{"title":"The Odyssey","year":2026,"releases":[{"type":"digital","date":"2026-11-22"},{"type":"physical","date":"2026-11-26"}],"has_file":false},
		{"title":"Project Hail Mary","year":2026,"releases":[{"type":"digital","date":"2026-11-24"}],"has_file":false}]}`)
	f.Expect(t, "GET /api/v3/calendar?end=2026-11-28&start=2026-11-21&unmonitored=false")

	_, _, f = call(t, replies, "radarr_calendar", `{"days":1}`)
	f.Expect(t, "GET /api/v3/calendar?end=2026-11-22&start=2026-11-21&unmonitored=false")
}

func TestFailures(t *testing.T) {
	arrtest.Failures(t, "radarr", newPlugin, map[string]string{
		"radarr_lookup":   `{"term":"dune"}`,
		"radarr_add":      `{"tmdb_id":693134,"search_now":false}`,
		"radarr_queue":    `{}`,
		"radarr_calendar": `{}`,
	})
	arrtest.Deadline(t, "radarr", newPlugin, "radarr_add", `{"tmdb_id":693134}`)
}
