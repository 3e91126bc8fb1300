// Command mmcp-plugin-jellyfin is the bundled plugin that looks into a
// Jellyfin media server: what is in the library, what was added lately, and
// who is watching what right now.
package main

import (
	"context"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

const version = "1.0.0"

// settings are read from MMCP_PLUGIN_JELLYFIN_*.
type settings struct {
	URL    string `required:"true" desc:"Jellyfin server URL such as http://jellyfin:8096 (with the base path when it is behind a reverse proxy)"`
	APIKey string `split_words:"true" required:"true" secret:"true" desc:"Jellyfin API key (Dashboard > API Keys)"`
	User   string `desc:"name of the Jellyfin user whose library and watched state the tools show; when empty the first administrator"`
}

// requestTimeout bounds one request to Jellyfin, well inside the daemon's 30s
// tool deadline so that a dead server is reported as such.
const requestTimeout = 15 * time.Second

func main() {
	newPlugin(requestTimeout).Serve()
}

// newPlugin declares the plugin with its settings read from the environment.
// A setting that cannot be used makes every tool answer with what to fix.
func newPlugin(timeout time.Duration) *sdk.Plugin {
	p := sdk.New("jellyfin", version)
	var cfg settings
	p.Settings(&cfg)
	jf, err := newJellyfin(cfg, timeout)
	if err != nil {
		p.SettingProblem(err.Error()) // standby, with the reason, in the daemon's listings
	}

	sdk.Tool(p, "jellyfin_search",
		"Search the Jellyfin library for films, series, episodes or music albums by name: whether each is in the library and whether it was watched",
		sdk.Method(jf, err, (*jellyfin).search))
	sdk.Tool(p, "jellyfin_latest",
		"What was added to the Jellyfin library most recently: films, series with new episodes and albums with the date each was added",
		sdk.Method(jf, err, (*jellyfin).latest))
	sdk.Tool(p, "jellyfin_now_playing",
		"Who is playing what on Jellyfin right now: user, title, device, progress and whether it is paused",
		sdk.Method(jf, err, (*jellyfin).nowPlaying))
	p.Context("now_playing", "Who is watching what on Jellyfin",
		func(ctx context.Context) (string, error) {
			if err != nil {
				return "", err
			}
			return jf.nowPlayingLine(ctx)
		})
	p.Health(func(ctx context.Context) error {
		if err != nil {
			return err
		}
		return jf.health(ctx)
	})
	return p
}
