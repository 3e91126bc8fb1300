// Command mmcp-plugin-plex is the bundled plugin that looks into a Plex Media
// Server: what is in the library and whether it was watched, what was added
// lately, what to continue watching, and who is watching what right now.
package main

import (
	"context"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

const version = "1.0.0"

// settings are read from MMCP_PLUGIN_PLEX_*.
type settings struct {
	URL   string `required:"true" desc:"Plex Media Server URL such as http://plex:32400 (with the base path when it is behind a reverse proxy)"`
	Token string `required:"true" secret:"true" desc:"X-Plex-Token of the account whose libraries and watched state the tools show (Plex Web: Get Info on any item, View XML, and the address ends with it)"`
}

// requestTimeout bounds one request to Plex, well inside the daemon's 30s
// tool deadline so that a dead server is reported as such.
const requestTimeout = 15 * time.Second

func main() {
	newPlugin(requestTimeout, time.Local).Serve()
}

// newPlugin declares the plugin with its settings read from the environment;
// zone is where the dates things were added are told. A setting that cannot
// be used makes every tool answer with what to fix.
func newPlugin(timeout time.Duration, zone *time.Location) *sdk.Plugin {
	p := sdk.New("plex", version)
	var cfg settings
	p.Settings(&cfg)
	px, err := newPlex(cfg, timeout, zone)
	if err != nil {
		p.SettingProblem(err.Error()) // standby, with the reason, in the daemon's listings
	}

	sdk.Tool(p, "plex_search",
		"Search the Plex libraries for films, shows, episodes or music by title: whether each is on Plex, in which library, and whether it was watched",
		sdk.Method(px, err, (*plex).search))
	sdk.Tool(p, "plex_recently_added",
		"What was added to Plex most recently: films, seasons with new episodes and albums, with the library and the date each was added",
		sdk.Method(px, err, (*plex).recentlyAdded))
	sdk.Tool(p, "plex_on_deck",
		"Plex's On Deck (continue watching): films and episodes begun but not finished, and the next episode of shows being watched",
		sdk.Method(px, err, (*plex).onDeck))
	sdk.Tool(p, "plex_now_playing",
		"Who is playing what on Plex right now: user, title, player, progress, whether it is paused, and whether the server transcodes it",
		sdk.Method(px, err, (*plex).nowPlaying))
	p.Context("now_playing", "Who is watching what on Plex",
		func(ctx context.Context) (string, error) {
			if err != nil {
				return "", err
			}
			return px.nowPlayingLine(ctx)
		})
	p.Health(func(ctx context.Context) error {
		if err != nil {
			return err
		}
		return px.health(ctx)
	})
	return p
}
