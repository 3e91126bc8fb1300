package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

const (
	keyVar  = "MMCP_PLUGIN_TMDB_API_KEY"
	urlVar  = "MMCP_PLUGIN_TMDB_BASE_URL"
	siteURL = "https://www.themoviedb.org"
)

// tmdb is a client for TMDB's v3 API, authenticated either way TMDB allows.
type tmdb struct {
	c        *httpapi.Client
	language string
	region   string // the country of language ("US" of "en-US"), preferred for dates and ratings
}

// v3Key is the shape of a v3 API key; a v4 token is a JWT.
var v3Key = regexp.MustCompile(`^[0-9a-fA-F]{32}$`)

func newAPI(cfg settings, timeout time.Duration) (*tmdb, error) {
	auth, err := authFor(strings.TrimSpace(cfg.APIKey))
	if err != nil {
		return nil, err
	}
	c, err := httpapi.New("TMDB", cfg.BaseURL, urlVar, timeout)
	if err != nil {
		return nil, err
	}
	c.Auth = auth
	c.CredVar = keyVar
	lang := strings.TrimSpace(cfg.Language)
	_, region, _ := strings.Cut(lang, "-")
	return &tmdb{c: c, language: lang, region: strings.ToUpper(region)}, nil
}

// authFor tells the two kinds of TMDB credentials apart: a v4 read access
// token goes in the Authorization header, a v3 key in the api_key parameter.
// Anything else would only earn a 401 that does not say why.
func authFor(key string) (func(*http.Request), error) {
	switch {
	case key == "":
		return nil, errors.New(keyVar + " is required")
	case strings.HasPrefix(key, "eyJ") && strings.Count(key, ".") == 2:
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+key) }, nil
	case v3Key.MatchString(key):
		return func(r *http.Request) {
			q := r.URL.Query()
			q.Set("api_key", key)
			r.URL.RawQuery = q.Encode()
		}, nil
	}
	return nil, errors.New(keyVar + " is neither an API Read Access Token (a long string starting with eyJ) nor an API Key (32 hex characters); copy one from https://www.themoviedb.org/settings/api")
}

// get fetches path in the configured language.
func (t *tmdb) get(ctx context.Context, path string, q url.Values, out any) error {
	if q == nil {
		q = url.Values{}
	}
	if t.language != "" {
		q.Set("language", t.language)
	}
	return t.c.Get(ctx, path, q, out)
}

// health is the plugin's probe: the API configuration is the cheapest call
// that needs the key (either kind) and the base URL to be right.
func (t *tmdb) health(ctx context.Context) error {
	var cfg struct {
		Images struct {
			BaseURL string `json:"secure_base_url"`
		} `json:"images"`
	}
	return t.c.Get(ctx, "/configuration", nil, &cfg)
}

// mediaKind is what the user calls a media type: "tv show" reads better than
// "tv" in a sentence.
func mediaKind(mediaType string) string {
	if mediaType == "tv" {
		return "tv show"
	}
	return mediaType
}

// year is the year of a TMDB date ("2021-09-15"), or 0 when there is none.
func year(date string) int {
	if len(date) < 4 {
		return 0
	}
	y, err := strconv.Atoi(date[:4])
	if err != nil {
		return 0
	}
	return y
}

// rating rounds TMDB's vote average to one decimal.
func rating(v float64) float64 { return math.Round(v*10) / 10 }

// notFound turns a 404 on an id into a message that says what to do.
func notFound(err error, mediaType string, id int) error {
	if errors.Is(err, httpapi.ErrNotFound) {
		return fmt.Errorf("no %s with TMDB id %d; check the id and media_type, or find it with tmdb_search", mediaKind(mediaType), id)
	}
	return err
}
