// Command mmcp-plugin-transmission lets the model see and steer the torrents
// of a Transmission daemon through its RPC interface.
package main

import (
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

const version = "1.0.0"

// The settings' variable names, for messages that say which one to check.
const (
	envURL  = "MMCP_PLUGIN_TRANSMISSION_URL"
	envUser = "MMCP_PLUGIN_TRANSMISSION_USERNAME"
	envPass = "MMCP_PLUGIN_TRANSMISSION_PASSWORD"
)

type settings struct {
	URL      string `default:"http://127.0.0.1:9091/transmission/rpc" desc:"Transmission's RPC URL"`
	Username string `desc:"RPC user name (rpc-username in Transmission's settings.json); empty when authentication is off"`
	Password string `secret:"true" desc:"RPC password (rpc-password in Transmission's settings.json)"`
}

func main() {
	newPlugin(15 * time.Second).Serve()
}

// newPlugin reads the MMCP_PLUGIN_TRANSMISSION_* settings and declares the
// tools; timeout bounds each HTTP request to Transmission.
func newPlugin(timeout time.Duration) *sdk.Plugin {
	p := sdk.New("transmission", version)
	var cfg settings
	p.Settings(&cfg)
	rpc, err := newRPCClient(cfg.URL, cfg.Username, cfg.Password, timeout)
	if err != nil {
		p.SettingProblem(err.Error()) // standby, with the reason, in the daemon's listings
	}
	t := &transmission{rpc: rpc, err: err}

	sdk.Tool(p, "transmission_list", "List Transmission's torrents with progress, speed, ETA and status", t.list)
	sdk.Tool(p, "transmission_add", "Add a torrent to Transmission from a magnet link or the http(s) URL of a .torrent file", t.add, sdk.Changes())
	sdk.Tool(p, "transmission_pause", "Pause (stop) torrents in Transmission", t.pause, sdk.Changes())
	sdk.Tool(p, "transmission_resume", "Resume (start) paused torrents in Transmission", t.resume, sdk.Changes())
	sdk.Tool(p, "transmission_remove", "Remove torrents from Transmission and optionally delete their downloaded data", t.remove, sdk.NeedsApproval())
	p.Context("downloads", "What Transmission is downloading and seeding right now", t.downloads)
	p.Health(t.health)
	return p
}
