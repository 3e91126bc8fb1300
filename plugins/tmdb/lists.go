package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

// Bounds on what the model gets back.
const (
	searchLimit   = 5
	trendingLimit = 10
	overviewChars = 200
)

type searchArgs struct {
	Query     string `json:"query" jsonschema:"minLength=1,maxLength=200,description=Title to look for (words of it are enough)"`
	MediaType string `json:"media_type,omitempty" jsonschema:"enum=movie,enum=tv,default=movie,description=movie for films or tv for TV shows"`
	Year      int    `json:"year,omitempty" jsonschema:"minimum=1870,maximum=2100,description=Release year (for tv the year of the first episode); omit it when unsure"`
}

// listItem is a search or trending entry as TMDB sends it: films have title
// and release_date, shows name and first_air_date.
type listItem struct {
	ID           int     `json:"id"`
	MediaType    string  `json:"media_type"` // trending only
	Title        string  `json:"title"`
	Name         string  `json:"name"`
	ReleaseDate  string  `json:"release_date"`
	FirstAirDate string  `json:"first_air_date"`
	Overview     string  `json:"overview"`
	VoteAverage  float64 `json:"vote_average"`
	VoteCount    int     `json:"vote_count"`
}

func (it listItem) title() string {
	if it.Title != "" {
		return it.Title
	}
	return it.Name
}

func (it listItem) year() int {
	if it.ReleaseDate != "" {
		return year(it.ReleaseDate)
	}
	return year(it.FirstAirDate)
}

// rating is 0 (left out) for a title nobody has voted on yet, rather than a
// misleading 0.0.
func (it listItem) rating() float64 {
	if it.VoteCount == 0 {
		return 0
	}
	return rating(it.VoteAverage)
}

type listPage struct {
	Page         int        `json:"page"`
	Results      []listItem `json:"results"`
	TotalResults int        `json:"total_results"`
}

type match struct {
	ID       int     `json:"id"`
	Title    string  `json:"title"`
	Year     int     `json:"year,omitempty"`
	Overview string  `json:"overview,omitempty"`
	Rating   float64 `json:"rating,omitempty"`
}

type searchResult struct {
	MediaType    string  `json:"media_type"`
	TotalResults int     `json:"total_results"`
	Results      []match `json:"results"`
	Message      string  `json:"message,omitempty"`
}

func (t *tmdb) search(ctx context.Context, a searchArgs) (searchResult, error) {
	query := strings.TrimSpace(a.Query)
	if query == "" {
		return searchResult{}, errors.New("query is empty: give a title to look for")
	}
	mediaType := a.MediaType
	if mediaType == "" {
		mediaType = "movie"
	}
	q := url.Values{"query": {query}, "include_adult": {"false"}}
	if a.Year != 0 {
		yearParam := "year"
		if mediaType == "tv" {
			yearParam = "first_air_date_year"
		}
		q.Set(yearParam, strconv.Itoa(a.Year))
	}
	var page listPage
	if err := t.get(ctx, "/search/"+mediaType, q, &page); err != nil {
		return searchResult{}, err
	}
	res := searchResult{MediaType: mediaType, TotalResults: page.TotalResults, Results: []match{}}
	for _, it := range page.Results[:min(len(page.Results), searchLimit)] {
		res.Results = append(res.Results, match{
			ID:       it.ID,
			Title:    it.title(),
			Year:     it.year(),
			Overview: httpapi.Text(it.Overview, overviewChars),
			Rating:   it.rating(),
		})
	}
	if len(res.Results) == 0 {
		res.Message = nothingMatched(query, mediaType, a.Year)
	}
	return res, nil
}

// nothingMatched suggests what to try next: TMDB's years are often a year
// off from what people remember, and films and shows are searched apart.
func nothingMatched(query, mediaType string, y int) string {
	other := "tv"
	if mediaType == "tv" {
		other = "movie"
	}
	if y != 0 {
		return fmt.Sprintf("Nothing on TMDB matched %q as a %s from %d. Try again without the year, or with media_type %s.", query, mediaKind(mediaType), y, other)
	}
	return fmt.Sprintf("Nothing on TMDB matched %q as a %s. Try again with media_type %s, or with fewer or differently spelled words.", query, mediaKind(mediaType), other)
}

type trendingArgs struct {
	MediaType string `json:"media_type,omitempty" jsonschema:"enum=movie,enum=tv,enum=all,default=movie,description=movie or tv or all (films and shows and people)"`
	Window    string `json:"window,omitempty" jsonschema:"enum=day,enum=week,default=week,description=Trending today (day) or this week (week)"`
}

type trendingItem struct {
	ID        int     `json:"id"`
	Title     string  `json:"title"`
	MediaType string  `json:"media_type"`
	Year      int     `json:"year,omitempty"`
	Rating    float64 `json:"rating,omitempty"`
}

type trendingResult struct {
	MediaType    string         `json:"media_type"`
	Window       string         `json:"window"`
	TotalResults int            `json:"total_results"`
	Results      []trendingItem `json:"results"`
}

func (t *tmdb) trending(ctx context.Context, a trendingArgs) (trendingResult, error) {
	mediaType, window := a.MediaType, a.Window
	if mediaType == "" {
		mediaType = "movie"
	}
	if window == "" {
		window = "week"
	}
	var page listPage
	if err := t.get(ctx, "/trending/"+mediaType+"/"+window, nil, &page); err != nil {
		return trendingResult{}, err
	}
	res := trendingResult{MediaType: mediaType, Window: window, TotalResults: page.TotalResults, Results: []trendingItem{}}
	for _, it := range page.Results[:min(len(page.Results), trendingLimit)] {
		kind := it.MediaType
		if kind == "" { // TMDB names it on mixed lists; a single list is of its own type
			kind = mediaType
		}
		res.Results = append(res.Results, trendingItem{ID: it.ID, Title: it.title(), MediaType: kind, Year: it.year(), Rating: it.rating()})
	}
	return res, nil
}
