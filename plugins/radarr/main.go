// Command mmcp-plugin-radarr finds films, adds them to Radarr, and says what
// is downloading and what comes out next.
package main

import (
	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
	"github.com/mmcpd/mmcpd/plugins/internal/arr"
)

func main() {
	newPlugin(arr.DefaultEnv()).Serve()
}

func newPlugin(env arr.Env) *sdk.Plugin {
	p, c := arr.NewPlugin("Radarr", env)
	r := &radarr{c: c, env: env}
	sdk.Tool(p, "radarr_lookup", "Search for a film to add to Radarr: candidates with their TMDB id and whether the library has them already", r.lookup)
	sdk.Tool(p, "radarr_add", "Add a film to Radarr by its TMDB id (from radarr_lookup) and search for it", r.add, sdk.NeedsApproval())
	sdk.Tool(p, "radarr_queue", "What Radarr is downloading: progress, time left, and why an item is stuck", r.queue)
	sdk.Tool(p, "radarr_calendar", "Films Radarr monitors that reach cinemas or come out digitally or on disc in the coming days", r.calendar)
	return p
}
