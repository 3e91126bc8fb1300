package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/mmcpd/mmcpd/plugins/internal/human"
)

// searchLimit is the most matches a search returns, and the most Plex is
// asked for per kind of item; more says how many others Plex sent.
const searchLimit = 10

// searchKinds are the item types a search reports: people, genres,
// collections and playlists are not what "is it on Plex?" asks about.
var searchKinds = []string{"movie", "show", "episode", "artist", "album", "track"}

type searchArgs struct {
	Query string `json:"query" jsonschema:"minLength=1,maxLength=200,description=Words of the title to look for"`
	Type  string `json:"type,omitempty" jsonschema:"enum=movie,enum=show,enum=episode,enum=artist,enum=album,enum=track,description=Only this kind of item; omit it for all"`
}

type searchResult struct {
	Total int          `json:"total"`
	Items []itemResult `json:"items"`
	More  int          `json:"more,omitempty"`
}

// itemResult is one library item as the model gets it.
type itemResult struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Year    int    `json:"year,omitempty"`
	Show    string `json:"show,omitempty"`
	Episode string `json:"episode,omitempty"`
	Artist  string `json:"artist,omitempty"`
	Library string `json:"library,omitempty"`
	// Watched is the account's watched state of a film or an episode; a
	// show or a season is watched when every episode is.
	Watched           *bool  `json:"watched,omitempty"`
	WatchedPercent    int    `json:"watched_percent,omitempty"`    // of a film or episode begun but not finished
	UnwatchedEpisodes int    `json:"unwatched_episodes,omitempty"` // of a show or a season
	Added             string `json:"added,omitempty"`
}

func (p *plex) search(ctx context.Context, a searchArgs) (searchResult, error) {
	query := strings.TrimSpace(a.Query)
	if query == "" {
		return searchResult{}, errors.New("the query is empty: give words of the title to look for")
	}
	// /hubs/search answers one hub per kind of item, best matches first.
	q := url.Values{"query": {query}, "limit": {strconv.Itoa(searchLimit)}}
	var mc struct {
		Hub []struct {
			Metadata []metadata `json:"Metadata"`
		} `json:"Hub"`
	}
	if err := p.get(ctx, "/hubs/search", q, &mc); err != nil {
		return searchResult{}, err
	}
	var found []metadata
	for _, h := range mc.Hub {
		for _, m := range h.Metadata {
			if slices.Contains(searchKinds, m.Type) && (a.Type == "" || m.Type == a.Type) {
				found = append(found, m)
			}
		}
	}
	r := searchResult{Total: len(found), Items: []itemResult{}}
	for _, m := range found[:min(len(found), searchLimit)] {
		r.Items = append(r.Items, summary(m))
	}
	r.More = r.Total - len(r.Items)
	return r, nil
}

// summary is what the model needs to know of an item.
func summary(m metadata) itemResult {
	r := itemResult{
		Title:   m.Title,
		Type:    m.Type,
		Year:    m.Year,
		Show:    m.show(),
		Episode: m.episode(),
		Artist:  m.artist(),
		Library: m.LibrarySectionTitle,
	}
	if !m.video() {
		return r // music has play counts, not a watched state
	}
	watched := m.ViewCount > 0
	if m.Type == "show" || m.Type == "season" {
		watched = m.LeafCount > 0 && m.ViewedLeafCount >= m.LeafCount
		r.UnwatchedEpisodes = max(0, m.LeafCount-m.ViewedLeafCount)
	}
	r.Watched = &watched
	if pct := percent(m.ViewOffset, m.Duration); !watched && m.ViewOffset > 0 && pct >= 0 {
		r.WatchedPercent = max(1, pct) // begun is never 0%
	}
	return r
}

// page asks Plex for the first n items of a list. Plex reads its paging
// parameters from headers or the query alike; in the query they show in a
// server's request log, and they are no secret.
func page(n int) url.Values {
	return url.Values{"X-Plex-Container-Start": {"0"}, "X-Plex-Container-Size": {strconv.Itoa(n)}}
}

type recentArgs struct {
	Limit int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=30,default=10,description=How many of the newest additions to list"`
	Type  string `json:"type,omitempty" jsonschema:"enum=movie,enum=show,enum=episode,enum=album,description=Only this kind of item; omit it for all (new episodes then come grouped by season)"`
}

// plexTypes are Plex's numbers for the kinds of item recentlyAdded filters.
var plexTypes = map[string]string{"movie": "1", "show": "2", "episode": "4", "album": "9"}

type listResult struct {
	Items []itemResult `json:"items"`
}

func (p *plex) recentlyAdded(ctx context.Context, a recentArgs) (listResult, error) {
	limit := cmp.Or(a.Limit, 10)
	q := page(limit)
	if a.Type != "" {
		q.Set("type", plexTypes[a.Type])
	}
	var mc struct {
		Metadata []metadata `json:"Metadata"`
	}
	if err := p.get(ctx, "/library/recentlyAdded", q, &mc); err != nil {
		return listResult{}, err
	}
	r := listResult{Items: []itemResult{}}
	for _, m := range mc.Metadata[:min(len(mc.Metadata), limit)] {
		s := summary(m)
		s.Added = day(m.AddedAt, p.zone)
		// What is new, not what was watched.
		s.Watched, s.WatchedPercent, s.UnwatchedEpisodes = nil, 0, 0
		r.Items = append(r.Items, s)
	}
	return r, nil
}

type onDeckArgs struct {
	Limit int `json:"limit,omitempty" jsonschema:"minimum=1,maximum=20,default=10,description=How many items to list"`
}

func (p *plex) onDeck(ctx context.Context, a onDeckArgs) (listResult, error) {
	limit := cmp.Or(a.Limit, 10)
	var mc struct {
		Metadata []metadata `json:"Metadata"`
	}
	if err := p.get(ctx, "/library/onDeck", page(limit), &mc); err != nil {
		return listResult{}, err
	}
	r := listResult{Items: []itemResult{}}
	for _, m := range mc.Metadata[:min(len(mc.Metadata), limit)] {
		s := summary(m)
		// On Deck holds nothing watched: what counts is how far each is.
		s.Watched = nil
		r.Items = append(r.Items, s)
	}
	return r, nil
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
	Show     string `json:"show,omitempty"`
	Episode  string `json:"episode,omitempty"`
	Artist   string `json:"artist,omitempty"`
	Player   string `json:"player,omitempty"`
	Product  string `json:"product,omitempty"`
	Progress *int   `json:"progress_percent,omitempty"`
	State    string `json:"state"`  // playing, paused or buffering
	Stream   string `json:"stream"` // direct play, direct stream or transcode
}

func (p *plex) nowPlaying(ctx context.Context, _ noArgs) (nowPlayingResult, error) {
	sessions, err := p.sessions(ctx)
	if err != nil {
		return nowPlayingResult{}, err
	}
	r := nowPlayingResult{Count: len(sessions), Sessions: []playingResult{}}
	for _, m := range sessions[:min(len(sessions), maxSessions)] {
		s := playingResult{
			User: userName(m), Title: m.Title, Type: m.Type, Year: m.Year,
			Show: m.show(), Episode: m.episode(), Artist: m.artist(),
			State: "playing", Stream: stream(m.TranscodeSession),
		}
		if m.Player != nil {
			s.Player, s.Product, s.State = m.Player.Title, m.Player.Product, cmp.Or(m.Player.State, "playing")
		}
		if pct := percent(m.ViewOffset, m.Duration); pct >= 0 {
			s.Progress = &pct
		}
		r.Sessions = append(r.Sessions, s)
	}
	r.More = r.Count - len(r.Sessions)
	return r, nil
}

// sessions lists what is playing: GET /status/sessions has one item per
// playback, with who, where and how.
func (p *plex) sessions(ctx context.Context) ([]metadata, error) {
	var mc struct {
		Metadata []metadata `json:"Metadata"`
	}
	if err := p.get(ctx, "/status/sessions", nil, &mc); err != nil {
		return nil, err
	}
	return mc.Metadata, nil
}

func userName(m metadata) string {
	if m.User == nil || m.User.Title == "" {
		return "someone"
	}
	return m.User.Title
}

// stream says how the server sends a playback: as the file is (direct
// play), repackaged with its streams copied (direct stream), or converted
// (transcode), which is what costs the server.
func stream(t *transcode) string {
	switch {
	case t == nil:
		return "direct play"
	case t.VideoDecision == "transcode" || t.AudioDecision == "transcode":
		return "transcode"
	}
	return "direct stream"
}

// nowPlayingLine is the context line: who watches what (human.Watching).
func (p *plex) nowPlayingLine(ctx context.Context) (string, error) {
	sessions, err := p.sessions(ctx)
	if err != nil {
		return "", err
	}
	clauses := make([]string, len(sessions))
	for i, m := range sessions {
		clauses[i] = clause(m)
	}
	return human.Watching(clauses), nil
}

// clause says what one session plays.
func clause(m metadata) string {
	who := userName(m)
	what, verb := m.Title, "watching"
	switch m.Type {
	case "episode":
		if show := strings.TrimSpace(m.show() + " " + m.episode()); show != "" {
			what = show + ` "` + m.Title + `"`
		}
	case "track":
		verb = "listening to"
		if a := m.artist(); a != "" {
			what += " by " + a
		}
	default:
		if m.Year > 0 {
			what += fmt.Sprintf(" (%d)", m.Year)
		}
	}
	paused := m.Player != nil && m.Player.State == "paused"
	line := who + " is " + verb + " " + what
	if paused {
		line = who + " paused " + what
	}
	if m.Player != nil {
		if device := cmp.Or(m.Player.Title, m.Player.Product); device != "" {
			line += " on " + device
		}
	}
	if pct := percent(m.ViewOffset, m.Duration); pct >= 0 {
		if paused {
			line += fmt.Sprintf(" at %d%%", pct)
		} else {
			line += fmt.Sprintf(", %d%%", pct)
		}
	}
	if stream(m.TranscodeSession) == "transcode" {
		line += ", transcoding"
	}
	return line
}
