package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
	"github.com/mmcpd/mmcpd/plugins/internal/arr"
)

// How many items the model sees at most.
const (
	indexersSize = 20
	healthSize   = 10
	resultsSize  = 20
)

// searchLimit is the page asked of each indexer: what Prowlarr's own search
// page asks. Without it Prowlarr passes 0 on, which some indexers take
// literally.
const searchLimit = "100"

// timeFormat is how the tools show an instant, in the plugin's zone.
const timeFormat = "Mon 2006-01-02 15:04"

type prowlarr struct {
	c   *arr.Client
	env arr.Env
}

// indexer is an IndexerResource, as far as these tools read it. Its fields
// (the indexer's settings: passkeys, cookies, API keys) are never read.
type indexer struct {
	ID       int    `json:"id"`
	Name     string `json:"name"`
	Enable   bool   `json:"enable"`
	Protocol string `json:"protocol"`
	Privacy  string `json:"privacy"`
}

// indexerStatus is an IndexerStatusResource: Prowlarr lists one for each
// indexer it leaves out after failures.
type indexerStatus struct {
	IndexerID         int       `json:"indexerId"`
	DisabledTill      time.Time `json:"disabledTill"`
	MostRecentFailure time.Time `json:"mostRecentFailure"`
	InitialFailure    time.Time `json:"initialFailure"`
}

// healthCheck is a HealthResource: a problem Prowlarr found with itself,
// e.g. "Indexers unavailable due to failures: NZBgeek".
type healthCheck struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Indexer states, worst first: the order the model reads them in.
const (
	stateFailing  = "failing"  // enabled, but left out after failures
	stateOK       = "ok"       // enabled and not failing
	stateDisabled = "disabled" // turned off by the user
)

var stateRank = map[string]int{stateFailing: 0, stateOK: 1, stateDisabled: 2}

type indexerState struct {
	ID            int    `json:"id"`
	Name          string `json:"name"`
	Protocol      string `json:"protocol"`
	Privacy       string `json:"privacy,omitempty"`
	Status        string `json:"status"`
	DisabledUntil string `json:"disabled_until,omitempty"`
	FailingSince  string `json:"failing_since,omitempty"`
	LastFailure   string `json:"last_failure,omitempty"`
}

type indexerReport struct {
	Summary string `json:"summary"`
	arr.List[indexerState]
	Health []string `json:"health,omitempty"`
}

func (p *prowlarr) indexers(ctx context.Context, _ arr.NoArgs) (indexerReport, error) {
	var all []indexer
	if err := p.c.Get(ctx, "/indexer", nil, &all); err != nil {
		return indexerReport{}, err
	}
	var statuses []indexerStatus
	if err := p.c.Get(ctx, "/indexerstatus", nil, &statuses); err != nil {
		return indexerReport{}, err
	}
	// The statuses say when, the health checks say which and how long: the
	// API keeps no reason for a failure beyond them (the log has it).
	var checks []healthCheck
	if err := p.c.Get(ctx, "/health", nil, &checks); err != nil {
		return indexerReport{}, err
	}
	byIndexer := make(map[int]indexerStatus, len(statuses))
	for _, s := range statuses {
		byIndexer[s.IndexerID] = s
	}
	now := p.env.Now()
	counts := map[string]int{}
	out := make([]indexerState, len(all))
	for i, ix := range all {
		st := indexerState{ID: ix.ID, Name: ix.Name, Protocol: ix.Protocol, Privacy: ix.Privacy, Status: stateOK}
		s, hasStatus := byIndexer[ix.ID]
		switch {
		case !ix.Enable:
			st.Status = stateDisabled
		case hasStatus:
			// A status whose time is up is an indexer on trial again: not
			// failing, though its last failure is still worth knowing.
			if s.DisabledTill.After(now) {
				st.Status = stateFailing
				st.DisabledUntil, st.FailingSince = p.when(s.DisabledTill), p.when(s.InitialFailure)
			}
			st.LastFailure = p.when(s.MostRecentFailure)
		}
		counts[st.Status]++
		out[i] = st
	}
	slices.SortStableFunc(out, func(a, b indexerState) int { return cmp.Compare(stateRank[a.Status], stateRank[b.Status]) })
	// Prowlarr lists only the checks that found something.
	health := make([]string, min(healthSize, len(checks)))
	for i := range health {
		health[i] = checks[i].Type + ": " + httpapi.Text(checks[i].Message, 300)
	}
	return indexerReport{
		Summary: fmt.Sprintf("%d indexers: %d ok, %d failing, %d disabled", len(all), counts[stateOK], counts[stateFailing], counts[stateDisabled]),
		List:    arr.Bounded(out, indexersSize, 0),
		Health:  health,
	}, nil
}

// when is an instant in the plugin's zone; "" when unknown.
func (p *prowlarr) when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.In(p.env.Zone).Format(timeFormat)
}

type searchArgs struct {
	Query      string `json:"query" jsonschema:"minLength=1,maxLength=300,description=What to search for: words of the title and maybe the year or season (S02)"`
	Type       string `json:"type,omitempty" jsonschema:"enum=search,enum=movie,enum=tvsearch,enum=music,default=search,description=Kind of search: search (anything) or movie or tvsearch or music"`
	IndexerIDs []int  `json:"indexer_ids,omitempty" jsonschema:"maxItems=50,minimum=-2,description=Only these indexers (ids from prowlarr_indexers); -1 is every usenet indexer and -2 every torrent one; omit it for all enabled indexers"`
	Categories []int  `json:"categories,omitempty" jsonschema:"maxItems=20,minimum=1,description=Only these Newznab categories e.g. 2000 movies or 5000 TV or 3000 audio or 7000 books; omit it for all"`
}

// release is a ReleaseResource, as far as the search reads it. Its links
// (downloadUrl, magnetUrl, infoUrl, guid) are never read: Prowlarr's
// download links carry its own API key, and a tracker's link its passkey.
type release struct {
	Title      string  `json:"title"`
	Indexer    string  `json:"indexer"`
	Size       float64 `json:"size"`
	Seeders    *int    `json:"seeders"`  // torrents only
	Leechers   *int    `json:"leechers"` // torrents only
	Grabs      *int    `json:"grabs"`
	Age        int     `json:"age"` // days
	AgeHours   float64 `json:"ageHours"`
	AgeMinutes float64 `json:"ageMinutes"`
	Protocol   string  `json:"protocol"`
	Categories []struct {
		Name string `json:"name"`
	} `json:"categories"`
}

type result struct {
	Title    string `json:"title"`
	Indexer  string `json:"indexer"`
	Size     string `json:"size,omitempty"`
	Seeders  *int   `json:"seeders,omitempty"`
	Leechers *int   `json:"leechers,omitempty"`
	Grabs    *int   `json:"grabs,omitempty"`
	Age      string `json:"age"`
	Protocol string `json:"protocol"`
	Category string `json:"category,omitempty"`
}

func (p *prowlarr) search(ctx context.Context, a searchArgs) (arr.List[result], error) {
	query := url.Values{"query": {a.Query}, "type": {cmp.Or(a.Type, "search")}, "limit": {searchLimit}}
	for _, id := range a.IndexerIDs {
		query.Add("indexerIds", strconv.Itoa(id))
	}
	for _, c := range a.Categories {
		query.Add("categories", strconv.Itoa(c))
	}
	var found []release
	err := p.c.Get(ctx, "/search", query, &found)
	// Prowlarr refuses a search none of whose indexers it may ask.
	if errors.Is(err, httpapi.ErrBadResponse) && strings.Contains(err.Error(), "indexers being unavailable") {
		return arr.List[result]{}, errors.New("Prowlarr could not search: every indexer asked is disabled or failing; prowlarr_indexers says which")
	}
	if err != nil {
		return arr.List[result]{}, err
	}
	// The best first: the most seeders (usenet has none), then the most
	// grabs; otherwise as Prowlarr sent them.
	slices.SortStableFunc(found, func(a, b release) int {
		return cmp.Or(cmp.Compare(count(b.Seeders), count(a.Seeders)), cmp.Compare(count(b.Grabs), count(a.Grabs)))
	})
	out := make([]result, min(resultsSize, len(found)))
	for i := range out {
		r := found[i]
		out[i] = result{Title: httpapi.Text(r.Title, 200), Indexer: r.Indexer, Size: arr.Bytes(r.Size),
			Seeders: r.Seeders, Leechers: r.Leechers, Grabs: r.Grabs, Age: age(r), Protocol: r.Protocol}
		if len(r.Categories) > 0 {
			out[i].Category = r.Categories[0].Name
		}
	}
	return arr.Bounded(out, resultsSize, len(found)), nil
}

// count is a count the indexer may not know, unknown below any known one.
func count(n *int) int {
	if n == nil {
		return -1
	}
	return *n
}

// age is how old a release is, in the largest unit that is not rounded to
// nothing: "45 minutes", "5 hours", "12 days".
func age(r release) string {
	switch {
	case r.AgeMinutes < 60:
		return plural(int(max(r.AgeMinutes, 0)), "minute")
	case r.AgeHours < 48:
		return plural(int(r.AgeHours), "hour")
	}
	return plural(r.Age, "day")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}
