// Command mmcp-plugin-sonarr finds TV series, adds them to Sonarr, and says
// what is downloading and what airs next.
package main

import (
	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
	"github.com/mmcpd/mmcpd/plugins/internal/arr"
)

func main() {
	newPlugin(arr.DefaultEnv()).Serve()
}

func newPlugin(env arr.Env) *sdk.Plugin {
	p, c := arr.NewPlugin("Sonarr", env)
	s := &sonarr{c: c, env: env}
	sdk.Tool(p, "sonarr_lookup", "Search for a TV series to add to Sonarr: candidates with their TVDB id and whether the library has them already", s.lookup)
	sdk.Tool(p, "sonarr_add", "Add a TV series to Sonarr by its TVDB id (from sonarr_lookup) and search for its episodes", s.add, sdk.NeedsApproval())
	sdk.Tool(p, "sonarr_queue", "What Sonarr is downloading: progress, time left, and why an item is stuck", s.queue)
	sdk.Tool(p, "sonarr_calendar", "Episodes of the series Sonarr monitors that air in the coming days", s.calendar)
	return p
}
