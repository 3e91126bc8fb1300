package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// commit is set at build time with -ldflags "-X main.commit=...": release
// and container builds have no .git for the Go toolchain to stamp.
var commit = ""

// versionLine is what "mmcpd version" prints: enough to tell from a bug
// report which source, toolchain and platform the binary came from.
func versionLine() string {
	rev, modified := commit, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev = s.Value
					if len(rev) > 12 {
						rev = rev[:12]
					}
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	if modified {
		rev += "-dirty"
	}
	return fmt.Sprintf("mmcpd %s (commit %s, %s, %s/%s)", buildVersion(), rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
