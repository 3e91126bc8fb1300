// Command mmcp-plugin-seerr is the bundled plugin that speaks to Jellyseerr
// or Overseerr (one API under /api/v1): find films and series with whether
// they are available or requested, request one, and list the requests.
package main

import (
	"context"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

const version = "1.0.0"

// settings are read from MMCP_PLUGIN_SEERR_*.
type settings struct {
	URL    string `required:"true" desc:"Jellyseerr or Overseerr URL such as http://jellyseerr:5055 (with the base path when it is behind a reverse proxy)"`
	APIKey string `split_words:"true" required:"true" secret:"true" desc:"API key, from Settings > General; requests made with it are the owner account's, approved at once"`
}

// requestTimeout bounds one request to Seerr, well inside the daemon's 30s
// tool deadline so that a dead server is reported as such.
const requestTimeout = 15 * time.Second

func main() {
	newPlugin(requestTimeout).Serve()
}

// newPlugin declares the plugin with its settings read from the environment.
// A setting that cannot be used makes every tool answer with what to fix.
func newPlugin(timeout time.Duration) *sdk.Plugin {
	p := sdk.New("seerr", version)
	var cfg settings
	p.Settings(&cfg)
	s, err := newSeerr(cfg, timeout)
	if err != nil {
		p.SettingProblem(err.Error()) // standby, with the reason, in the daemon's listings
	}

	sdk.Tool(p, "seerr_search",
		"Search Jellyseerr/Overseerr for films and series by title: their TMDB ids and whether each is available, being processed, pending approval or not requested yet",
		sdk.Method(s, err, (*seerr).search))
	// It starts a download of a whole film or series, as radarr_add does.
	sdk.Tool(p, "seerr_request",
		"Request a film or a series (all its seasons or some) on Jellyseerr/Overseerr by its TMDB id (from seerr_search)",
		sdk.Method(s, err, (*seerr).request), sdk.NeedsApproval())
	sdk.Tool(p, "seerr_requests",
		"The requests on Jellyseerr/Overseerr, newest first: what was asked for, by whom and when, and whether it is pending, approved or available",
		sdk.Method(s, err, (*seerr).requests))
	p.Health(func(ctx context.Context) error {
		if err != nil {
			return err
		}
		return s.health(ctx)
	})
	return p
}
