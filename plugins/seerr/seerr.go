package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

const (
	urlVar = "MMCP_PLUGIN_SEERR_URL"
	keyVar = "MMCP_PLUGIN_SEERR_API_KEY"
)

// seerr is a client for one Jellyseerr or Overseerr. With the API key it
// acts as the owner account (user 1).
type seerr struct {
	c *httpapi.Client
}

func newSeerr(cfg settings, timeout time.Duration) (*seerr, error) {
	key := strings.TrimSpace(cfg.APIKey)
	if key == "" {
		return nil, errors.New(keyVar + " is required")
	}
	c, err := httpapi.New("Seerr", cfg.URL, urlVar, timeout)
	if err != nil {
		return nil, err
	}
	c.Auth = func(r *http.Request) { r.Header.Set("X-Api-Key", key) }
	c.CredVar = keyVar
	c.HTTP.Transport = percentSpaces{http.DefaultTransport}
	return &seerr{c: c}, nil
}

// percentSpaces sends the spaces of a query as %20. url.Values encodes them
// as "+", which Seerr's request validator refuses ("Parameter 'query' must
// be url encoded. Its value may not contain reserved characters"). Every
// other character but letters, digits and -_.~ is already percent-encoded,
// so a "+" left in an encoded query can only be a space.
type percentSpaces struct{ next http.RoundTripper }

func (p percentSpaces) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.RawQuery, "+") {
		r = r.Clone(r.Context()) // a RoundTripper must not change the request it is given
		r.URL.RawQuery = strings.ReplaceAll(r.URL.RawQuery, "+", "%20")
	}
	return p.next.RoundTrip(r)
}

// do sends one request to an API path (under /api/v1).
func (s *seerr) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	err := s.c.Do(ctx, method, "/api/v1"+path, query, body, out)
	if errors.Is(err, httpapi.ErrNotFound) {
		// Every path used here exists in both servers, so a 404 means the
		// URL leads somewhere else (a missing base path, another app).
		return fmt.Errorf("%w; check that %s is the address of Jellyseerr or Overseerr, with its base path if it has one", err, urlVar)
	}
	return err
}

func (s *seerr) get(ctx context.Context, path string, query url.Values, out any) error {
	return s.do(ctx, http.MethodGet, path, query, nil, out)
}

// health is the plugin's probe: the account the key acts for. /status is
// cheaper but answers anyone, so it proves nothing about the key, and
// /settings/main, which needs the key too, answers with the key itself.
func (s *seerr) health(ctx context.Context) error {
	var me struct {
		ID int `json:"id"`
	}
	return s.get(ctx, "/auth/me", nil, &me)
}

// mediaStatuses name Seerr's MediaStatus: how far a film or series is from
// being watchable. 6 and 7 are Jellyseerr's only.
var mediaStatuses = map[int]string{
	1: "not requested", // known to Seerr (a declined or removed request), nothing under way
	2: "pending approval",
	3: "processing", // approved, on its way to the library
	4: "partially available",
	5: "available",
	6: "blacklisted",
	7: "deleted",
}

// The MediaStatus codes the request tool acts on.
const (
	statusPending    = 2
	statusProcessing = 3
	statusAvailable  = 5
)

// requestStatuses name Seerr's MediaRequestStatus; 5 is Jellyseerr's only.
var requestStatuses = map[int]string{1: "pending approval", 2: "approved", 3: "declined", 4: "failed", 5: "completed"}

// statusName is the name of a status code, or the code itself when this
// plugin does not know it (a newer server).
func statusName(names map[int]string, code int) string {
	if n, ok := names[code]; ok {
		return n
	}
	return "status " + strconv.Itoa(code)
}

// mediaInfo is what Seerr knows of a film or series beyond TMDB: whether
// it was requested, or is in the library.
type mediaInfo struct {
	Status int `json:"status"`
}

// media is a film or a series as Seerr describes it: a search result
// (MovieResult, TvResult, or a PersonResult to skip) or the details of one.
// Films have a title and a release date, series a name and a first air date.
type media struct {
	ID           int        `json:"id"`        // the TMDB id
	MediaType    string     `json:"mediaType"` // in search results: movie, tv or person
	Title        string     `json:"title"`
	Name         string     `json:"name"`
	ReleaseDate  string     `json:"releaseDate"`
	FirstAirDate string     `json:"firstAirDate"`
	Overview     string     `json:"overview"`
	MediaInfo    *mediaInfo `json:"mediaInfo"` // nil when Seerr has never heard of it
	Seasons      []struct {
		SeasonNumber int `json:"seasonNumber"`
	} `json:"seasons"` // of a series' details
}

func (m media) title() string { return cmp.Or(m.Title, m.Name) }

// year is the year of the release or first air date ("2021-09-15"), 0 when
// unknown.
func (m media) year() int {
	y, _ := strconv.Atoi(strings.SplitN(cmp.Or(m.ReleaseDate, m.FirstAirDate), "-", 2)[0])
	return y
}

// label is the title with its year, as messages name it: "Dune (2021)".
func (m media) label() string {
	if y := m.year(); y > 0 {
		return fmt.Sprintf("%s (%d)", m.title(), y)
	}
	return m.title()
}

// status is the MediaStatus code, 1 when Seerr knows nothing of it.
func (m media) status() int {
	if m.MediaInfo == nil || m.MediaInfo.Status == 0 {
		return 1
	}
	return m.MediaInfo.Status
}

// kinds name the media types in messages.
var kinds = map[string]string{"movie": "film", "tv": "series"}

// details fetches a film's or a series' details (mediaType movie or tv).
func (s *seerr) details(ctx context.Context, mediaType string, tmdbID int) (media, error) {
	var m media
	err := s.get(ctx, "/"+mediaType+"/"+strconv.Itoa(tmdbID), nil, &m)
	// Seerr reports an id TMDB does not know (and a TMDB it cannot reach)
	// as a server error: "Unable to retrieve movie."
	if errors.Is(err, httpapi.ErrService) && strings.Contains(err.Error(), "Unable to retrieve") {
		return media{}, fmt.Errorf("Seerr found no %s with TMDB id %d (or could not reach TMDB); check the id with seerr_search", kinds[mediaType], tmdbID)
	}
	return m, err
}

// dateOnly is the day of one of Seerr's timestamps
// ("2025-01-18T14:03:22.000Z"), or "" when it has none.
func dateOnly(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ""
	}
	return t.Format(time.DateOnly)
}
