package arr

import (
	"testing"
	"time"
)

func TestTimeLeft(t *testing.T) {
	for in, want := range map[string]string{
		"00:12:30":           "12m30s",
		"1.02:03:04.5000000": "26h3m5s",
		"00:00:00":           "",
		"":                   "",
		"soon":               "soon",
		"aa:bb:cc":           "aa:bb:cc",
		"x.01:00:00":         "x.01:00:00",
	} {
		if got := timeLeft(in); got != want {
			t.Errorf("timeLeft(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBytes(t *testing.T) {
	for in, want := range map[float64]string{0: "", 512: "512 B", 1536: "1.5 KiB", 3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB", 5 << 50: "5120.0 TiB"} {
		if got := Bytes(in); got != want {
			t.Errorf("Bytes(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestBounded(t *testing.T) {
	if b := Bounded([]int(nil), 8, 0); b.Items == nil || len(b.Items) != 0 || b.More != 0 {
		t.Errorf("empty: %+v", b)
	}
	if b := Bounded([]int{1, 2, 3}, 2, 0); len(b.Items) != 2 || b.More != 1 {
		t.Errorf("cut: %+v", b)
	}
	if b := Bounded([]int{1, 2, 3}, 20, 57); len(b.Items) != 3 || b.More != 54 {
		t.Errorf("page: %+v", b)
	}
}

// The window runs from local midnight to local midnight, also across a
// change to summer time.
func TestWindow(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	e := Env{Zone: paris, Now: func() time.Time { return time.Date(2027, 3, 27, 22, 30, 0, 0, time.UTC) }} // 23:30 CET
	start, end := e.Window(2)
	if got := start.UTC().Format(time.RFC3339) + " " + end.UTC().Format(time.RFC3339); got != "2027-03-26T23:00:00Z 2027-03-28T22:00:00Z" {
		t.Errorf("window: %s", got)
	}
	if start, end := e.Window(0); end.Sub(start) != 7*24*time.Hour-time.Hour {
		t.Errorf("default window: %v .. %v", start, end)
	}
}

func TestAPI(t *testing.T) {
	for service, want := range map[string]string{
		"Sonarr": "/api/v3", "Radarr": "/api/v3", "Lidarr": "/api/v1", "Prowlarr": "/api/v1",
	} {
		if got := API(service); got != want {
			t.Errorf("API(%q) = %q, want %q", service, got, want)
		}
	}
}
