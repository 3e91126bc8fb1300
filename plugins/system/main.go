// Command mmcp-plugin-system is the bundled plugin that tells the model what
// time it is, anywhere, and which mmcpd it runs in.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
	_ "time/tzdata" // zone names must work in a bare container too

	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

const version = "1.0.0"

type timeArgs struct {
	Timezone string `json:"timezone,omitempty" jsonschema:"maxLength=64,description=IANA time zone name such as Europe/Paris; omit it for the local zone"`
}

type timeResult struct {
	Time      string `json:"time"`
	Date      string `json:"date"`
	Weekday   string `json:"weekday"`
	Timezone  string `json:"timezone"`
	UTCOffset string `json:"utc_offset"`
	Unix      int64  `json:"unix"`
}

// clock is where "now" and "here" come from, so tests can fix both.
type clock struct {
	now  func() time.Time
	zone *time.Location
	name string // the zone's IANA name, for the result
}

func main() {
	newPlugin(clock{now: time.Now, zone: time.Local, name: localZoneName()}).Serve()
}

func newPlugin(c clock) *sdk.Plugin {
	p := sdk.New("system", version)
	// The host passes every plugin the daemon's version; it is not a setting.
	daemon := os.Getenv("MMCP_DAEMON_VERSION")
	sdk.Tool(p, "system_time", "The current date, time and weekday, here or in a given time zone",
		func(_ context.Context, a timeArgs) (timeResult, error) { return timeIn(c, a.Timezone) })
	p.Context("now", "The current local time and the mmcpd version",
		func(context.Context) (string, error) { return nowLine(c.now().In(c.zone), daemon), nil })
	return p
}

// timeIn is the current time in zone, or in the local zone when zone is "".
func timeIn(c clock, zone string) (timeResult, error) {
	loc, name := c.zone, c.name
	if zone != "" {
		var err error
		if loc, err = time.LoadLocation(zone); err != nil {
			return timeResult{}, fmt.Errorf("unknown time zone %q: use an IANA name such as Europe/Paris or America/New_York", zone)
		}
		name = zone
	}
	t := c.now().In(loc)
	return timeResult{
		Time:      t.Format(time.RFC3339),
		Date:      t.Format(time.DateOnly),
		Weekday:   t.Weekday().String(),
		Timezone:  name,
		UTCOffset: t.Format("-07:00"),
		Unix:      t.Unix(),
	}, nil
}

// nowLine is the context line, e.g. "Current time: Saturday 2026-11-21 14:03
// CET (UTC+01:00); mmcpd version 1.2.3".
func nowLine(t time.Time, daemonVersion string) string {
	line := "Current time: " + t.Format("Monday 2006-01-02 15:04 MST (UTC-07:00)")
	if daemonVersion != "" {
		line += "; mmcpd version " + daemonVersion
	}
	return line
}

// localZoneName names the zone Go took as local, by Go's own rules: TZ when
// set, otherwise where /etc/localtime points.
func localZoneName() string {
	tz, set := os.LookupEnv("TZ")
	tz = strings.TrimPrefix(tz, ":")
	switch {
	case set && tz == "":
		return "UTC"
	case set && !strings.HasPrefix(tz, "/"):
		if _, err := time.LoadLocation(tz); err != nil {
			return "UTC" // Go falls back to UTC for a zone it cannot load
		}
		return tz
	case !set:
		tz, _ = os.Readlink("/etc/localtime")
	}
	if i := strings.LastIndex(tz, "zoneinfo/"); i >= 0 {
		return tz[i+len("zoneinfo/"):]
	}
	return time.Local.String()
}
