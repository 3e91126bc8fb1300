// Command catalogue stands in for the bundled media plugins in the cost
// benchmarks: it declares their tools with the same names, descriptions and
// argument schemas (as docs/plugins.md lists them) for a home set up with
// Jellyfin, Radarr, Sonarr, Prowlarr, Transmission, TMDB and Jellyseerr, so
// the model's system prompt is as long as a real daemon's, and answers each
// call with a small canned result like the real plugin's. The results are
// keyed by tool and by the call's main argument; they never change, so a
// benchmark sees the same session on every run.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

type noArgs struct{}

type jellyfinSearchArgs struct {
	Query string `json:"query" jsonschema:"minLength=1,maxLength=200,description=Words of the title to look for"`
	Type  string `json:"type,omitempty" jsonschema:"enum=movie,enum=series,enum=episode,enum=album,description=Only this kind of item; omit it for all four"`
}

type latestArgs struct {
	Limit int `json:"limit,omitempty" jsonschema:"minimum=1,maximum=30,default=10,description=How many of the newest additions to list"`
}

type lookupArgs struct {
	Term string `json:"term" jsonschema:"minLength=1,maxLength=200,description=Film title (or tmdb:<id> or imdb:<id>)"`
}

type seriesLookupArgs struct {
	Term string `json:"term" jsonschema:"minLength=1,maxLength=200,description=Series name (or tvdb:<id>)"`
}

type radarrAddArgs struct {
	TMDBID         int    `json:"tmdb_id" jsonschema:"minimum=1,description=TMDB id of the film (from radarr_lookup)"`
	QualityProfile string `json:"quality_profile,omitempty" jsonschema:"maxLength=200,description=Quality profile name; omit it for the first profile"`
	RootFolder     string `json:"root_folder,omitempty" jsonschema:"maxLength=1000,description=Root folder path; omit it for the first root folder"`
	SearchNow      *bool  `json:"search_now,omitempty" jsonschema:"default=true,description=Start searching for it right away"`
}

type sonarrAddArgs struct {
	TVDBID         int    `json:"tvdb_id" jsonschema:"minimum=1,description=TVDB id of the series (from sonarr_lookup)"`
	Monitor        string `json:"monitor,omitempty" jsonschema:"enum=all,enum=future,enum=none,default=all,description=Which episodes to monitor: all or only future ones or none"`
	QualityProfile string `json:"quality_profile,omitempty" jsonschema:"maxLength=200,description=Quality profile name; omit it for the first profile"`
	RootFolder     string `json:"root_folder,omitempty" jsonschema:"maxLength=1000,description=Root folder path; omit it for the first root folder"`
	SearchNow      *bool  `json:"search_now,omitempty" jsonschema:"default=true,description=Start searching for it right away"`
}

type calendarArgs struct {
	Days int `json:"days,omitempty" jsonschema:"minimum=1,maximum=60,default=7,description=How many days to look ahead; today is the first"`
}

type prowlarrSearchArgs struct {
	Query      string `json:"query" jsonschema:"minLength=1,maxLength=300,description=What to search for: words of the title and maybe the year or season (S02)"`
	Type       string `json:"type,omitempty" jsonschema:"enum=search,enum=movie,enum=tvsearch,enum=music,default=search,description=Kind of search: search (anything) or movie or tvsearch or music"`
	IndexerIDs []int  `json:"indexer_ids,omitempty" jsonschema:"maxItems=50,minimum=-2,description=Only these indexers (ids from prowlarr_indexers); -1 is every usenet indexer and -2 every torrent one; omit it for all enabled indexers"`
	Categories []int  `json:"categories,omitempty" jsonschema:"maxItems=20,minimum=1,description=Only these Newznab categories e.g. 2000 movies or 5000 TV or 3000 audio or 7000 books; omit it for all"`
}

type transmissionListArgs struct {
	Filter string `json:"filter,omitempty" jsonschema:"enum=all,enum=downloading,enum=seeding,enum=paused,enum=done,default=all,description=Which torrents: all; downloading or seeding (queued ones included); paused (stopped); done (fully downloaded)"`
}

type transmissionAddArgs struct {
	Source      string `json:"source" jsonschema:"minLength=1,maxLength=8192,description=A magnet: link or the http(s) URL of a .torrent file"`
	DownloadDir string `json:"download_dir,omitempty" jsonschema:"maxLength=1024,description=Absolute folder on the Transmission machine to download into; omit it for Transmission's default"`
	Paused      *bool  `json:"paused,omitempty" jsonschema:"description=true adds the torrent without starting it; omit it for Transmission's default (usually start)"`
}

type idsArgs struct {
	IDs []int `json:"ids" jsonschema:"minItems=1,maxItems=100,description=Torrent ids as transmission_list shows them"`
}

type transmissionRemoveArgs struct {
	IDs        []int `json:"ids" jsonschema:"minItems=1,maxItems=100,description=Torrent ids as transmission_list shows them"`
	DeleteData bool  `json:"delete_data,omitempty" jsonschema:"default=false,description=true also deletes the downloaded files; false keeps them on disk"`
}

type tmdbSearchArgs struct {
	Query     string `json:"query" jsonschema:"minLength=1,maxLength=200,description=Title to look for (words of it are enough)"`
	MediaType string `json:"media_type,omitempty" jsonschema:"enum=movie,enum=tv,default=movie,description=movie for films or tv for TV shows"`
	Year      int    `json:"year,omitempty" jsonschema:"minimum=1870,maximum=2100,description=Release year (for tv the year of the first episode); omit it when unsure"`
}

type tmdbDetailsArgs struct {
	ID        int    `json:"id" jsonschema:"minimum=1,description=TMDB id from tmdb_search or tmdb_trending"`
	MediaType string `json:"media_type" jsonschema:"enum=movie,enum=tv,description=movie or tv: the kind the id belongs to"`
}

type tmdbTrendingArgs struct {
	MediaType string `json:"media_type,omitempty" jsonschema:"enum=movie,enum=tv,enum=all,default=movie,description=movie or tv or all (films and shows and people)"`
	Window    string `json:"window,omitempty" jsonschema:"enum=day,enum=week,default=week,description=Trending today (day) or this week (week)"`
}

type seerrSearchArgs struct {
	Query string `json:"query" jsonschema:"minLength=1,maxLength=200,description=Title of the film or series"`
}

type seerrRequestArgs struct {
	MediaType string `json:"media_type" jsonschema:"enum=movie,enum=tv,description=movie for a film or tv for a series (the type seerr_search gave)"`
	TMDBID    int    `json:"tmdb_id" jsonschema:"minimum=1,description=TMDB id of the film or series (from seerr_search)"`
	Seasons   []int  `json:"seasons,omitempty" jsonschema:"minItems=1,maxItems=100,description=Season numbers of a series to request; omit it for every season"`
}

type seerrRequestsArgs struct {
	Filter string `json:"filter,omitempty" jsonschema:"enum=all,enum=pending,enum=approved,enum=processing,enum=available,enum=unavailable,enum=failed,default=all,description=Which requests: all (the default); pending (waiting for approval); approved; processing (approved and not available yet); available; unavailable (pending or approved and not available yet); failed"`
	Sort   string `json:"sort,omitempty" jsonschema:"enum=added,enum=modified,default=added,description=Newest requests first (added) or the last changed first (modified)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=20,default=10,description=How many requests to list"`
}

type timeArgs struct {
	Timezone string `json:"timezone,omitempty" jsonschema:"maxLength=64,description=IANA time zone name such as Europe/Paris; omit it for the local zone"`
}

// tool declares a tool that answers with results[name+" "+key(args)], or
// results[name] when there is none for its key.
func tool[A any](p *sdk.Plugin, name, description string, key func(A) string, opts ...sdk.ToolOption) {
	sdk.Tool(p, name, description, func(_ context.Context, a A) (json.RawMessage, error) {
		if r, ok := results[name+" "+key(a)]; ok {
			return json.RawMessage(r), nil
		}
		if r, ok := results[name]; ok {
			return json.RawMessage(r), nil
		}
		return nil, fmt.Errorf("catalogue: no canned result for %s %q", name, key(a))
	}, opts...)
}

func none[A any](A) string { return "" }

func main() {
	p := sdk.New("catalogue", "1.0.0")

	tool(p, "jellyfin_search",
		"Search the Jellyfin library for films, series, episodes or music albums by name: whether each is in the library and whether it was watched",
		func(a jellyfinSearchArgs) string { return a.Query })
	tool(p, "jellyfin_latest",
		"What was added to the Jellyfin library most recently: films, series with new episodes and albums with the date each was added",
		none[latestArgs])
	tool(p, "jellyfin_now_playing",
		"Who is playing what on Jellyfin right now: user, title, device, progress and whether it is paused",
		none[noArgs])

	tool(p, "radarr_lookup", "Search for a film to add to Radarr: candidates with their TMDB id and whether the library has them already",
		func(a lookupArgs) string { return a.Term })
	tool(p, "radarr_add", "Add a film to Radarr by its TMDB id (from radarr_lookup) and search for it", none[radarrAddArgs], sdk.NeedsApproval())
	tool(p, "radarr_queue", "What Radarr is downloading: progress, time left, and why an item is stuck", none[noArgs])
	tool(p, "radarr_calendar", "Films Radarr monitors that reach cinemas or come out digitally or on disc in the coming days", none[calendarArgs])

	tool(p, "sonarr_lookup", "Search for a TV series to add to Sonarr: candidates with their TVDB id and whether the library has them already",
		func(a seriesLookupArgs) string { return a.Term })
	tool(p, "sonarr_add", "Add a TV series to Sonarr by its TVDB id (from sonarr_lookup) and search for its episodes", none[sonarrAddArgs], sdk.NeedsApproval())
	tool(p, "sonarr_queue", "What Sonarr is downloading: progress, time left, and why an item is stuck", none[noArgs])
	tool(p, "sonarr_calendar", "Episodes of the series Sonarr monitors that air in the coming days", none[calendarArgs])

	tool(p, "prowlarr_indexers", "Prowlarr's indexers and their health: which are enabled, which are failing and until when Prowlarr leaves them out, and Prowlarr's own warnings", none[noArgs])
	tool(p, "prowlarr_search", "Search Prowlarr's indexers for releases without downloading anything: title, indexer, size, seeders, age and protocol, the most seeded first",
		func(a prowlarrSearchArgs) string { return a.Query })

	tool(p, "transmission_list", "List Transmission's torrents with progress, speed, ETA and status",
		func(a transmissionListArgs) string { return a.Filter })
	tool(p, "transmission_add", "Add a torrent to Transmission from a magnet link or the http(s) URL of a .torrent file", none[transmissionAddArgs])
	tool(p, "transmission_pause", "Pause (stop) torrents in Transmission", none[idsArgs])
	tool(p, "transmission_resume", "Resume (start) paused torrents in Transmission", none[idsArgs])
	tool(p, "transmission_remove", "Remove torrents from Transmission and optionally delete their downloaded data", none[transmissionRemoveArgs], sdk.NeedsApproval())

	tool(p, "tmdb_search",
		"Search TMDB (The Movie Database) for a film or TV show by title: the top matches with their TMDB ids, years, short overviews and ratings",
		func(a tmdbSearchArgs) string { return a.Query })
	tool(p, "tmdb_details",
		"Details of one film or TV show by its TMDB id: runtime or seasons, genres, main cast, release dates (theatrical, digital, physical such as Blu-ray) or air dates, and links to TMDB and IMDb",
		func(a tmdbDetailsArgs) string { return fmt.Sprint(a.ID) })
	tool(p, "tmdb_trending", "What is trending on TMDB today or this week: films, TV shows or both", none[tmdbTrendingArgs])

	tool(p, "seerr_search",
		"Search Jellyseerr/Overseerr for films and series by title: their TMDB ids and whether each is available, being processed, pending approval or not requested yet",
		func(a seerrSearchArgs) string { return a.Query })
	tool(p, "seerr_request",
		"Request a film or a series (all its seasons or some) on Jellyseerr/Overseerr by its TMDB id (from seerr_search)",
		none[seerrRequestArgs], sdk.NeedsApproval())
	tool(p, "seerr_requests",
		"The requests on Jellyseerr/Overseerr, newest first: what was asked for, by whom and when, and whether it is pending, approved or available",
		none[seerrRequestsArgs])

	tool(p, "system_time", "The current date, time and weekday, here or in a given time zone",
		func(a timeArgs) string { return a.Timezone })
	p.Serve()
}

// results are the canned answers, shaped like the real plugins' (a few
// hundred characters each).
var results = map[string]string{
	"jellyfin_latest":                    `{"items":[{"type":"movie","title":"Past Lives","year":2023,"added":"2026-11-20"},{"type":"movie","title":"Dune: Part Two","year":2024,"added":"2026-11-18"},{"type":"series","title":"Severance","new_episodes":["S02E05"],"added":"2026-11-17"},{"type":"movie","title":"Arrival","year":2016,"added":"2026-11-16"},{"type":"album","title":"Blue Lines","artist":"Massive Attack","added":"2026-11-15"}],"count":5}`,
	"radarr_queue":                       `{"items":[{"title":"Perfect Days (2023)","quality":"Bluray-1080p","size":"9.8 GB","progress":64,"time_left":"21m","status":"downloading"},{"title":"The Zone of Interest (2023)","quality":"WEBDL-1080p","size":"6.1 GB","progress":3,"time_left":"1h52m","status":"downloading"}],"total":2}`,
	"transmission_list downloading":      `{"torrents":[{"id":12,"name":"Perfect.Days.2023.1080p.BluRay.x264","status":"downloading","progress":71.4,"rate_down":"4.2 MB/s","eta":"17m","size":"9.8 GB"},{"id":14,"name":"The.Zone.of.Interest.2023.1080p.WEB-DL","status":"downloading","progress":4.0,"rate_down":"1.1 MB/s","eta":"1h48m","size":"6.1 GB"},{"id":15,"name":"The.Bear.S03E01.1080p.WEB","status":"downloading","progress":40.2,"rate_down":"2.3 MB/s","eta":"9m","size":"2.2 GB"}],"count":3}`,
	"sonarr_queue":                       `{"items":[{"title":"The Bear - S03E01 - Tomorrow","quality":"WEBDL-1080p","size":"2.2 GB","progress":40,"time_left":"9m","status":"downloading"}],"total":1}`,
	"sonarr_calendar":                    `{"episodes":[{"series":"Severance","episode":"S02E06","title":"Attila","airs":"2026-11-27 21:00","has_file":false},{"series":"Slow Horses","episode":"S04E04","title":"Identity Theft","airs":"2026-11-25 21:00","has_file":false},{"series":"Shogun","episode":"S02E01","title":"Anjin","airs":"2026-11-28 22:00","has_file":false}],"count":3}`,
	"jellyfin_search Slow Horses":        `{"items":[{"type":"episode","series":"Slow Horses","episode":"S04E02","title":"Cold Water","in_library":true,"watched":true},{"type":"episode","series":"Slow Horses","episode":"S04E03","title":"Hello Goodbye","in_library":false,"watched":false}],"count":2}`,
	"prowlarr_indexers":                  `{"indexers":[{"id":1,"name":"1337x","protocol":"torrent","enabled":true,"status":"ok"},{"id":2,"name":"TorrentLeech","protocol":"torrent","enabled":true,"status":"failing","disabled_till":"2026-11-21 21:40"},{"id":4,"name":"NZBgeek","protocol":"usenet","enabled":true,"status":"ok"}],"warnings":["Indexers unavailable due to failures for more than 1 hour: TorrentLeech"]}`,
	"prowlarr_search Slow Horses S04E03": `{"releases":[{"title":"Slow.Horses.S04E03.720p.ATVP.WEB-DL","indexer":"1337x","size":"1.1 GB","seeders":212,"age":"3d","protocol":"torrent"},{"title":"Slow.Horses.S04E03.1080p.ATVP.WEB-DL.DDP5.1","indexer":"1337x","size":"2.9 GB","seeders":2,"age":"3d","protocol":"torrent"}],"count":2}`,
	"jellyfin_search Dune":               `{"items":[{"type":"movie","title":"Dune","year":2021,"in_library":true,"watched":true,"played":"2026-10-02"},{"type":"movie","title":"Dune: Part Two","year":2024,"in_library":true,"watched":false}],"count":2}`,
	"tmdb_search Dune":                   `{"results":[{"id":438631,"title":"Dune","year":2021,"rating":7.8,"overview":"Paul Atreides, a brilliant and gifted young man, must travel to the most dangerous planet in the universe."},{"id":693134,"title":"Dune: Part Two","year":2024,"rating":8.2,"overview":"Paul Atreides unites with Chani and the Fremen while on a path of revenge."},{"id":841,"title":"Dune","year":1984,"rating":6.2,"overview":"David Lynch's adaptation of Frank Herbert's novel."}]}`,
	"tmdb_trending":                      `{"window":"week","results":[{"id":1064213,"title":"Anora","year":2024,"rating":7.1},{"id":933260,"title":"The Substance","year":2024,"rating":7.2},{"id":1184918,"title":"The Wild Robot","year":2024,"rating":8.4},{"id":558449,"title":"Gladiator II","year":2024,"rating":6.8},{"id":402431,"title":"Wicked","year":2024,"rating":7.4}]}`,
	"seerr_search Anora":                 `{"results":[{"media_type":"movie","tmdb_id":1064213,"title":"Anora","year":2024,"status":"not requested"},{"media_type":"movie","tmdb_id":1309214,"title":"Anora: Behind the Scenes","year":2024,"status":"not requested"}]}`,
	"tmdb_details 1064213":               `{"id":1064213,"title":"Anora","year":2024,"runtime":139,"genres":["Drama","Comedy","Romance"],"director":"Sean Baker","cast":["Mikey Madison","Mark Eydelshteyn","Yura Borisov"],"release_dates":{"theatrical":"2024-10-18","digital":"2024-12-17","physical":"2025-02-25"},"tmdb":"https://www.themoviedb.org/movie/1064213","imdb":"https://www.imdb.com/title/tt28607951"}`,
	"radarr_lookup Anora":                `{"candidates":[{"title":"Anora","year":2024,"tmdb_id":1064213,"in_library":false,"runtime":139,"studio":"Neon"}]}`,
	"radarr_calendar":                    `{"films":[{"title":"Nosferatu","year":2024,"release":"digital","date":"2026-11-26","has_file":false},{"title":"The Brutalist","year":2024,"release":"physical","date":"2026-12-02","has_file":false}],"count":2}`,
	"seerr_requests":                     `{"requests":[{"title":"Nosferatu","media_type":"movie","requested_by":"sam","requested":"2026-11-02","status":"approved, not available yet"},{"title":"Shogun","media_type":"tv","seasons":[2],"requested_by":"alex","requested":"2026-10-29","status":"processing"}],"count":2}`,
	"jellyfin_now_playing":               `{"sessions":[{"user":"sam","title":"Paddington 2","type":"movie","device":"Living room TV","progress":"0:41 of 1:43","paused":false}],"count":1}`,
	"transmission_list seeding":          `{"torrents":[{"id":3,"name":"Oppenheimer.2023.2160p.UHD.BluRay.x265","status":"seeding","ratio":1.4,"rate_up":"3.1 MB/s","size":"78 GB"},{"id":7,"name":"Dune.2021.2160p.WEB-DL.DDP5.1.Atmos","status":"seeding","ratio":0.8,"rate_up":"1.9 MB/s","size":"64 GB"}],"count":2}`,
	"transmission_pause":                 `{"paused":[3,7],"message":"2 torrents paused"}`,
}
