package main

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

const (
	castLimit     = 5
	releaseLimit  = 10
	detailsChars  = 400
	listLimit     = 5 // directors, creators, networks
	imdbTitleBase = "https://www.imdb.com/title/"
)

type detailsArgs struct {
	ID        int    `json:"id" jsonschema:"minimum=1,description=TMDB id from tmdb_search or tmdb_trending"`
	MediaType string `json:"media_type" jsonschema:"enum=movie,enum=tv,description=movie or tv: the kind the id belongs to"`
}

// What TMDB sends for /movie/{id} and /tv/{id} with the appended parts.
type (
	named struct {
		Name string `json:"name"`
	}
	credit struct {
		Name      string `json:"name"`
		Character string `json:"character"`
		Order     int    `json:"order"`
		Job       string `json:"job"`
	}
	credits struct {
		Cast []credit `json:"cast"`
		Crew []credit `json:"crew"`
	}
	releaseDate struct {
		Certification string `json:"certification"`
		Note          string `json:"note"`
		ReleaseDate   string `json:"release_date"`
		Type          int    `json:"type"`
	}
	countryDates struct {
		Country string        `json:"iso_3166_1"`
		Dates   []releaseDate `json:"release_dates"`
	}
	contentRating struct {
		Country string `json:"iso_3166_1"`
		Rating  string `json:"rating"`
	}
	tmdbEpisode struct {
		Name          string `json:"name"`
		AirDate       string `json:"air_date"`
		SeasonNumber  int    `json:"season_number"`
		EpisodeNumber int    `json:"episode_number"`
	}
	apiDetails struct {
		ID            int     `json:"id"`
		Title         string  `json:"title"`
		Name          string  `json:"name"`
		OriginalTitle string  `json:"original_title"`
		OriginalName  string  `json:"original_name"`
		Overview      string  `json:"overview"`
		Status        string  `json:"status"`
		Genres        []named `json:"genres"`
		VoteAverage   float64 `json:"vote_average"`
		VoteCount     int     `json:"vote_count"`
		Credits       credits `json:"credits"`
		// movie
		Runtime      int    `json:"runtime"`
		ReleaseDate  string `json:"release_date"`
		IMDbID       string `json:"imdb_id"`
		ReleaseDates struct {
			Results []countryDates `json:"results"`
		} `json:"release_dates"`
		// tv
		NumberOfSeasons  int          `json:"number_of_seasons"`
		NumberOfEpisodes int          `json:"number_of_episodes"`
		FirstAirDate     string       `json:"first_air_date"`
		LastAirDate      string       `json:"last_air_date"`
		LastEpisode      *tmdbEpisode `json:"last_episode_to_air"`
		NextEpisode      *tmdbEpisode `json:"next_episode_to_air"`
		CreatedBy        []named      `json:"created_by"`
		Networks         []named      `json:"networks"`
		ContentRatings   struct {
			Results []contentRating `json:"results"`
		} `json:"content_ratings"`
		ExternalIDs struct {
			IMDbID string `json:"imdb_id"`
		} `json:"external_ids"`
	}
)

type release struct {
	Type string `json:"type"`
	Date string `json:"date"`
	Note string `json:"note,omitempty"`
}

type releases struct {
	Country string    `json:"country"`
	Dates   []release `json:"dates"`
	More    int       `json:"more,omitempty"`
}

type episode struct {
	Episode string `json:"episode"` // S01E02
	Name    string `json:"name,omitempty"`
	AirDate string `json:"air_date,omitempty"`
}

type details struct {
	ID            int       `json:"id"`
	MediaType     string    `json:"media_type"`
	Title         string    `json:"title"`
	OriginalTitle string    `json:"original_title,omitempty"`
	Year          int       `json:"year,omitempty"`
	Status        string    `json:"status,omitempty"`
	Runtime       int       `json:"runtime_minutes,omitempty"`
	Seasons       int       `json:"seasons,omitempty"`
	Episodes      int       `json:"episodes,omitempty"`
	Genres        []string  `json:"genres,omitempty"`
	Rating        float64   `json:"rating,omitempty"`
	Certification string    `json:"certification,omitempty"`
	Overview      string    `json:"overview,omitempty"`
	Directors     []string  `json:"directors,omitempty"`
	CreatedBy     []string  `json:"created_by,omitempty"`
	Networks      []string  `json:"networks,omitempty"`
	Cast          []string  `json:"cast,omitempty"`
	ReleaseDate   string    `json:"release_date,omitempty"`
	Releases      *releases `json:"releases,omitempty"`
	FirstAirDate  string    `json:"first_air_date,omitempty"`
	LastAirDate   string    `json:"last_air_date,omitempty"`
	LastEpisode   *episode  `json:"last_episode,omitempty"`
	NextEpisode   *episode  `json:"next_episode,omitempty"`
	TMDBURL       string    `json:"tmdb_url"`
	IMDbID        string    `json:"imdb_id,omitempty"`
	IMDbURL       string    `json:"imdb_url,omitempty"`
}

// appended is what each kind needs beside its details, in one request. A
// show's IMDb id is only in its external ids.
var appended = map[string]string{
	"movie": "credits,release_dates",
	"tv":    "credits,content_ratings,external_ids",
}

func (t *tmdb) details(ctx context.Context, a detailsArgs) (details, error) {
	path := "/" + a.MediaType + "/" + strconv.Itoa(a.ID)
	var d apiDetails
	if err := t.get(ctx, path, url.Values{"append_to_response": {appended[a.MediaType]}}, &d); err != nil {
		return details{}, notFound(err, a.MediaType, a.ID)
	}
	out := details{
		ID:        d.ID,
		MediaType: a.MediaType,
		Status:    d.Status,
		Overview:  httpapi.Text(d.Overview, detailsChars),
		Cast:      cast(d.Credits.Cast),
		TMDBURL:   fmt.Sprintf("%s/%s/%d", siteURL, a.MediaType, d.ID),
	}
	for _, g := range d.Genres {
		out.Genres = append(out.Genres, g.Name)
	}
	if d.VoteCount > 0 {
		out.Rating = rating(d.VoteAverage)
	}
	if a.MediaType == "movie" {
		t.movie(&out, &d)
	} else {
		t.show(&out, &d)
	}
	if out.IMDbID != "" {
		out.IMDbURL = imdbTitleBase + out.IMDbID + "/"
	}
	return out, nil
}

func (t *tmdb) movie(out *details, d *apiDetails) {
	out.Title, out.Year, out.Runtime = d.Title, year(d.ReleaseDate), d.Runtime
	if d.OriginalTitle != d.Title {
		out.OriginalTitle = d.OriginalTitle
	}
	out.ReleaseDate, out.IMDbID = d.ReleaseDate, d.IMDbID
	for _, c := range d.Credits.Crew {
		if c.Job == "Director" && len(out.Directors) < listLimit && !slices.Contains(out.Directors, c.Name) {
			out.Directors = append(out.Directors, c.Name)
		}
	}
	i := t.pick(len(d.ReleaseDates.Results), func(i int) string { return d.ReleaseDates.Results[i].Country })
	if i < 0 {
		return
	}
	cd := d.ReleaseDates.Results[i]
	rs := &releases{Country: cd.Country}
	for _, r := range cd.Dates {
		rs.Dates = append(rs.Dates, release{Type: releaseType(r.Type), Date: dateOnly(r.ReleaseDate), Note: r.Note})
		if out.Certification == "" {
			out.Certification = r.Certification
		}
	}
	slices.SortStableFunc(rs.Dates, func(a, b release) int { return cmp.Compare(a.Date, b.Date) })
	if len(rs.Dates) > releaseLimit {
		rs.More = len(rs.Dates) - releaseLimit
		rs.Dates = rs.Dates[:releaseLimit]
	}
	out.Releases = rs
}

func (t *tmdb) show(out *details, d *apiDetails) {
	out.Title, out.Year = d.Name, year(d.FirstAirDate)
	if d.OriginalName != d.Name {
		out.OriginalTitle = d.OriginalName
	}
	out.Seasons, out.Episodes = d.NumberOfSeasons, d.NumberOfEpisodes
	out.FirstAirDate, out.LastAirDate = d.FirstAirDate, d.LastAirDate
	out.LastEpisode, out.NextEpisode = toEpisode(d.LastEpisode), toEpisode(d.NextEpisode)
	out.CreatedBy = names(d.CreatedBy)
	out.Networks = names(d.Networks)
	out.IMDbID = d.ExternalIDs.IMDbID
	if i := t.pick(len(d.ContentRatings.Results), func(i int) string { return d.ContentRatings.Results[i].Country }); i >= 0 {
		out.Certification = d.ContentRatings.Results[i].Rating
	}
}

// pick chooses whose release dates and rating to show: the country of the
// configured language, else the US, else the first TMDB lists. It returns -1
// when there are none.
func (t *tmdb) pick(n int, country func(int) string) int {
	if n == 0 {
		return -1
	}
	for _, want := range []string{t.region, "US"} {
		for i := range n {
			if want != "" && country(i) == want {
				return i
			}
		}
	}
	return 0
}

// releaseType names TMDB's release types.
func releaseType(n int) string {
	switch n {
	case 1:
		return "Premiere"
	case 2:
		return "Theatrical (limited)"
	case 3:
		return "Theatrical"
	case 4:
		return "Digital"
	case 5:
		return "Physical"
	case 6:
		return "TV"
	}
	return "type " + strconv.Itoa(n)
}

// dateOnly keeps the day of a TMDB timestamp ("2021-10-22T00:00:00.000Z").
func dateOnly(ts string) string {
	if len(ts) >= 10 {
		return ts[:10]
	}
	return ts
}

// cast is the top of the billing, as "Name as Character".
func cast(cs []credit) []string {
	cs = slices.Clone(cs)
	slices.SortStableFunc(cs, func(a, b credit) int { return cmp.Compare(a.Order, b.Order) })
	var out []string
	for _, c := range cs[:min(len(cs), castLimit)] {
		if c.Character != "" {
			out = append(out, c.Name+" as "+c.Character)
		} else {
			out = append(out, c.Name)
		}
	}
	return out
}

func names(ns []named) []string {
	var out []string
	for _, n := range ns[:min(len(ns), listLimit)] {
		out = append(out, n.Name)
	}
	return out
}

func toEpisode(e *tmdbEpisode) *episode {
	if e == nil {
		return nil
	}
	return &episode{Episode: fmt.Sprintf("S%02dE%02d", e.SeasonNumber, e.EpisodeNumber), Name: e.Name, AirDate: e.AirDate}
}
