// Command mmcp-plugin-tmdb is the bundled plugin that looks films and shows
// up on The Movie Database (TMDB): search, details, release dates, trending.
package main

import (
	"context"
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
		sdk.Method(api, err, (*tmdb).search))
	sdk.Tool(p, "tmdb_details",
		"Details of one film or TV show by its TMDB id: runtime or seasons, genres, main cast, release dates (theatrical, digital, physical such as Blu-ray) or air dates, and links to TMDB and IMDb",
		sdk.Method(api, err, (*tmdb).details))
	sdk.Tool(p, "tmdb_trending",
		"What is trending on TMDB today or this week: films, TV shows or both",
		sdk.Method(api, err, (*tmdb).trending))
	p.Health(func(ctx context.Context) error {
		if err != nil {
			return err
		}
		return api.health(ctx)
	})
	return p
}
