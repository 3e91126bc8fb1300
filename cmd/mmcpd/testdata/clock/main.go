// Command clock stands in for the bundled system plugin's "now" context
// provider in the cost benchmarks, on a simulated clock: a session's turns
// come minutes apart, so each turn sees a later time, but a benchmark runs
// them seconds apart and must see the same times on every run.
package main

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

// The session starts on a Saturday evening; each turn comes turnGap later.
var (
	start   = time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC)
	turnGap = 3 * time.Minute
)

func main() {
	var (
		mu    sync.Mutex
		turns int
	)
	daemon := os.Getenv("MMCP_DAEMON_VERSION")
	p := sdk.New("clock", "1.0.0")
	// The host asks once per turn.
	p.Context("now", "The current local time and the mmcpd version", func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		now := start.Add(time.Duration(turns) * turnGap)
		turns++
		// The system plugin's line format.
		line := "Current time: " + now.Format("Monday 2006-01-02 15:04 MST (UTC-07:00)")
		if daemon != "" {
			line += "; mmcpd version " + daemon
		}
		return line, nil
	})
	p.Serve()
}
