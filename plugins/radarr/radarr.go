package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
	"github.com/mmcpd/mmcpd/plugins/internal/arr"
)

type radarr struct {
	c   *arr.Client
	env arr.Env
}

type lookupArgs struct {
	Term string `json:"term" jsonschema:"minLength=1,maxLength=200,description=Film title (or tmdb:<id> or imdb:<id>)"`
}

type addArgs struct {
	TMDBID int `json:"tmdb_id" jsonschema:"minimum=1,description=TMDB id of the film (from radarr_lookup)"`
	arr.Target
}

// movie is a MovieResource, as far as these tools read it.
type movie struct {
	ID              int       `json:"id"` // set only when the library has it
	Title           string    `json:"title"`
	Year            int       `json:"year"`
	TMDBID          int       `json:"tmdbId"`
	IMDBID          string    `json:"imdbId"`
	Studio          string    `json:"studio"`
	HasFile         bool      `json:"hasFile"`
	InCinemas       time.Time `json:"inCinemas"`
	DigitalRelease  time.Time `json:"digitalRelease"`
	PhysicalRelease time.Time `json:"physicalRelease"`
}

type candidate struct {
	Title     string `json:"title"`
	Year      int    `json:"year,omitempty"`
	TMDBID    int    `json:"tmdb_id"`
	IMDBID    string `json:"imdb_id,omitempty"`
	Studio    string `json:"studio,omitempty"`
	InLibrary bool   `json:"in_library"`
}

func (r *radarr) lookup(ctx context.Context, a lookupArgs) (arr.List[candidate], error) {
	// Radarr answers a film it already has with the library's copy, id
	// included: that is how in_library is known.
	var found []movie
	if err := r.c.Get(ctx, "/movie/lookup", url.Values{"term": {a.Term}}, &found); err != nil {
		return arr.List[candidate]{}, err
	}
	out := make([]candidate, len(found))
	for i, m := range found {
		out[i] = candidate{Title: m.Title, Year: m.Year, TMDBID: m.TMDBID, IMDBID: m.IMDBID, Studio: m.Studio, InLibrary: m.ID > 0}
	}
	return arr.Bounded(out, arr.LookupSize, 0), nil
}

func (r *radarr) add(ctx context.Context, a addArgs) (arr.Added, error) {
	id := url.Values{"tmdbId": {strconv.Itoa(a.TMDBID)}}
	// The lookup by TMDB id never says whether the library has the film, so
	// ask the library first.
	var have []movie
	if err := r.c.Get(ctx, "/movie", id, &have); err != nil {
		return arr.Added{}, err
	}
	if len(have) > 0 {
		return arr.Added{}, r.c.AlreadyThere(arr.Title(have[0].Title, have[0].Year))
	}
	var found arr.Found[movie]
	err := r.c.Get(ctx, "/movie/lookup/tmdb", id, &found)
	// Radarr reports an id TMDB does not know as a server error saying so.
	if errors.Is(err, httpapi.ErrNotFound) || (errors.Is(err, httpapi.ErrService) && strings.Contains(err.Error(), "was not found")) ||
		(err == nil && found.Item.TMDBID != a.TMDBID) {
		return arr.Added{}, fmt.Errorf("Radarr knows no film with TMDB id %d; find the id with radarr_lookup", a.TMDBID)
	}
	if err != nil {
		return arr.Added{}, err
	}
	pl, err := r.c.Place(ctx, a.Target)
	if err != nil {
		return arr.Added{}, err
	}
	added, err := r.c.AddItem(ctx, "/movie", arr.Title(found.Item.Title, found.Item.Year), found.Raw, pl, map[string]any{
		"minimumAvailability": "released", // the default of Radarr's own add dialog
		"addOptions":          map[string]any{"searchForMovie": a.Search()},
	})
	if err != nil {
		return arr.Added{}, err
	}
	added.Searching = a.Search()
	return added, nil
}

// queueRecord is a QueueResource with the film asked for.
type queueRecord struct {
	arr.QueueRecord
	Movie *movie `json:"movie"`
}

func (r *radarr) queue(ctx context.Context, _ arr.NoArgs) (arr.List[arr.QueueItem], error) {
	// Unknown items are the ones Radarr could not match to a film: often the
	// very downloads someone asks about.
	query := url.Values{"includeMovie": {"true"}, "includeUnknownMovieItems": {"true"}}
	return arr.Queue(ctx, r.c, query, func(q queueRecord) arr.QueueItem {
		if q.Movie == nil {
			return q.Item("")
		}
		return q.Item(arr.Title(q.Movie.Title, q.Movie.Year))
	})
}

type release struct {
	Type string `json:"type"`
	Date string `json:"date"`
}

type upcoming struct {
	Title    string    `json:"title"`
	Year     int       `json:"year,omitempty"`
	Releases []release `json:"releases"`
	HasFile  bool      `json:"has_file"`
}

func (r *radarr) calendar(ctx context.Context, a arr.CalendarArgs) (arr.List[upcoming], error) {
	start, end := r.env.Window(a.Days)
	// Release dates are days (kept as UTC midnights), so the window is
	// asked and checked in days too.
	from, to := start.Format(time.DateOnly), end.Format(time.DateOnly)
	var movies []movie
	query := url.Values{"start": {from}, "end": {to}, "unmonitored": {"false"}}
	if err := r.c.Get(ctx, "/calendar", query, &movies); err != nil {
		return arr.List[upcoming]{}, err
	}
	var out []upcoming
	for _, m := range movies {
		u := upcoming{Title: m.Title, Year: m.Year, HasFile: m.HasFile}
		for _, rel := range []struct {
			kind string
			at   time.Time
		}{{"in_cinemas", m.InCinemas}, {"digital", m.DigitalRelease}, {"physical", m.PhysicalRelease}} {
			// Radarr's window includes its last day; ours ends before it.
			if day := rel.at.UTC().Format(time.DateOnly); !rel.at.IsZero() && day >= from && day < to {
				u.Releases = append(u.Releases, release{Type: rel.kind, Date: day})
			}
		}
		if len(u.Releases) > 0 {
			out = append(out, u)
		}
	}
	slices.SortStableFunc(out, func(a, b upcoming) int { return strings.Compare(first(a), first(b)) })
	return arr.Bounded(out, arr.CalendarSize, 0), nil
}

// first is the earliest release date in the window.
func first(u upcoming) string {
	return slices.MinFunc(u.Releases, func(a, b release) int { return strings.Compare(a.Date, b.Date) }).Date
}
