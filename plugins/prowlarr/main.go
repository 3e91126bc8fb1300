// Command mmcp-plugin-prowlarr says how Prowlarr's indexers are doing and
// searches them. It only reads: grabbing a release is left to Sonarr, Radarr,
// Lidarr or the user.
package main

import (
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
	"github.com/mmcpd/mmcpd/plugins/internal/arr"
)

func main() {
	env := arr.DefaultEnv()
	// A search waits for every indexer it asks, and some are slow: give it
	// most of the daemon's 30 s per call rather than the usual 15 s.
	env.Timeout = 25 * time.Second
	newPlugin(env).Serve()
}

func newPlugin(env arr.Env) *sdk.Plugin {
	p, c := arr.NewPlugin("Prowlarr", env)
	pr := &prowlarr{c: c, env: env}
	sdk.Tool(p, "prowlarr_indexers", "Prowlarr's indexers and their health: which are enabled, which are failing and until when Prowlarr leaves them out, and Prowlarr's own warnings", pr.indexers)
	sdk.Tool(p, "prowlarr_search", "Search Prowlarr's indexers for releases without downloading anything: title, indexer, size, seeders, age and protocol, the most seeded first", pr.search)
	return p
}
