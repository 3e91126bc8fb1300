// Package human writes what the media plugins report the way a person reads
// it: a download client's sizes, rates, durations and percentages as its own
// interface shows them, and who is watching what on a media server.
package human

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Units of Size: Transmission counts in powers of 1000 (kB, MB), qBittorrent
// in powers of 1024 (KiB, MiB); each plugin uses its client's, so that the
// numbers match what the user sees there.
var (
	Decimal = Units{Base: 1000, Names: []string{"kB", "MB", "GB", "TB", "PB"}}
	Binary  = Units{Base: 1024, Names: []string{"KiB", "MiB", "GiB", "TiB", "PiB"}}
)

// Units is a base and the names of its powers, from the first.
type Units struct {
	Base  int64
	Names []string
}

// Size writes n bytes with one decimal in the largest unit that keeps the
// figure under the base: "950 B", "1.5 MB", "4.0 GiB".
func (u Units) Size(n int64) string {
	if n < u.Base {
		return strconv.FormatInt(n, 10) + " B"
	}
	base := float64(u.Base)
	v := float64(n) / base
	i := 0
	// Rounded to one decimal, 999.96 would read 1000.0 kB.
	for v >= base-0.05 && i < len(u.Names)-1 {
		v /= base
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + u.Names[i]
}

// Rate writes a speed in bytes per second.
func (u Units) Rate(n int64) string { return u.Size(n) + "/s" }

// Percent is a fraction done in percent, one decimal, rounded down so that
// an unfinished download never reads 100.
func Percent(done float64) float64 {
	return math.Floor(done*1000+1e-6) / 10
}

// Duration writes seconds as a person says them, to two units at most:
// "45s", "12m", "2h 5m", "3d 4h".
func Duration(s int64) string {
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return strconv.FormatInt(s/60, 10) + "m"
	case s < 86400:
		return join(s/3600, "h", s%3600/60, "m")
	}
	return join(s/86400, "d", s%86400/3600, "h")
}

// join writes "2h 5m", leaving out a zero second part: "2h".
func join(a int64, ua string, b int64, ub string) string {
	s := strconv.FormatInt(a, 10) + ua
	if b > 0 {
		s += " " + strconv.FormatInt(b, 10) + ub
	}
	return s
}

// maxWatching bounds Watching's line, which goes into every prompt.
const maxWatching = 3

// Watching is a media server's now-playing context line, one clause per
// session ("alice is watching Dune (2021) on Living Room TV, 42%"): the
// first three, then how many more; "nobody is watching" when there is none.
func Watching(clauses []string) string {
	if len(clauses) == 0 {
		return "nobody is watching"
	}
	line := strings.Join(clauses[:min(len(clauses), maxWatching)], "; ")
	if n := len(clauses) - maxWatching; n > 0 {
		line += "; and " + strconv.Itoa(n) + " more"
	}
	return line
}

// Downloads is what a download client is doing, counted for its context
// line.
type Downloads struct {
	Downloading, Queued, Seeding, Errors int
	Speed                                int64 // bytes per second, all downloads together
	Nearest                              int64 // seconds until the first download is done; -1 unknown
}

// Soonest records a download's seconds left, keeping the smallest known.
func (d *Downloads) Soonest(eta int64) {
	if eta >= 0 && (d.Nearest < 0 || eta < d.Nearest) {
		d.Nearest = eta
	}
}

// Line words the counts in u, e.g. "2 downloading at 3.1 MB/s, nearest
// done in 12m, 1 queued; 5 seeding; 1 with errors".
func (d Downloads) Line(u Units) string {
	line := "nothing downloading"
	if d.Downloading > 0 {
		line = fmt.Sprintf("%d downloading at %s", d.Downloading, u.Rate(d.Speed))
		if d.Nearest >= 0 {
			line += ", nearest done in " + Duration(d.Nearest)
		}
	}
	if d.Queued > 0 {
		line += fmt.Sprintf(", %d queued", d.Queued)
	}
	if d.Seeding > 0 {
		line += fmt.Sprintf("; %d seeding", d.Seeding)
	}
	if d.Errors > 0 {
		line += fmt.Sprintf("; %d with errors", d.Errors)
	}
	return line
}
