// Command mmcp-plugin-qbittorrent lets the model see and steer the torrents
// of a qBittorrent client through its Web API (v2, qBittorrent 4.1 and
// later).
package main

import (
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

const version = "1.0.0"

// The settings' variable names, for messages that say which one to check.
const (
	envURL  = "MMCP_PLUGIN_QBITTORRENT_URL"
	envUser = "MMCP_PLUGIN_QBITTORRENT_USERNAME"
	envPass = "MMCP_PLUGIN_QBITTORRENT_PASSWORD"
)

type settings struct {
	URL      string `default:"http://127.0.0.1:8080" desc:"qBittorrent's WebUI address, as opened in a browser (with the base path of a reverse proxy if any)"`
	Username string `default:"admin" desc:"WebUI user name (Options > Web UI > Authentication)"`
	Password string `secret:"true" desc:"WebUI password; empty when qBittorrent lets this machine in without a login (bypass authentication for localhost or whitelisted subnets)"`
}

func main() {
	newPlugin(15 * time.Second).Serve()
}

// newPlugin reads the MMCP_PLUGIN_QBITTORRENT_* settings and declares the
// tools; timeout bounds each HTTP request to qBittorrent.
func newPlugin(timeout time.Duration) *sdk.Plugin {
	p := sdk.New("qbittorrent", version)
	var cfg settings
	p.Settings(&cfg)
	c, err := newClient(cfg.URL, cfg.Username, cfg.Password, timeout)
	if err != nil {
		p.SettingProblem(err.Error()) // standby, with the reason, in the daemon's listings
	}
	q := &qbittorrent{c: c, err: err}

	sdk.Tool(p, "qbittorrent_list", "List qBittorrent's torrents with state, progress, speeds, ETA, size and category", q.list)
	// Adding needs no approval, as transmission_add: the user asked for that
	// exact torrent, and qbittorrent_remove (which does) takes it back.
	sdk.Tool(p, "qbittorrent_add", "Add a torrent to qBittorrent from a magnet link or the http(s) URL of a .torrent file", q.add, sdk.Changes())
	sdk.Tool(p, "qbittorrent_pause", "Pause torrents in qBittorrent", q.pause, sdk.Changes())
	sdk.Tool(p, "qbittorrent_resume", "Resume paused torrents in qBittorrent", q.resume, sdk.Changes())
	sdk.Tool(p, "qbittorrent_remove", "Remove torrents from qBittorrent and optionally delete their downloaded files", q.remove, sdk.NeedsApproval())
	sdk.Tool(p, "qbittorrent_transfer", "qBittorrent's global transfer state: download and upload speed, data moved this session, speed limits and connection status", q.transfer)
	p.Context("downloads", "What qBittorrent is downloading and seeding right now", q.downloads)
	p.Health(q.health)
	return p
}
