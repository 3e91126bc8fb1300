package human

import "testing"

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		u    Units
		n    int64
		want string
	}{
		{Decimal, 0, "0 B"},
		{Decimal, 999, "999 B"},
		{Decimal, 1000, "1.0 kB"},
		{Decimal, 999_949, "999.9 kB"},
		{Decimal, 999_960, "1.0 MB"},
		{Decimal, 1_500_000, "1.5 MB"},
		{Decimal, 4_000_000_000, "4.0 GB"},
		{Binary, 1023, "1023 B"},
		{Binary, 1024, "1.0 KiB"},
		{Binary, 1536 << 10, "1.5 MiB"},
		{Binary, 4 << 30, "4.0 GiB"},
		{Binary, 1 << 62, "4096.0 PiB"},
	} {
		if got := tc.u.Size(tc.n); got != tc.want {
			t.Errorf("%v.Size(%d) = %q, want %q", tc.u.Names[0], tc.n, got, tc.want)
		}
	}
	if got := Binary.Rate(2048); got != "2.0 KiB/s" {
		t.Errorf("Rate = %q", got)
	}
}

func TestDuration(t *testing.T) {
	for s, want := range map[int64]string{0: "0s", 59: "59s", 60: "1m", 3599: "59m", 3600: "1h", 7500: "2h 5m", 86400: "1d", 277200: "3d 5h"} {
		if got := Duration(s); got != want {
			t.Errorf("Duration(%d) = %q, want %q", s, got, want)
		}
	}
}

func TestPercent(t *testing.T) {
	for done, want := range map[float64]float64{0: 0, 0.5: 50, 0.9999: 99.9, 0.123: 12.3, 1: 100} {
		if got := Percent(done); got != want {
			t.Errorf("Percent(%v) = %v, want %v", done, got, want)
		}
	}
}

func TestWatching(t *testing.T) {
	for _, tc := range []struct {
		clauses []string
		want    string
	}{
		{nil, "nobody is watching"},
		{[]string{"a"}, "a"},
		{[]string{"a", "b", "c"}, "a; b; c"},
		{[]string{"a", "b", "c", "d", "e"}, "a; b; c; and 2 more"},
	} {
		if got := Watching(tc.clauses); got != tc.want {
			t.Errorf("Watching(%q) = %q, want %q", tc.clauses, got, tc.want)
		}
	}
}

func TestDownloadsLine(t *testing.T) {
	var d Downloads
	d.Nearest = -1
	if got := d.Line(Decimal); got != "nothing downloading" {
		t.Errorf("idle: %q", got)
	}
	d = Downloads{Downloading: 2, Queued: 1, Seeding: 5, Errors: 1, Speed: 3_100_000, Nearest: -1}
	for _, eta := range []int64{-1, 900, 720, 3600} {
		d.Soonest(eta)
	}
	if got, want := d.Line(Decimal), "2 downloading at 3.1 MB/s, nearest done in 12m, 1 queued; 5 seeding; 1 with errors"; got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
}
