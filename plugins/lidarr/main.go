// Command mmcp-plugin-lidarr finds artists, adds them to Lidarr, and says
// what is downloading and which albums come out next.
package main

import (
	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
	"github.com/mmcpd/mmcpd/plugins/internal/arr"
)

func main() {
	newPlugin(arr.DefaultEnv()).Serve()
}

func newPlugin(env arr.Env) *sdk.Plugin {
	p, c := arr.NewPlugin("Lidarr", env)
	l := &lidarr{c: c, env: env}
	sdk.Tool(p, "lidarr_lookup", "Search for a music artist to add to Lidarr: candidates with their MusicBrainz id and whether the library has them already", l.lookup)
	sdk.Tool(p, "lidarr_add", "Add a music artist to Lidarr by MusicBrainz id (from lidarr_lookup) and search for their albums", l.add, sdk.NeedsApproval())
	sdk.Tool(p, "lidarr_queue", "What Lidarr is downloading: progress, time left, and why an item is stuck", l.queue)
	sdk.Tool(p, "lidarr_calendar", "Albums of the artists Lidarr monitors that are released in the coming days", l.calendar)
	return p
}
