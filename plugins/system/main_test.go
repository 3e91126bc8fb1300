package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// A Saturday in November: Paris is on CET, UTC+01:00.
var instant = time.Date(2026, 11, 21, 13, 3, 0, 0, time.UTC)

func paris(t *testing.T) clock {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	return clock{now: func() time.Time { return instant }, zone: loc, name: "Europe/Paris"}
}

func server(t *testing.T, daemonVersion string) pluginpb.PluginServer {
	t.Helper()
	const key = "MMCP_DAEMON_VERSION"
	t.Setenv(key, daemonVersion)
	if daemonVersion == "" {
		os.Unsetenv(key)
	}
	return newPlugin(paris(t)).Server()
}

func call(t *testing.T, s pluginpb.PluginServer, args string) *pluginpb.CallResponse {
	t.Helper()
	r, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: "system_time", Args: []byte(args)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDescribe(t *testing.T) {
	d, err := server(t, "").Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "system" || d.Version != version || len(d.SettingProblems) != 0 {
		t.Errorf("describe: %v", d)
	}
	if len(d.Tools) != 1 || d.Tools[0].Name != "system_time" || d.Tools[0].NeedsApproval ||
		!strings.Contains(string(d.Tools[0].ArgsSchema), `"timezone"`) || strings.Contains(string(d.Tools[0].ArgsSchema), `"required"`) {
		t.Errorf("tools: %v", d.Tools)
	}
	if len(d.Settings) != 0 {
		t.Errorf("settings: %v", d.Settings)
	}
	if len(d.Contexts) != 1 || d.Contexts[0].Key != "now" {
		t.Errorf("contexts: %v", d.Contexts)
	}
}

func TestSystemTime(t *testing.T) {
	s := server(t, "")
	cases := map[string]timeResult{
		`{}`:                                {Time: "2026-11-21T14:03:00+01:00", Date: "2026-11-21", Weekday: "Saturday", Timezone: "Europe/Paris", UTCOffset: "+01:00", Unix: instant.Unix()},
		`{"timezone":"America/New_York"}`:   {Time: "2026-11-21T08:03:00-05:00", Date: "2026-11-21", Weekday: "Saturday", Timezone: "America/New_York", UTCOffset: "-05:00", Unix: instant.Unix()},
		`{"timezone":"Pacific/Kiritimati"}`: {Time: "2026-11-22T03:03:00+14:00", Date: "2026-11-22", Weekday: "Sunday", Timezone: "Pacific/Kiritimati", UTCOffset: "+14:00", Unix: instant.Unix()},
		`{"timezone":"UTC"}`:                {Time: "2026-11-21T13:03:00Z", Date: "2026-11-21", Weekday: "Saturday", Timezone: "UTC", UTCOffset: "+00:00", Unix: instant.Unix()},
	}
	for args, want := range cases {
		r := call(t, s, args)
		var got timeResult
		if err := json.Unmarshal(r.Result, &got); err != nil || r.Error != "" || got != want {
			t.Errorf("%s: %s %q (%v)\nwant %+v", args, r.Result, r.Error, err, want)
		}
	}
}

func TestSystemTimeBadArgs(t *testing.T) {
	s := server(t, "")
	cases := map[string]string{
		`{"timezone":"Mars/Olympus"}`:     `unknown time zone "Mars/Olympus": use an IANA name such as Europe/Paris`,
		`{"timezone":"../../etc/passwd"}`: `unknown time zone "../../etc/passwd"`,
		`{"timezone":7}`:                  "invalid arguments: args.timezone: expected string, got number 7",
		`{"zone":"UTC"}`:                  "invalid arguments: args.zone: unknown field",
	}
	for args, want := range cases {
		if r := call(t, s, args); !strings.Contains(r.Error, want) || len(r.Result) > 0 {
			t.Errorf("%s: %q, want %q", args, r.Error, want)
		}
	}
}

func TestNowContext(t *testing.T) {
	for daemonVersion, want := range map[string]string{
		"1.2.3": "Current time: Saturday 2026-11-21 14:03 CET (UTC+01:00); mmcpd version 1.2.3",
		"":      "Current time: Saturday 2026-11-21 14:03 CET (UTC+01:00)",
	} {
		c, err := server(t, daemonVersion).Context(context.Background(), &pluginpb.ContextRequest{Key: "now"})
		if err != nil || c.Text != want {
			t.Errorf("now with version %q: %v, %v\nwant %q", daemonVersion, c, err, want)
		}
	}
}

func TestLocalZoneName(t *testing.T) {
	for tz, want := range map[string]string{
		"Europe/Paris":                        "Europe/Paris",
		":Asia/Tokyo":                         "Asia/Tokyo",
		"/usr/share/zoneinfo/America/Chicago": "America/Chicago",
		"":                                    "UTC",
		"Not/AZone":                           "UTC",
	} {
		t.Setenv("TZ", tz)
		if got := localZoneName(); got != want {
			t.Errorf("TZ=%q: %q, want %q", tz, got, want)
		}
	}
}
