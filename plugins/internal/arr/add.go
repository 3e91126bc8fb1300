package arr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

// Target is where a new series, movie or artist goes: the add tools' shared
// arguments.
type Target struct {
	QualityProfile string `json:"quality_profile,omitempty" jsonschema:"maxLength=200,description=Quality profile name; omit it for the first profile"`
	RootFolder     string `json:"root_folder,omitempty" jsonschema:"maxLength=1000,description=Root folder path; omit it for the first root folder"`
	SearchNow      *bool  `json:"search_now,omitempty" jsonschema:"default=true,description=Start searching for it right away"`
}

// Search is search_now with its default.
func (t Target) Search() bool { return t.SearchNow == nil || *t.SearchNow }

// Placement is a Target checked against the service's own lists.
type Placement struct {
	ProfileID int
	Profile   string
	Folder    string
}

type profile struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

type rootFolder struct {
	Path string `json:"path"`
}

// Place finds t's quality profile and root folder, or the first of each.
func (c *Client) Place(ctx context.Context, t Target) (Placement, error) {
	var profiles []profile
	if err := c.Get(ctx, "/qualityprofile", nil, &profiles); err != nil {
		return Placement{}, err
	}
	prof, err := Pick(c, "quality profile", t.QualityProfile, profiles, func(p profile) string { return p.Name })
	if err != nil {
		return Placement{}, err
	}
	var folders []rootFolder
	if err := c.Get(ctx, "/rootfolder", nil, &folders); err != nil {
		return Placement{}, err
	}
	folder, err := Pick(c, "root folder", t.RootFolder, folders, func(f rootFolder) string { return f.Path })
	if err != nil {
		return Placement{}, err
	}
	return Placement{ProfileID: prof.ID, Profile: prof.Name, Folder: folder.Path}, nil
}

// Pick is the item named want (any case; a path with or without its
// trailing slash), or the first one when want is empty.
func Pick[T any](c *Client, what, want string, items []T, name func(T) string) (T, error) {
	var zero T
	if len(items) == 0 {
		return zero, fmt.Errorf("%s has no %s yet; create one in its settings first", c.service, what)
	}
	want = strings.TrimRight(strings.TrimSpace(want), `/\`)
	if want == "" {
		return items[0], nil
	}
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = name(it)
		if strings.EqualFold(strings.TrimRight(names[i], `/\`), want) {
			return it, nil
		}
	}
	return zero, fmt.Errorf("%s has no %s %q; choose one of: %s", c.service, what, want, strings.Join(names, ", "))
}

// Added is what the model hears after an add.
type Added struct {
	Added          string `json:"added"`
	Path           string `json:"path,omitempty"`
	QualityProfile string `json:"quality_profile"`
	// MetadataProfile is Lidarr's: which of an artist's releases it fetches.
	MetadataProfile string `json:"metadata_profile,omitempty"`
	RootFolder      string `json:"root_folder"`
	Monitor         string `json:"monitor,omitempty"`
	Searching       bool   `json:"searching"`
}

// AddItem posts item (a lookup result, as the service sent it) to path,
// monitored, placed by pl, with the fields in set on top.
func (c *Client) AddItem(ctx context.Context, path, title string, item json.RawMessage, pl Placement, set map[string]any) (Added, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(item, &fields); err != nil {
		return Added{}, fmt.Errorf("%s sent a lookup result that is not a JSON object: %v", c.service, err)
	}
	body := map[string]any{
		"qualityProfileId": pl.ProfileID,
		"rootFolderPath":   pl.Folder,
		"monitored":        true,
	}
	for k, v := range set {
		body[k] = v
	}
	for k, v := range fields {
		if _, ours := body[k]; !ours {
			body[k] = v
		}
	}
	var out struct {
		Path string `json:"path"`
	}
	err := c.Do(ctx, http.MethodPost, path, nil, body, &out)
	// The service refuses a duplicate with a validation error ("This movie
	// has already been added") or, when two adds race, a database conflict.
	if errors.Is(err, httpapi.ErrConflict) || (err != nil && strings.Contains(err.Error(), "already been added")) {
		return Added{}, c.AlreadyThere(title)
	}
	if err != nil {
		return Added{}, err
	}
	return Added{Added: title, Path: out.Path, QualityProfile: pl.Profile, RootFolder: pl.Folder}, nil
}
