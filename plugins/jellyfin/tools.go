package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/mmcpd/mmcpd/plugins/internal/human"
)

// searchLimit is the most matches a search returns; the total says how many
// more there were.
const searchLimit = 10

type searchArgs struct {
	Query string `json:"query" jsonschema:"minLength=1,maxLength=200,description=Words of the title to look for"`
	Type  string `json:"type,omitempty" jsonschema:"enum=movie,enum=series,enum=episode,enum=album,description=Only this kind of item; omit it for all four"`
}

type searchResult struct {
	User  string       `json:"user"` // whose watched state this is
	Total int          `json:"total"`
	Items []itemResult `json:"items"`
	More  int          `json:"more,omitempty"`
}

// itemResult is one library item as the model gets it.
type itemResult struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Year    int    `json:"year,omitempty"`
	Series  string `json:"series,omitempty"`
	Episode string `json:"episode,omitempty"`
	Artist  string `json:"artist,omitempty"`
	// Played is the user's watched state; a series is played when every
	// episode is.
	Played           *bool  `json:"played,omitempty"`
	WatchedPercent   int    `json:"watched_percent,omitempty"`   // of a film or episode begun but not finished
	UnplayedEpisodes int    `json:"unplayed_episodes,omitempty"` // of a series
	NewEpisodes      int    `json:"new_episodes,omitempty"`      // of a series in latest
	Added            string `json:"added,omitempty"`
}

func (j *jellyfin) search(ctx context.Context, a searchArgs) (searchResult, error) {
	query := strings.TrimSpace(a.Query)
	if query == "" {
		// An empty searchTerm would list the whole library.
		return searchResult{}, errors.New("the query is empty: give words of the title to look for")
	}
	u, err := j.currentUser(ctx)
	if err != nil {
		return searchResult{}, err
	}
	types := "Movie,Series,Episode,MusicAlbum"
	if a.Type != "" {
		types = kinds[a.Type]
	}
	q := url.Values{
		"userId":           {u.ID},
		"searchTerm":       {query},
		"recursive":        {"true"},
		"includeItemTypes": {types},
		"limit":            {strconv.Itoa(searchLimit)},
		"enableImages":     {"false"},
	}
	var page struct {
		Items            []item `json:"Items"`
		TotalRecordCount int    `json:"TotalRecordCount"`
	}
	if err := j.c.Get(ctx, "/Items", q, &page); err != nil {
		return searchResult{}, err
	}
	r := searchResult{User: u.Name, Total: max(page.TotalRecordCount, len(page.Items)), Items: []itemResult{}}
	for _, it := range page.Items[:min(len(page.Items), searchLimit)] {
		r.Items = append(r.Items, summary(it))
	}
	r.More = r.Total - len(r.Items)
	return r, nil
}

// summary is what the model needs to know of an item.
func summary(it item) itemResult {
	r := itemResult{
		Title:   it.Name,
		Type:    kind(it.Type),
		Year:    it.ProductionYear,
		Episode: episodeCode(it.ParentIndexNumber, it.IndexNumber),
	}
	switch it.Type {
	case "Episode":
		r.Series = it.SeriesName
	case "MusicAlbum", "Audio":
		r.Artist = it.artist()
		r.Episode = ""
	default:
		r.Episode = ""
	}
	if ud := it.UserData; ud != nil {
		played := ud.Played
		r.Played = &played
		if !played && ud.PlayedPercentage > 0 {
			r.WatchedPercent = max(1, int(ud.PlayedPercentage))
		}
		if it.Type == "Series" {
			r.UnplayedEpisodes = ud.UnplayedItemCount
		}
	}
	return r
}

type latestArgs struct {
	Limit int `json:"limit,omitempty" jsonschema:"minimum=1,maximum=30,default=10,description=How many of the newest additions to list"`
}

type latestResult struct {
	User  string       `json:"user"`
	Items []itemResult `json:"items"`
}

func (j *jellyfin) latest(ctx context.Context, a latestArgs) (latestResult, error) {
	u, err := j.currentUser(ctx)
	if err != nil {
		return latestResult{}, err
	}
	limit := a.Limit
	if limit == 0 {
		limit = 10
	}
	q := url.Values{
		"userId":       {u.ID},
		"limit":        {strconv.Itoa(limit)},
		"fields":       {"DateCreated"},
		"enableImages": {"false"},
	}
	var items []item
	if err := j.c.Get(ctx, "/Items/Latest", q, &items); err != nil {
		return latestResult{}, err
	}
	r := latestResult{User: u.Name, Items: []itemResult{}}
	for _, it := range items[:min(len(items), limit)] {
		s := summary(it)
		s.Added = dateOnly(it.DateCreated)
		// Jellyfin groups several new episodes under their series, with
		// their number as the series' child count.
		if it.Type == "Series" {
			s.NewEpisodes = it.ChildCount
		}
		// "latest" is about what is new, not what was watched.
		s.Played, s.WatchedPercent, s.UnplayedEpisodes = nil, 0, 0
		r.Items = append(r.Items, s)
	}
	return r, nil
}

// session is one of GET /Sessions, the part the tools report.
type session struct {
	UserName       string `json:"UserName"`
	Client         string `json:"Client"`
	DeviceName     string `json:"DeviceName"`
	NowPlayingItem *item  `json:"NowPlayingItem"`
	PlayState      struct {
		PositionTicks int64 `json:"PositionTicks"`
		IsPaused      bool  `json:"IsPaused"`
	} `json:"PlayState"`
}

type noArgs struct{}

// maxSessions bounds what is listed of a busy server.
const maxSessions = 10

type nowPlayingResult struct {
	Count    int             `json:"count"`
	Sessions []playingResult `json:"sessions"`
	More     int             `json:"more,omitempty"`
}

type playingResult struct {
	User     string `json:"user"`
	Title    string `json:"title"`
	Type     string `json:"type"`
	Year     int    `json:"year,omitempty"`
	Series   string `json:"series,omitempty"`
	Episode  string `json:"episode,omitempty"`
	Artist   string `json:"artist,omitempty"`
	Device   string `json:"device"`
	Client   string `json:"client"`
	Progress *int   `json:"progress_percent,omitempty"`
	State    string `json:"state"` // playing or paused
}

func (j *jellyfin) nowPlaying(ctx context.Context, _ noArgs) (nowPlayingResult, error) {
	playing, err := j.playing(ctx)
	if err != nil {
		return nowPlayingResult{}, err
	}
	r := nowPlayingResult{Count: len(playing), Sessions: []playingResult{}}
	for _, s := range playing[:min(len(playing), maxSessions)] {
		it := summary(*s.NowPlayingItem)
		p := playingResult{
			User: s.UserName, Title: it.Title, Type: it.Type, Year: it.Year,
			Series: it.Series, Episode: it.Episode, Artist: it.Artist,
			Device: s.DeviceName, Client: s.Client, State: "playing",
		}
		if pct := percent(s.PlayState.PositionTicks, s.NowPlayingItem.RunTimeTicks); pct >= 0 {
			p.Progress = &pct
		}
		if s.PlayState.IsPaused {
			p.State = "paused"
		}
		r.Sessions = append(r.Sessions, p)
	}
	r.More = r.Count - len(r.Sessions)
	return r, nil
}

// playing lists the sessions that are playing something.
func (j *jellyfin) playing(ctx context.Context) ([]session, error) {
	var all []session
	if err := j.c.Get(ctx, "/Sessions", nil, &all); err != nil {
		return nil, err
	}
	var playing []session
	for _, s := range all {
		if s.NowPlayingItem != nil {
			playing = append(playing, s)
		}
	}
	return playing, nil
}

// nowPlayingLine is the context line: who watches what (human.Watching).
func (j *jellyfin) nowPlayingLine(ctx context.Context) (string, error) {
	playing, err := j.playing(ctx)
	if err != nil {
		return "", err
	}
	clauses := make([]string, len(playing))
	for i, s := range playing {
		clauses[i] = clause(s)
	}
	return human.Watching(clauses), nil
}

// clause says what one session plays.
func clause(s session) string {
	it := *s.NowPlayingItem
	who := s.UserName
	if who == "" {
		who = "someone"
	}
	var what, verb string
	switch it.Type {
	case "Episode":
		what = strings.TrimSpace(it.SeriesName + " " + episodeCode(it.ParentIndexNumber, it.IndexNumber))
		if what == "" {
			what = it.Name
		} else if it.Name != "" {
			what += ` "` + it.Name + `"`
		}
		verb = "watching"
	case "Audio", "MusicAlbum":
		what = it.Name
		if a := it.artist(); a != "" {
			what += " by " + a
		}
		verb = "listening to"
	default:
		what = it.Name
		if it.ProductionYear > 0 {
			what += fmt.Sprintf(" (%d)", it.ProductionYear)
		}
		verb = "watching"
	}
	line := who + " is " + verb + " " + what
	if s.PlayState.IsPaused {
		line = who + " paused " + what
	}
	device := s.DeviceName
	if device == "" {
		device = s.Client
	}
	if device != "" {
		line += " on " + device
	}
	if pct := percent(s.PlayState.PositionTicks, it.RunTimeTicks); pct >= 0 {
		if s.PlayState.IsPaused {
			line += fmt.Sprintf(" at %d%%", pct)
		} else {
			line += fmt.Sprintf(", %d%%", pct)
		}
	}
	return line
}
