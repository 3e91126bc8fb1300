// Command mmcp-plugin-tmdb is the bundled plugin that looks films and shows
// up on The Movie Database (TMDB): search, details, release dates, trending.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

const version = "1.0.0"

// settings are read from MMCP_PLUGIN_TMDB_*.
type settings struct {
	APIKey   string `split_words:"true" required:"true" secret:"true" desc:"TMDB API Read Access Token (v4, starts with eyJ) or API Key (v3, 32 hex characters), from https://www.themoviedb.org/settings/api"`
	BaseURL  string `split_words:"true" default:"https://api.themoviedb.org/3" desc:"TMDB API root"`
	Language string `default:"en-US" desc:"language of titles and overviews, and the country preferred for release dates and ratings (e.g. de-DE)"`
}

// requestTimeout bounds one request to TMDB, well inside the daemon's 30s
// tool deadline so that a dead service is reported as such.
const requestTimeout = 15 * time.Second

func main() {
	newPlugin(requestTimeout).Serve()
}

// newPlugin declares the plugin with its settings read from the environment.
// A setting that cannot be used makes every tool answer with what to fix.
func newPlugin(timeout time.Duration) *sdk.Plugin {
	p := sdk.New("tmdb", version)
	var cfg settings
	p.Settings(&cfg)
	api, err := newAPI(cfg, timeout)
	if err != nil {
		p.SettingProblem(err.Error()) // standby, with the reason, in the daemon's listings
	}

	sdk.Tool(p, "tmdb_search",
		"Search TMDB (The Movie Database) for a film or TV show by title: the top matches with their TMDB ids, years, short overviews and ratings",
		bind(api, err, (*tmdb).search))
	sdk.Tool(p, "tmdb_details",
		"Details of one film or TV show by its TMDB id: runtime or seasons, genres, main cast, release dates (theatrical, digital, physical such as Blu-ray) or air dates, and links to TMDB and IMDb",
		bind(api, err, (*tmdb).details))
	sdk.Tool(p, "tmdb_trending",
		"What is trending on TMDB today or this week: films, TV shows or both",
		bind(api, err, (*tmdb).trending))
	p.Health(func(ctx context.Context) error {
		if err != nil {
			return err
		}
		return api.health(ctx)
	})
	return p
}

// bind turns a method of the API into a tool function that first reports a
// setting problem, if there was one.
func bind[A, R any](api *tmdb, setupErr error, fn func(*tmdb, context.Context, A) (R, error)) func(context.Context, A) (json.RawMessage, error) {
	return func(ctx context.Context, a A) (json.RawMessage, error) {
		if setupErr != nil {
			return nil, setupErr
		}
		r, err := fn(api, ctx, a)
		if err != nil {
			return nil, err
		}
		return marshal(r)
	}
}

// marshal encodes a result without HTML escaping: the model should read
// "Law & Order", not "Law \u0026 Order".
func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding the result: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
