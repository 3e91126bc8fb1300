package schema

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Argument structs of a realistic media-daemon tool set: strings with enums
// and patterns, bounded integers, arrays, nested objects.
type benchSearch struct {
	Query    string `json:"query" jsonschema:"minLength=1,maxLength=200,description=Title or words to look for"`
	Kind     string `json:"kind,omitempty" jsonschema:"enum=movie,enum=tv,enum=person,default=movie"`
	Year     int    `json:"year,omitempty" jsonschema:"minimum=1870,maximum=2100,description=Release year"`
	Page     int    `json:"page,omitempty" jsonschema:"minimum=1,maximum=500,default=1"`
	Language string `json:"language,omitempty" jsonschema:"pattern=^[a-z]{2}(-[A-Z]{2})?$"`
}

type benchSubtitle struct {
	Language string `json:"language" jsonschema:"pattern=^[a-z]{2}$"`
	Forced   bool   `json:"forced,omitempty"`
}

type benchDownloadOptions struct {
	MaxSizeGB int    `json:"max_size_gb,omitempty" jsonschema:"minimum=1,maximum=200"`
	Category  string `json:"category" jsonschema:"enum=movies,enum=series,enum=music,enum=other"`
	Seed      bool   `json:"seed,omitempty"`
	Priority  int    `json:"priority,omitempty" jsonschema:"minimum=1,maximum=5,default=3"`
}

type benchDownload struct {
	Title     string               `json:"title" jsonschema:"minLength=1,description=What to download"`
	Quality   string               `json:"quality" jsonschema:"enum=720p,enum=1080p,enum=2160p"`
	Sources   []string             `json:"sources" jsonschema:"minItems=1,maxItems=10"`
	Subtitles []benchSubtitle      `json:"subtitles,omitempty" jsonschema:"maxItems=5"`
	Options   benchDownloadOptions `json:"options"`
	Notes     string               `json:"notes,omitempty" jsonschema:"maxLength=500"`
}

type benchLibraryFilter struct {
	Genres    []string `json:"genres,omitempty" jsonschema:"enum=action,enum=comedy,enum=drama,enum=horror,enum=scifi,enum=documentary"`
	MinRating float64  `json:"min_rating,omitempty" jsonschema:"minimum=0,maximum=10"`
	Watched   bool     `json:"watched,omitempty"`
}

type benchLibrary struct {
	Filter benchLibraryFilter `json:"filter"`
	Sort   string             `json:"sort,omitempty" jsonschema:"enum=title,enum=added,enum=rating,enum=year"`
	Limit  int                `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100,default=20"`
	Offset int                `json:"offset,omitempty" jsonschema:"minimum=0"`
}

type benchNotify struct {
	Channel  string   `json:"channel" jsonschema:"enum=email,enum=push,enum=chat"`
	Message  string   `json:"message" jsonschema:"minLength=1,maxLength=2000"`
	Priority int      `json:"priority,omitempty" jsonschema:"minimum=1,maximum=5"`
	Tags     []string `json:"tags,omitempty" jsonschema:"maxItems=8"`
}

type benchScheduleItem struct {
	ID   int    `json:"id" jsonschema:"minimum=1"`
	Note string `json:"note,omitempty"`
}

type benchSchedule struct {
	When   string              `json:"when" jsonschema:"format=date-time"`
	Repeat string              `json:"repeat,omitempty" jsonschema:"enum=never,enum=daily,enum=weekly"`
	Items  []benchScheduleItem `json:"items" jsonschema:"minItems=1"`
}

// benchTools returns 20 tools over the structs above, as plugins would
// declare them.
func benchTools(tb testing.TB) []Tool {
	tb.Helper()
	kinds := []struct {
		v     any
		names []string
	}{
		{benchSearch{}, []string{"search_movies", "search_tv", "search_people", "search_music"}},
		{benchDownload{}, []string{"download_torrent", "download_usenet", "download_direct", "download_stream"}},
		{benchLibrary{}, []string{"library_movies", "library_series", "library_music", "library_recent"}},
		{benchNotify{}, []string{"notify_user", "notify_admin", "notify_family", "notify_log"}},
		{benchSchedule{}, []string{"schedule_scan", "schedule_backup", "schedule_cleanup", "schedule_report"}},
	}
	var tools []Tool
	for _, k := range kinds {
		raw, err := Reflect(k.v)
		if err != nil {
			tb.Fatal(err)
		}
		for _, n := range k.names {
			tools = append(tools, Tool{Name: n, Description: "Tool " + strings.ReplaceAll(n, "_", " ") + ": does what its name says.", Schema: raw})
		}
	}
	if len(tools) != 20 {
		tb.Fatalf("%d tools", len(tools))
	}
	return tools
}

// benchReply is a valid reply of about 1 KB for download_usenet.
var benchReply = func() string {
	args := map[string]any{
		"title":   "The Lord of the Rings: The Fellowship of the Ring (Extended Edition)",
		"quality": "2160p",
		"sources": []string{
			"nzb://indexer-one.example/api/details/8f14e45fceea167a5a36dedd4bea2543",
			"nzb://indexer-two.example/api/details/c9f0f895fb98ab9159f51fd0297e236d",
			"nzb://indexer-three.example/api/details/45c48cce2e2d7fbdea1afc51c7c6ad26",
			"nzb://indexer-four.example/api/details/d3d9446802a44259755d38e6d163e820",
		},
		"subtitles": []map[string]any{{"language": "en"}, {"language": "fr", "forced": true}, {"language": "de"}},
		"options":   map[string]any{"max_size_gb": 80, "category": "movies", "seed": false, "priority": 4},
		"notes":     "The user asked for the extended edition in the best quality available, with English, French (forced) and German subtitles. Prefer the first source; the others are fallbacks from other indexers.",
	}
	b, _ := json.Marshal(map[string]any{
		"thought": "The user wants the extended edition in 4K; the search found it on several indexers, so I queue the download with the usual options.",
		"action":  "download_usenet",
		"args":    args,
	})
	return string(b)
}()

// benchFinal is a valid final_response of about 1 KB. It is the last branch of
// the union, which matters to whole-oneOf validation: santhosh v6 collects full
// errors for every branch before the one that matches, and only a yes/no
// for those after it.
var benchFinal = func() string {
	b, _ := json.Marshal(map[string]any{
		"thought": "The download is queued and the library scan is scheduled, so I can answer now.",
		"action":  FinalAction,
		"args": map[string]any{"answer": strings.Repeat("The Fellowship of the Ring (extended, 4K) is queued on the usenet downloader with English, French and German subtitles. ", 7) +
			"I will let you know when it is in your library."},
	})
	return string(b)
}()

// benchReplies are the replies the Decode and whole-oneOf benchmarks measure:
// a tool call in branch 3 of 21, and a final answer in branch 20.
var benchReplies = []struct{ name, reply string }{
	{"tool_call", benchReply},
	{"final_response", benchFinal},
}

func benchUnion(b *testing.B) *Union {
	b.Helper()
	u, err := NewUnion(benchTools(b))
	if err != nil {
		b.Fatal(err)
	}
	return u
}

func TestBenchFixtures(t *testing.T) {
	u, err := NewUnion(benchTools(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Index(u.Actions(), "download_usenet"); got != 3 {
		t.Errorf("download_usenet is branch %d", got)
	}
	full := compileRaw(t, u.Schema())
	for _, r := range benchReplies {
		if n := len(r.reply); n < 900 || n > 1200 {
			t.Errorf("%s reply is %d bytes, want about 1 KB", r.name, n)
		}
		if _, err := u.Decode(r.reply); err != nil {
			t.Errorf("Decode(%s) = %v", r.name, err)
		}
		// Both benchmarks must measure an accepted reply.
		if err := validate(t, full, r.reply); err != nil {
			t.Errorf("the whole union refuses the %s reply: %v", r.name, err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	u := benchUnion(b)
	for _, r := range benchReplies {
		b.Run(r.name, func(b *testing.B) {
			b.SetBytes(int64(len(r.reply)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := u.Decode(r.reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeInvalid measures a refused reply: the explanation path.
func BenchmarkDecodeInvalid(b *testing.B) {
	u := benchUnion(b)
	reply := strings.Replace(benchReply, `"quality":"2160p"`, `"quality":"4k"`, 1)
	reply = strings.Replace(reply, `"priority":4`, `"priority":9`, 1)
	b.SetBytes(int64(len(reply)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := u.Decode(reply); err == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkValidateWholeOneOf is the alternative Decode avoids: validating the
// reply against the whole union, compiled once, parsing it each time as Decode
// does.
func BenchmarkValidateWholeOneOf(b *testing.B) {
	u := benchUnion(b)
	s := compileRaw(b, u.Schema())
	for _, r := range benchReplies {
		b.Run(r.name, func(b *testing.B) {
			b.SetBytes(int64(len(r.reply)))
			b.ReportAllocs()
			for b.Loop() {
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(r.reply))
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Validate(inst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkValidateWholeOneOfInvalid is the same refused reply as
// BenchmarkDecodeInvalid against the whole union: every branch's errors.
func BenchmarkValidateWholeOneOfInvalid(b *testing.B) {
	u := benchUnion(b)
	s := compileRaw(b, u.Schema())
	reply := strings.Replace(benchReply, `"quality":"2160p"`, `"quality":"4k"`, 1)
	reply = strings.Replace(reply, `"priority":4`, `"priority":9`, 1)
	b.SetBytes(int64(len(reply)))
	b.ReportAllocs()
	for b.Loop() {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(reply))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Validate(inst); err == nil {
			b.Fatal("accepted")
		}
	}
}

func BenchmarkNewUnion20(b *testing.B) {
	tools := benchTools(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewUnion(tools); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCacheHit20(b *testing.B) {
	tools := benchTools(b)
	var c Cache
	want, err := c.Union(tools)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if u, _ := c.Union(tools); u != want {
			b.Fatal("cache miss")
		}
	}
}

func BenchmarkExtract(b *testing.B) {
	for _, bc := range []struct{ name, reply string }{
		{"plain", benchReply},
		{"fenced", "Here you go:\n```json\n" + benchReply + "\n```\nDone."},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.reply)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := extract(bc.reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
