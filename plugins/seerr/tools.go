package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

// searchLimit is the most films and series a search lists; more counts the
// others.
const searchLimit = 10

type searchArgs struct {
	Query string `json:"query" jsonschema:"minLength=1,maxLength=200,description=Title of the film or series"`
}

type searchResult struct {
	Items []found `json:"items"`
	More  int     `json:"more,omitempty"`
}

type found struct {
	Title    string `json:"title"`
	Type     string `json:"type"` // movie or tv, as seerr_request takes it
	Year     int    `json:"year,omitempty"`
	TMDBID   int    `json:"tmdb_id"`
	Status   string `json:"status"`
	Overview string `json:"overview,omitempty"`
}

func (s *seerr) search(ctx context.Context, a searchArgs) (searchResult, error) {
	query := strings.TrimSpace(a.Query)
	if query == "" {
		return searchResult{}, errors.New("the query is empty: give the title to look for")
	}
	// Seerr passes page on to TMDB as a number, so it is always sent.
	var page struct {
		TotalResults int     `json:"totalResults"`
		Results      []media `json:"results"`
	}
	if err := s.get(ctx, "/search", url.Values{"query": {query}, "page": {"1"}}, &page); err != nil {
		return searchResult{}, err
	}
	var items []found
	for _, m := range page.Results {
		if m.MediaType != "movie" && m.MediaType != "tv" {
			continue // people cannot be requested
		}
		items = append(items, found{
			Title: m.title(), Type: m.MediaType, Year: m.year(), TMDBID: m.ID,
			Status:   statusName(mediaStatuses, m.status()),
			Overview: httpapi.Text(m.Overview, 160),
		})
	}
	r := searchResult{Items: items[:min(len(items), searchLimit)]}
	if r.Items == nil {
		r.Items = []found{} // the model reads [] more surely than null
	}
	// The other pages hold more of everything, people included.
	r.More = len(items) - len(r.Items) + max(0, page.TotalResults-len(page.Results))
	return r, nil
}

type requestArgs struct {
	MediaType string `json:"media_type" jsonschema:"enum=movie,enum=tv,description=movie for a film or tv for a series (the type seerr_search gave)"`
	TMDBID    int    `json:"tmdb_id" jsonschema:"minimum=1,description=TMDB id of the film or series (from seerr_search)"`
	Seasons   []int  `json:"seasons,omitempty" jsonschema:"minItems=1,maxItems=100,description=Season numbers of a series to request; omit it for every season"`
}

// requestBody is what POST /api/v1/request takes.
type requestBody struct {
	MediaType string `json:"mediaType"`
	MediaID   int    `json:"mediaId"`
	Seasons   any    `json:"seasons,omitempty"` // a series': "all" or season numbers
}

type requested struct {
	Requested string `json:"requested"`
	Type      string `json:"type"`
	TMDBID    int    `json:"tmdb_id"`
	Seasons   any    `json:"seasons,omitempty"`
	RequestID int    `json:"request_id"`
	Status    string `json:"status"` // approved, or pending approval
}

func (s *seerr) request(ctx context.Context, a requestArgs) (requested, error) {
	if a.MediaType == "movie" && len(a.Seasons) > 0 {
		return requested{}, errors.New("seasons are for a series (media_type tv); a film is requested whole")
	}
	for _, n := range a.Seasons {
		if n < 0 {
			return requested{}, fmt.Errorf("season %d: season numbers start at 0 (specials) and 1", n)
		}
	}
	// The details give the title for the answer, and say whether there is
	// anything left to request.
	m, err := s.details(ctx, a.MediaType, a.TMDBID)
	if err != nil {
		return requested{}, err
	}
	title := m.label()
	switch st := m.status(); {
	case st == statusAvailable:
		return requested{}, fmt.Errorf("%s is already available", title)
	case a.MediaType == "movie" && (st == statusPending || st == statusProcessing):
		return requested{}, fmt.Errorf("%s is already requested (%s)", title, statusName(mediaStatuses, st))
	}
	body := requestBody{MediaType: a.MediaType, MediaID: a.TMDBID}
	if a.MediaType == "tv" {
		seasons, err := pickSeasons(m, a.Seasons)
		if err != nil {
			return requested{}, err
		}
		body.Seasons = seasons
	}
	var created struct {
		ID      int    `json:"id"`
		Status  int    `json:"status"`
		Message string `json:"message"`
	}
	err = s.do(ctx, http.MethodPost, "/request", nil, body, &created)
	if errors.Is(err, httpapi.ErrConflict) {
		return requested{}, fmt.Errorf("%s is already requested", title)
	}
	if err != nil {
		return requested{}, err
	}
	if created.ID == 0 {
		// A series whose seasons are all requested or available already is
		// answered 202 with a message and no request.
		return requested{}, fmt.Errorf("Seerr made no request for %s: %s", title, cmp.Or(created.Message, "it answered without one"))
	}
	return requested{
		Requested: title, Type: a.MediaType, TMDBID: a.TMDBID, Seasons: body.Seasons,
		RequestID: created.ID, Status: statusName(requestStatuses, created.Status),
	}, nil
}

// pickSeasons is what a series request asks for: "all", or the seasons
// given, each of which the series must have.
func pickSeasons(m media, want []int) (any, error) {
	if len(want) == 0 {
		return "all", nil
	}
	var have []int
	for _, s := range m.Seasons {
		have = append(have, s.SeasonNumber)
	}
	var out []int
	for _, n := range want {
		if !slices.Contains(have, n) {
			names := make([]string, len(have))
			for i, h := range have {
				names[i] = strconv.Itoa(h)
			}
			return nil, fmt.Errorf("%s has no season %d; its seasons: %s", m.label(), n, strings.Join(names, ", "))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

type requestsArgs struct {
	Filter string `json:"filter,omitempty" jsonschema:"enum=all,enum=pending,enum=approved,enum=processing,enum=available,enum=unavailable,enum=failed,default=all,description=Which requests: all (the default); pending (waiting for approval); approved; processing (approved and not available yet); available; unavailable (pending or approved and not available yet); failed"`
	Sort   string `json:"sort,omitempty" jsonschema:"enum=added,enum=modified,default=added,description=Newest requests first (added) or the last changed first (modified)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=20,default=10,description=How many requests to list"`
}

type requestsResult struct {
	Total int           `json:"total"`
	Items []requestItem `json:"items"`
	More  int           `json:"more,omitempty"`
}

type requestItem struct {
	ID          int    `json:"id"`
	Title       string `json:"title,omitempty"` // empty when Seerr could not name it
	Type        string `json:"type"`
	TMDBID      int    `json:"tmdb_id"`
	Seasons     []int  `json:"seasons,omitempty"`
	FourK       bool   `json:"4k,omitempty"`
	Status      string `json:"status"`       // of the request: pending approval, approved, declined...
	MediaStatus string `json:"media_status"` // of the film or series: processing, available...
	RequestedBy string `json:"requested_by,omitempty"`
	Requested   string `json:"requested_on"`
}

// mediaRequest is a MediaRequest, as far as the tools read it.
type mediaRequest struct {
	ID        int    `json:"id"`
	Status    int    `json:"status"`
	Type      string `json:"type"` // movie or tv
	Is4k      bool   `json:"is4k"`
	CreatedAt string `json:"createdAt"`
	Media     struct {
		TMDBID   int `json:"tmdbId"`
		Status   int `json:"status"`
		Status4k int `json:"status4k"`
	} `json:"media"`
	RequestedBy *struct {
		DisplayName string `json:"displayName"`
	} `json:"requestedBy"`
	Seasons []struct {
		SeasonNumber int `json:"seasonNumber"`
	} `json:"seasons"`
}

func (s *seerr) requests(ctx context.Context, a requestsArgs) (requestsResult, error) {
	limit := cmp.Or(a.Limit, 10)
	q := url.Values{
		"take":   {strconv.Itoa(limit)},
		"skip":   {"0"},
		"filter": {cmp.Or(a.Filter, "all")},
		"sort":   {cmp.Or(a.Sort, "added")},
	}
	var page struct {
		PageInfo struct {
			Results int `json:"results"`
		} `json:"pageInfo"`
		Results []mediaRequest `json:"results"`
	}
	if err := s.get(ctx, "/request", q, &page); err != nil {
		return requestsResult{}, err
	}
	reqs := page.Results[:min(len(page.Results), limit)]
	titles, err := s.titles(ctx, reqs)
	if err != nil {
		return requestsResult{}, err
	}
	r := requestsResult{Total: max(page.PageInfo.Results, len(page.Results)), Items: []requestItem{}}
	for i, q := range reqs {
		it := requestItem{
			ID: q.ID, Title: titles[i], Type: q.Type, TMDBID: q.Media.TMDBID, FourK: q.Is4k,
			Status:      statusName(requestStatuses, q.Status),
			MediaStatus: statusName(mediaStatuses, cmp.Or(q.Media.Status, 1)),
			Requested:   dateOnly(q.CreatedAt),
		}
		if q.Is4k {
			it.MediaStatus = statusName(mediaStatuses, cmp.Or(q.Media.Status4k, 1))
		}
		if q.RequestedBy != nil {
			it.RequestedBy = q.RequestedBy.DisplayName
		}
		for _, s := range q.Seasons {
			it.Seasons = append(it.Seasons, s.SeasonNumber)
		}
		r.Items = append(r.Items, it)
	}
	r.More = r.Total - len(r.Items)
	return r, nil
}

// titleFetches bounds the details asked for at once.
const titleFetches = 4

// titles names the film or series of each request. A request holds only the
// TMDB id, and Seerr's own request list asks for each title the same way,
// once per film or series. A title Seerr cannot give is left empty: the id
// still says which it is.
func (s *seerr) titles(ctx context.Context, reqs []mediaRequest) ([]string, error) {
	type key struct {
		mediaType string
		tmdbID    int
	}
	var todo []key
	for _, r := range reqs {
		k := key{r.Type, r.Media.TMDBID}
		if kinds[k.mediaType] != "" && k.tmdbID > 0 && !slices.Contains(todo, k) {
			todo = append(todo, k)
		}
	}
	labels := make([]string, len(todo)) // each goroutine writes its own
	sem := make(chan struct{}, titleFetches)
	var wg sync.WaitGroup
	for i, k := range todo {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if m, err := s.details(ctx, k.mediaType, k.tmdbID); err == nil {
				labels[i] = m.label()
			}
		})
	}
	wg.Wait()
	out := make([]string, len(reqs))
	for i, r := range reqs {
		if j := slices.Index(todo, key{r.Type, r.Media.TMDBID}); j >= 0 {
			out[i] = labels[j]
		}
	}
	return out, ctx.Err()
}
