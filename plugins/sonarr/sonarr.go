package main

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/mmcpd/mmcpd/plugins/internal/arr"
)

type sonarr struct {
	c   *arr.Client
	env arr.Env
}

type lookupArgs struct {
	Term string `json:"term" jsonschema:"minLength=1,maxLength=200,description=Series name (or tvdb:<id>)"`
}

type addArgs struct {
	TVDBID  int    `json:"tvdb_id" jsonschema:"minimum=1,description=TVDB id of the series (from sonarr_lookup)"`
	Monitor string `json:"monitor,omitempty" jsonschema:"enum=all,enum=future,enum=none,default=all,description=Which episodes to monitor: all or only future ones or none"`
	arr.Target
}

// series is a SeriesResource, as far as these tools read it.
type series struct {
	ID      int    `json:"id"` // set only when the library has it
	Title   string `json:"title"`
	Year    int    `json:"year"`
	TVDBID  int    `json:"tvdbId"`
	Network string `json:"network"`
	Status  string `json:"status"`
	Seasons []struct {
		Number int `json:"seasonNumber"`
	} `json:"seasons"`
}

type candidate struct {
	Title     string `json:"title"`
	Year      int    `json:"year,omitempty"`
	TVDBID    int    `json:"tvdb_id"`
	Network   string `json:"network,omitempty"`
	Status    string `json:"status,omitempty"`
	Seasons   int    `json:"seasons"`
	InLibrary bool   `json:"in_library"`
}

// search asks Sonarr's metadata search. Sonarr answers a series it already
// has with the library's copy, id included: that is how in_library is known.
func (s *sonarr) search(ctx context.Context, term string) ([]arr.Found[series], error) {
	var found []arr.Found[series]
	err := s.c.Get(ctx, "/series/lookup", url.Values{"term": {term}}, &found)
	return found, err
}

func (s *sonarr) lookup(ctx context.Context, a lookupArgs) (arr.List[candidate], error) {
	found, err := s.search(ctx, a.Term)
	if err != nil {
		return arr.List[candidate]{}, err
	}
	out := make([]candidate, len(found))
	for i, f := range found {
		sr := f.Item
		seasons := 0
		for _, season := range sr.Seasons {
			if season.Number > 0 { // season 0 holds the specials
				seasons++
			}
		}
		out[i] = candidate{Title: sr.Title, Year: sr.Year, TVDBID: sr.TVDBID, Network: sr.Network,
			Status: sr.Status, Seasons: seasons, InLibrary: sr.ID > 0}
	}
	return arr.Bounded(out, arr.LookupSize, 0), nil
}

func (s *sonarr) add(ctx context.Context, a addArgs) (arr.Added, error) {
	found, err := s.search(ctx, fmt.Sprintf("tvdb:%d", a.TVDBID))
	if err != nil {
		return arr.Added{}, err
	}
	i := slices.IndexFunc(found, func(f arr.Found[series]) bool { return f.Item.TVDBID == a.TVDBID })
	if i < 0 {
		return arr.Added{}, fmt.Errorf("Sonarr knows no series with TVDB id %d; find the id with sonarr_lookup", a.TVDBID)
	}
	sr := found[i].Item
	title := arr.Title(sr.Title, sr.Year)
	if sr.ID > 0 {
		return arr.Added{}, s.c.AlreadyThere(title)
	}
	pl, err := s.c.Place(ctx, a.Target)
	if err != nil {
		return arr.Added{}, err
	}
	monitor := cmp.Or(a.Monitor, "all")
	added, err := s.c.AddItem(ctx, "/series", title, found[i].Raw, pl, map[string]any{
		"seasonFolder": true,
		"addOptions":   map[string]any{"monitor": monitor, "searchForMissingEpisodes": a.Search()},
	})
	if err != nil {
		return arr.Added{}, err
	}
	added.Monitor, added.Searching = monitor, a.Search()
	return added, nil
}

// queueRecord is a QueueResource with the series and episode asked for.
type queueRecord struct {
	arr.QueueRecord
	Series *struct {
		Title string `json:"title"`
	} `json:"series"`
	Episode *struct {
		Season int `json:"seasonNumber"`
		Number int `json:"episodeNumber"`
	} `json:"episode"`
}

func (s *sonarr) queue(ctx context.Context, _ arr.NoArgs) (arr.List[arr.QueueItem], error) {
	// Unknown items are the ones Sonarr could not match to a series: often
	// the very downloads someone asks about.
	query := url.Values{"includeSeries": {"true"}, "includeEpisode": {"true"}, "includeUnknownSeriesItems": {"true"}}
	return arr.Queue(ctx, s.c, query, func(r queueRecord) arr.QueueItem {
		title := ""
		if r.Series != nil {
			title = r.Series.Title
			if r.Episode != nil {
				title += " " + code(r.Episode.Season, r.Episode.Number)
			}
		}
		return r.Item(title)
	})
}

func code(season, episode int) string { return fmt.Sprintf("S%02dE%02d", season, episode) }

// episode is an EpisodeResource of the calendar, with its series.
type episode struct {
	Season     int       `json:"seasonNumber"`
	Number     int       `json:"episodeNumber"`
	Title      string    `json:"title"`
	AirDate    string    `json:"airDate"`
	AirDateUTC time.Time `json:"airDateUtc"`
	HasFile    bool      `json:"hasFile"`
	Series     struct {
		Title string `json:"title"`
	} `json:"series"`
}

type airing struct {
	Series  string `json:"series"`
	Episode string `json:"episode"`
	Title   string `json:"title,omitempty"`
	Airs    string `json:"airs"`
	HasFile bool   `json:"has_file"`
}

func (s *sonarr) calendar(ctx context.Context, a arr.CalendarArgs) (arr.List[airing], error) {
	start, end := s.env.Window(a.Days)
	// Air times are instants: the window's ends are the local midnights.
	query := url.Values{
		"start":         {start.UTC().Format(time.RFC3339)},
		"end":           {end.UTC().Format(time.RFC3339)},
		"unmonitored":   {"false"},
		"includeSeries": {"true"},
	}
	var eps []episode
	if err := s.c.Get(ctx, "/calendar", query, &eps); err != nil {
		return arr.List[airing]{}, err
	}
	slices.SortStableFunc(eps, func(a, b episode) int { return a.AirDateUTC.Compare(b.AirDateUTC) })
	out := make([]airing, len(eps))
	for i, e := range eps {
		airs := e.AirDate
		if !e.AirDateUTC.IsZero() {
			airs = e.AirDateUTC.In(s.env.Zone).Format("Mon 2006-01-02 15:04")
		}
		out[i] = airing{Series: e.Series.Title, Episode: code(e.Season, e.Number), Title: e.Title, Airs: airs, HasFile: e.HasFile}
	}
	return arr.Bounded(out, arr.CalendarSize, 0), nil
}
