package main

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/plugins/internal/arr"
)

type lidarr struct {
	c   *arr.Client
	env arr.Env
}

type lookupArgs struct {
	Term string `json:"term" jsonschema:"minLength=1,maxLength=200,description=Artist name (or lidarr:<MusicBrainz id>)"`
}

type addArgs struct {
	MBID            string `json:"musicbrainz_id" jsonschema:"pattern=^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$,description=MusicBrainz id of the artist (from lidarr_lookup)"`
	Monitor         string `json:"monitor,omitempty" jsonschema:"enum=all,enum=future,enum=missing,enum=existing,enum=first,enum=latest,enum=none,default=all,description=Which of the artist's albums to monitor now: all or future or missing or existing ones or the first or the latest or none"`
	MonitorNew      string `json:"monitor_new_items,omitempty" jsonschema:"enum=all,enum=new,enum=none,default=all,description=Which albums that appear later to monitor: all or only new releases or none"`
	MetadataProfile string `json:"metadata_profile,omitempty" jsonschema:"maxLength=200,description=Metadata profile name (which kinds of release to fetch); omit it for the first profile"`
	arr.Target
}

// artist is an ArtistResource, as far as these tools read it.
type artist struct {
	ID             int      `json:"id"` // set only when the library has it
	Name           string   `json:"artistName"`
	MBID           string   `json:"foreignArtistId"`
	Disambiguation string   `json:"disambiguation"`
	Type           string   `json:"artistType"`
	Status         string   `json:"status"`
	Genres         []string `json:"genres"`
}

// title tells apart artists of one name: "Nirvana (60s band from the UK)".
func (a artist) title() string {
	if a.Disambiguation == "" {
		return a.Name
	}
	return a.Name + " (" + a.Disambiguation + ")"
}

type candidate struct {
	Name           string   `json:"name"`
	Disambiguation string   `json:"disambiguation,omitempty"`
	Type           string   `json:"type,omitempty"`
	Status         string   `json:"status,omitempty"`
	Genres         []string `json:"genres,omitempty"`
	MBID           string   `json:"musicbrainz_id"`
	InLibrary      bool     `json:"in_library"`
}

// genres is how many genres a candidate shows: enough to tell two artists
// apart, and some have dozens.
const genres = 3

// search asks Lidarr's metadata search. Lidarr answers an artist it already
// has with the library's copy, id included: that is how in_library is known.
func (l *lidarr) search(ctx context.Context, term string) ([]arr.Found[artist], error) {
	var found []arr.Found[artist]
	err := l.c.Get(ctx, "/artist/lookup", url.Values{"term": {term}}, &found)
	return found, err
}

func (l *lidarr) lookup(ctx context.Context, a lookupArgs) (arr.List[candidate], error) {
	found, err := l.search(ctx, a.Term)
	if err != nil {
		return arr.List[candidate]{}, err
	}
	out := make([]candidate, len(found))
	for i, f := range found {
		ar := f.Item
		out[i] = candidate{Name: ar.Name, Disambiguation: ar.Disambiguation, Type: ar.Type, Status: ar.Status,
			Genres: ar.Genres[:min(genres, len(ar.Genres))], MBID: ar.MBID, InLibrary: ar.ID > 0}
	}
	return arr.Bounded(out, arr.LookupSize, 0), nil
}

func (l *lidarr) add(ctx context.Context, a addArgs) (arr.Added, error) {
	// lidarr:<id> asks for that one artist, as Lidarr's own search box does.
	found, err := l.search(ctx, "lidarr:"+a.MBID)
	if err != nil {
		return arr.Added{}, err
	}
	i := slices.IndexFunc(found, func(f arr.Found[artist]) bool { return strings.EqualFold(f.Item.MBID, a.MBID) })
	if i < 0 {
		return arr.Added{}, fmt.Errorf("Lidarr knows no artist with MusicBrainz id %s; find the id with lidarr_lookup", a.MBID)
	}
	ar := found[i].Item
	if ar.ID > 0 {
		return arr.Added{}, l.c.AlreadyThere(ar.title())
	}
	pl, err := l.c.Place(ctx, a.Target)
	if err != nil {
		return arr.Added{}, err
	}
	meta, err := l.metadataProfile(ctx, a.MetadataProfile)
	if err != nil {
		return arr.Added{}, err
	}
	monitor, monitorNew := cmp.Or(a.Monitor, "all"), cmp.Or(a.MonitorNew, "all")
	added, err := l.c.AddItem(ctx, "/artist", ar.title(), found[i].Raw, pl, map[string]any{
		"metadataProfileId": meta.ID,
		"monitorNewItems":   monitorNew,
		"addOptions":        map[string]any{"monitor": monitor, "searchForMissingAlbums": a.Search()},
	})
	if err != nil {
		return arr.Added{}, err
	}
	added.MetadataProfile, added.Monitor, added.Searching = meta.Name, monitor, a.Search()
	return added, nil
}

type profile struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// noneProfile is the metadata profile Lidarr creates itself, allowing no
// kind of release. It comes first once "Standard" is removed, and an artist
// added with it would get no album at all, so it is never the default.
const noneProfile = "None"

// metadataProfile finds the metadata profile named want, or the first one
// other than None.
func (l *lidarr) metadataProfile(ctx context.Context, want string) (profile, error) {
	var profiles []profile
	if err := l.c.Get(ctx, "/metadataprofile", nil, &profiles); err != nil {
		return profile{}, err
	}
	if strings.TrimSpace(want) == "" {
		profiles = slices.DeleteFunc(profiles, func(p profile) bool { return p.Name == noneProfile })
	}
	return arr.Pick(l.c, "metadata profile", want, profiles, func(p profile) string { return p.Name })
}

// queueRecord is a QueueResource with the artist and album asked for.
type queueRecord struct {
	arr.QueueRecord
	Artist *struct {
		Name string `json:"artistName"`
	} `json:"artist"`
	Album *struct {
		Title string `json:"title"`
	} `json:"album"`
}

func (l *lidarr) queue(ctx context.Context, _ arr.NoArgs) (arr.List[arr.QueueItem], error) {
	// Unknown items are the ones Lidarr could not match to an artist: often
	// the very downloads someone asks about.
	query := url.Values{"includeArtist": {"true"}, "includeAlbum": {"true"}, "includeUnknownArtistItems": {"true"}}
	return arr.Queue(ctx, l.c, query, func(r queueRecord) arr.QueueItem {
		title := ""
		if r.Artist != nil {
			title = r.Artist.Name
			if r.Album != nil {
				title += " - " + r.Album.Title
			}
		}
		return r.Item(title)
	})
}

// album is an AlbumResource of the calendar, with its artist.
type album struct {
	Title       string    `json:"title"`
	Type        string    `json:"albumType"`
	ReleaseDate time.Time `json:"releaseDate"`
	Artist      struct {
		Name string `json:"artistName"`
	} `json:"artist"`
	Statistics struct {
		TrackFiles int `json:"trackFileCount"`
		Tracks     int `json:"trackCount"`
	} `json:"statistics"`
}

type upcoming struct {
	Artist       string `json:"artist"`
	Album        string `json:"album"`
	Type         string `json:"type,omitempty"`
	Released     string `json:"release_date"`
	Tracks       int    `json:"tracks,omitempty"`
	TracksOnDisk int    `json:"tracks_on_disk"`
}

func (l *lidarr) calendar(ctx context.Context, a arr.CalendarArgs) (arr.List[upcoming], error) {
	start, end := l.env.Window(a.Days)
	// Release dates are days (kept as UTC midnights), so the window is
	// asked and checked in days too.
	from, to := start.Format(time.DateOnly), end.Format(time.DateOnly)
	query := url.Values{"start": {from}, "end": {to}, "unmonitored": {"false"}, "includeArtist": {"true"}}
	var albums []album
	if err := l.c.Get(ctx, "/calendar", query, &albums); err != nil {
		return arr.List[upcoming]{}, err
	}
	var out []upcoming
	for _, al := range albums {
		// Lidarr's window includes its last day; ours ends before it.
		day := al.ReleaseDate.UTC().Format(time.DateOnly)
		if al.ReleaseDate.IsZero() || day < from || day >= to {
			continue
		}
		out = append(out, upcoming{Artist: al.Artist.Name, Album: al.Title, Type: al.Type, Released: day,
			Tracks: al.Statistics.Tracks, TracksOnDisk: al.Statistics.TrackFiles})
	}
	slices.SortStableFunc(out, func(a, b upcoming) int { return strings.Compare(a.Released, b.Released) })
	return arr.Bounded(out, arr.CalendarSize, 0), nil
}
