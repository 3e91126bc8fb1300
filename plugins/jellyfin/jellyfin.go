package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

const (
	urlVar  = "MMCP_PLUGIN_JELLYFIN_URL"
	keyVar  = "MMCP_PLUGIN_JELLYFIN_API_KEY"
	userVar = "MMCP_PLUGIN_JELLYFIN_USER"
)

// jellyfin is a client for one Jellyfin server, on behalf of one user: an API
// key belongs to no user, and watched state and "latest" only exist per user.
type jellyfin struct {
	c        *httpapi.Client
	userName string // the USER setting; empty for the first administrator

	mu   sync.Mutex
	user *user // resolved on first use, kept once found
}

func newJellyfin(cfg settings, timeout time.Duration) (*jellyfin, error) {
	key := strings.TrimSpace(cfg.APIKey)
	if key == "" {
		return nil, errors.New(keyVar + " is required")
	}
	c, err := httpapi.New("Jellyfin", cfg.URL, urlVar, timeout)
	if err != nil {
		return nil, err
	}
	// The Authorization header with the MediaBrowser scheme is the one form
	// every Jellyfin since 10.8 reads; X-Emby-Token is off by default from
	// 12.0. Token alone: a Device or Version would make Jellyfin record this
	// plugin as a device of the key.
	c.Auth = func(r *http.Request) { r.Header.Set("Authorization", `MediaBrowser Token="`+key+`"`) }
	c.CredVar = keyVar
	return &jellyfin{c: c, userName: strings.TrimSpace(cfg.User)}, nil
}

// health is the plugin's probe: /System/Info answers only a valid key
// (/System/Info/Public answers anyone), and needs no user.
func (j *jellyfin) health(ctx context.Context) error {
	var info struct {
		Version string `json:"Version"`
	}
	return j.c.Get(ctx, "/System/Info", nil, &info)
}

// user is a Jellyfin user as GET /Users lists it.
type user struct {
	Name   string `json:"Name"`
	ID     string `json:"Id"`
	Policy struct {
		IsAdministrator bool `json:"IsAdministrator"`
		IsDisabled      bool `json:"IsDisabled"`
	} `json:"Policy"`
}

// currentUser is the user the tools act for: the one named by the USER
// setting, else the first enabled administrator, else the first enabled
// user. It is looked up once; a failed lookup is tried again next time.
func (j *jellyfin) currentUser(ctx context.Context) (*user, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.user != nil {
		return j.user, nil
	}
	var users []user
	if err := j.c.Get(ctx, "/Users", nil, &users); err != nil {
		return nil, err
	}
	u, err := pickUser(users, j.userName)
	if err != nil {
		return nil, err
	}
	j.user = u
	return u, nil
}

func pickUser(users []user, name string) (*user, error) {
	if name != "" {
		names := make([]string, 0, len(users))
		for i, u := range users {
			if strings.EqualFold(u.Name, name) {
				return &users[i], nil
			}
			names = append(names, u.Name)
		}
		return nil, fmt.Errorf("Jellyfin has no user named %q; check %s (its users: %s)", name, userVar, httpapi.Text(strings.Join(names, ", "), 300))
	}
	var first *user
	for i, u := range users {
		if u.Policy.IsDisabled {
			continue
		}
		if u.Policy.IsAdministrator {
			return &users[i], nil
		}
		if first == nil {
			first = &users[i]
		}
	}
	if first == nil {
		return nil, fmt.Errorf("Jellyfin has no enabled user to show the library for; enable one or set %s", userVar)
	}
	return first, nil
}

// item is the part of Jellyfin's BaseItemDto the tools report.
type item struct {
	Name              string   `json:"Name"`
	Type              string   `json:"Type"`
	ProductionYear    int      `json:"ProductionYear"`
	SeriesName        string   `json:"SeriesName"`
	ParentIndexNumber *int     `json:"ParentIndexNumber"` // the season of an episode
	IndexNumber       *int     `json:"IndexNumber"`
	AlbumArtist       string   `json:"AlbumArtist"`
	Artists           []string `json:"Artists"`
	RunTimeTicks      int64    `json:"RunTimeTicks"`
	DateCreated       string   `json:"DateCreated"`
	ChildCount        int      `json:"ChildCount"`
	UserData          *struct {
		Played            bool    `json:"Played"`
		PlayedPercentage  float64 `json:"PlayedPercentage"`
		UnplayedItemCount int     `json:"UnplayedItemCount"`
	} `json:"UserData"`
}

// kinds maps the tools' type names to Jellyfin's item types and back.
var kinds = map[string]string{
	"movie":   "Movie",
	"series":  "Series",
	"episode": "Episode",
	"album":   "MusicAlbum",
}

// kind is an item type as the tools name it.
func kind(jellyfinType string) string {
	for k, t := range kinds {
		if t == jellyfinType {
			return k
		}
	}
	switch jellyfinType {
	case "Audio":
		return "song"
	case "":
		return "item"
	}
	return strings.ToLower(jellyfinType)
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

// artist is who made a song or an album: a song's own artist, since the
// album artist of a compilation is "Various Artists".
func (it item) artist() string {
	if len(it.Artists) > 0 && (it.Type == "Audio" || it.AlbumArtist == "") {
		return it.Artists[0]
	}
	return it.AlbumArtist
}

// percent is how far position is into runtime, 0..100; -1 when the runtime
// is unknown (live TV).
func percent(position, runtime int64) int {
	if runtime <= 0 {
		return -1
	}
	p := int(math.Round(float64(position) * 100 / float64(runtime)))
	return max(0, min(100, p))
}

// dateOnly is the day of one of Jellyfin's timestamps
// ("2024-03-09T18:22:01.0000000Z"), or "" when it has none: .NET's zero
// date, year 1, stands for none too.
func dateOnly(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil || t.Year() <= 1 {
		return ""
	}
	return t.Format(time.DateOnly)
}
