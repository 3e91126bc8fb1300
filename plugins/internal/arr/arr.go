// Package arr is what the Sonarr, Radarr, Lidarr and Prowlarr plugins share:
// the services speak one API dialect (an X-Api-Key header, quality profiles,
// root folders, a paged download queue, validation errors as a JSON list),
// Sonarr and Radarr under /api/v3, Lidarr and Prowlarr under /api/v1.
package arr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
	"github.com/mmcpd/mmcpd/pkg/plugins/sdk"
)

// Version is every *arr plugin's version: they change together.
const Version = "1.0.0"

// Settings are read under each plugin's own prefix, e.g.
// MMCP_PLUGIN_SONARR_URL and MMCP_PLUGIN_SONARR_API_KEY.
type Settings struct {
	URL    string `required:"true" desc:"base URL as opened in a browser, with the URL base of a reverse proxy if any (e.g. http://localhost:8989 for Sonarr or http://localhost:7878 for Radarr)"`
	APIKey string `split_words:"true" required:"true" secret:"true" desc:"API key, from Settings > General > Security"`
}

// settingsV1 are the same settings, described with the v1 services' ports.
// The tags are all that differ, so one converts to the other.
type settingsV1 struct {
	URL    string `required:"true" desc:"base URL as opened in a browser, with the URL base of a reverse proxy if any (e.g. http://localhost:8686 for Lidarr or http://localhost:9696 for Prowlarr)"`
	APIKey string `split_words:"true" required:"true" secret:"true" desc:"API key, from Settings > General > Security"`
}

// API is the root of the API service speaks: Lidarr and Prowlarr were
// written after Sonarr's v3 and started their own at v1.
func API(service string) string {
	if service == "Lidarr" || service == "Prowlarr" {
		return "/api/v1"
	}
	return "/api/v3"
}

// Env is what a plugin takes from its surroundings, so that tests can fix it.
type Env struct {
	Now     func() time.Time
	Zone    *time.Location // where "today" starts and air times are shown
	Timeout time.Duration  // per HTTP request, well inside the daemon's 30 s per call
}

// DefaultEnv is the real clock, the local zone and a 15 s request timeout.
func DefaultEnv() Env {
	return Env{Now: time.Now, Zone: time.Local, Timeout: 15 * time.Second}
}

// Client calls one service of the family.
type Client struct {
	service string // "Sonarr", in messages
	root    string // "/api/v3", see API
	api     *httpapi.Client
	urlVar  string
	err     error // a URL that is not one: the plugin is on standby
}

// NewPlugin declares the plugin named after service (lower-cased), reads its
// settings and returns the client its tools use.
func NewPlugin(service string, env Env) (*sdk.Plugin, *Client) {
	name := strings.ToLower(service)
	p := sdk.New(name, Version)
	var s Settings
	if API(service) == "/api/v1" {
		var v1 settingsV1
		p.Settings(&v1)
		s = Settings(v1)
	} else {
		p.Settings(&s)
	}
	prefix := plugins.EnvPrefix(name)
	c := &Client{service: service, root: API(service), urlVar: prefix + "URL"}
	c.api, c.err = httpapi.New(service, s.URL, c.urlVar, env.Timeout)
	if c.err != nil && s.URL != "" { // an empty one is already reported as required
		p.SettingProblem(c.err.Error())
	}
	if c.err == nil {
		c.api.CredVar = prefix + "API_KEY"
		c.api.Auth = func(r *http.Request) { r.Header.Set("X-Api-Key", s.APIKey) }
	}
	p.Health(c.Health)
	return p, c
}

// Health is the plugins' probe: the system status is the cheapest call that
// needs both the URL and the key to be right.
func (c *Client) Health(ctx context.Context) error {
	var status struct {
		Version string `json:"version"`
	}
	return c.Get(ctx, "/system/status", nil, &status)
}

// Get fetches an API path (under the API root) and decodes its JSON into out.
func (c *Client) Get(ctx context.Context, path string, query url.Values, out any) error {
	return c.Do(ctx, http.MethodGet, path, query, nil, out)
}

// Do sends one request to an API path (under the API root).
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	if c.err != nil {
		return c.err
	}
	err := c.api.Do(ctx, method, c.root+path, query, body, out)
	if errors.Is(err, httpapi.ErrNotFound) {
		// Every path used here exists in any server of its API version, so
		// a 404 means the URL leads somewhere else (a missing URL base,
		// another app).
		return fmt.Errorf("%w; check that %s is the address of %s, with its URL base if it has one", err, c.urlVar, c.service)
	}
	return err
}

// AlreadyThere is the refusal to add what the library already holds.
func (c *Client) AlreadyThere(title string) error {
	return fmt.Errorf("%s is already in %s", title, c.service)
}

// List is a bounded list for the model, saying how many items it left out.
type List[T any] struct {
	Items []T `json:"items"`
	More  int `json:"more,omitempty"`
}

// Bounded keeps the first n items of all. total is how many the service has
// when it sent only a page of them; 0 when all is all.
func Bounded[T any](all []T, n, total int) List[T] {
	total = max(total, len(all))
	all = all[:min(n, len(all))]
	if all == nil {
		all = []T{} // the model reads [] more surely than null
	}
	return List[T]{Items: all, More: total - len(all)}
}

// Title is a title with its year, when known: "Dune (2021)".
func Title(title string, year int) string {
	if year > 0 {
		return fmt.Sprintf("%s (%d)", title, year)
	}
	return title
}

// Found is a lookup result read as T and kept as the service sent it, since
// an add posts it back.
type Found[T any] struct {
	Item T
	Raw  json.RawMessage
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *Found[T]) UnmarshalJSON(b []byte) error {
	f.Raw = bytes.Clone(b)
	return json.Unmarshal(b, &f.Item)
}
