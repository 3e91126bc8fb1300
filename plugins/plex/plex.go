package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

const (
	urlVar   = "MMCP_PLUGIN_PLEX_URL"
	tokenVar = "MMCP_PLUGIN_PLEX_TOKEN"
)

// clientID is how this plugin names itself to Plex (X-Plex-Client-Identifier).
// Plex expects every client to send one; a fixed one makes the server see
// one client across restarts, not a new device at each start.
const clientID = "mmcpd-plugin-plex"

// plex is a client for one Plex Media Server, as the account whose token it
// holds: watched state is that account's.
type plex struct {
	c    *httpapi.Client
	zone *time.Location // where "added on" dates are told
}

func newPlex(cfg settings, timeout time.Duration, zone *time.Location) (*plex, error) {
	token := strings.TrimSpace(cfg.Token)
	if token == "" {
		return nil, errors.New(tokenVar + " is required")
	}
	c, err := httpapi.New("Plex", cfg.URL, urlVar, timeout)
	if err != nil {
		return nil, err
	}
	// The token goes in a header, never in the query where Plex's own
	// examples put it: a URL ends up in logs and error messages.
	c.Auth = func(r *http.Request) { r.Header.Set("X-Plex-Token", token) }
	c.CredVar = tokenVar
	// httpapi asks for application/json: Plex answers XML without it.
	c.Header = http.Header{}
	c.Header.Set("X-Plex-Client-Identifier", clientID)
	c.Header.Set("X-Plex-Product", "mmcpd")
	c.Header.Set("X-Plex-Version", version)
	return &plex{c: c, zone: zone}, nil
}

// get fetches a Plex path and decodes its MediaContainer into out.
func (p *plex) get(ctx context.Context, path string, query url.Values, out any) error {
	body := struct {
		MediaContainer any `json:"MediaContainer"`
	}{out}
	err := p.c.Get(ctx, path, query, &body)
	if errors.Is(err, httpapi.ErrNotFound) {
		// Every path used here exists on any Plex Media Server, so a 404
		// means the URL leads somewhere else (a missing base path, another
		// app).
		return fmt.Errorf("%w; check that %s is the address of Plex Media Server, with its base path if it has one", err, urlVar)
	}
	return err
}

// health is the plugin's probe. GET /identity would be cheaper, but Plex
// answers it without a token, so it proves nothing about TOKEN; the list of
// libraries needs the token and is small.
func (p *plex) health(ctx context.Context) error {
	var sections struct {
		Size int `json:"size"`
	}
	return p.get(ctx, "/library/sections", nil, &sections)
}

// metadata is the part of a Plex Metadata item the tools report. Plex names
// an item's ancestors by generation: an episode's parent is its season and
// its grandparent its show; a track's parent is its album and its
// grandparent its artist.
type metadata struct {
	Title               string `json:"title"`
	Type                string `json:"type"` // movie, show, season, episode, artist, album, track...
	Year                int    `json:"year"`
	LibrarySectionTitle string `json:"librarySectionTitle"`
	ParentTitle         string `json:"parentTitle"`
	GrandparentTitle    string `json:"grandparentTitle"`
	ParentIndex         *int   `json:"parentIndex"` // an episode's season
	Index               *int   `json:"index"`       // an episode's number
	Duration            int64  `json:"duration"`    // milliseconds
	ViewOffset          int64  `json:"viewOffset"`  // milliseconds into it, when begun
	ViewCount           int    `json:"viewCount"`   // times watched to the end
	LeafCount           int    `json:"leafCount"`   // episodes of a show or season
	ViewedLeafCount     int    `json:"viewedLeafCount"`
	AddedAt             int64  `json:"addedAt"` // Unix seconds

	// Sessions (GET /status/sessions) only.
	User             *account   `json:"User"`
	Player           *player    `json:"Player"`
	TranscodeSession *transcode `json:"TranscodeSession"`
}

type account struct {
	Title string `json:"title"` // the name of the Plex account
}

type player struct {
	Title   string `json:"title"`   // the device's name: "Living Room TV"
	Product string `json:"product"` // the app: "Plex for Android (TV)"
	State   string `json:"state"`   // playing, paused, buffering
}

type transcode struct {
	VideoDecision string `json:"videoDecision"` // transcode, copy
	AudioDecision string `json:"audioDecision"`
}

// video is whether an item is a film or part of a show: those have a
// watched state worth telling.
func (m metadata) video() bool {
	switch m.Type {
	case "movie", "show", "season", "episode":
		return true
	}
	return false
}

// show is the show of an episode or a season.
func (m metadata) show() string {
	switch m.Type {
	case "episode":
		return m.GrandparentTitle
	case "season":
		return m.ParentTitle
	}
	return ""
}

// artist is who made an album or a track.
func (m metadata) artist() string {
	switch m.Type {
	case "album":
		return m.ParentTitle
	case "track":
		return m.GrandparentTitle
	}
	return ""
}

// episode is "S02E05" for an episode, "" for anything else.
func (m metadata) episode() string {
	if m.Type != "episode" {
		return ""
	}
	return episodeCode(m.ParentIndex, m.Index)
}

// episodeCode is "S02E05" for the fifth episode of season 2, "E05" when the
// season is unknown, "" when the number is.
func episodeCode(season, episode *int) string {
	switch {
	case episode == nil:
		return ""
	case season == nil:
		return fmt.Sprintf("E%02d", *episode)
	}
	return fmt.Sprintf("S%02dE%02d", *season, *episode)
}

// percent is how far position is into duration, 0..100; -1 when the
// duration is unknown (live TV).
func percent(position, duration int64) int {
	if duration <= 0 {
		return -1
	}
	p := int(math.Round(float64(position) * 100 / float64(duration)))
	return max(0, min(100, p))
}

// day is the date of a Unix time in zone, or "" for none.
func day(unix int64, zone *time.Location) string {
	if unix <= 0 {
		return ""
	}
	return time.Unix(unix, 0).In(zone).Format(time.DateOnly)
}
