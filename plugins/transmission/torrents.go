package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
	"github.com/mmcpd/mmcpd/plugins/internal/human"
	"github.com/mmcpd/mmcpd/plugins/internal/source"
)

// maxListed bounds the torrents in one answer; the rest are counted.
const maxListed = 20

// Transmission's torrent status values (rpc-spec 3.3, since rpc-version 14).
const (
	statusStopped = iota
	statusCheckWait
	statusCheck
	statusDownloadWait
	statusDownload
	statusSeedWait
	statusSeed
)

var statusWords = []string{"stopped", "queued to verify", "verifying", "queued to download", "downloading", "queued to seed", "seeding"}

// listFields are the torrent-get fields a listing needs.
var listFields = []string{"id", "name", "percentDone", "rateDownload", "rateUpload", "eta", "status", "error", "errorString", "totalSize", "downloadDir"}

// torrent is one torrent as torrent-get describes it.
type torrent struct {
	ID           int     `json:"id"`
	Name         string  `json:"name"`
	PercentDone  float64 `json:"percentDone"`
	RateDownload int64   `json:"rateDownload"`
	RateUpload   int64   `json:"rateUpload"`
	ETA          int64   `json:"eta"`
	Status       int     `json:"status"`
	Error        int     `json:"error"`
	ErrorString  string  `json:"errorString"`
	TotalSize    int64   `json:"totalSize"`
	DownloadDir  string  `json:"downloadDir"`
}

type torrentGet struct {
	IDs    []int    `json:"ids,omitempty"`
	Fields []string `json:"fields"`
}

type torrentList struct {
	Torrents []torrent `json:"torrents"`
}

// transmission holds what the tools share: the RPC client, or why there is
// none (a URL setting that is not a URL).
type transmission struct {
	rpc *rpcClient
	err error
}

func (t *transmission) call(ctx context.Context, method string, args, out any) error {
	if t.err != nil {
		return t.err
	}
	return t.rpc.call(ctx, method, args, out)
}

// health is the plugin's probe: session-get is the cheapest call that needs
// both the URL and the credentials to be right.
func (t *transmission) health(ctx context.Context) error {
	return t.call(ctx, "session-get", nil, nil)
}

func (t *transmission) torrents(ctx context.Context, ids []int, fields ...string) ([]torrent, error) {
	var r torrentList
	if err := t.call(ctx, "torrent-get", torrentGet{IDs: ids, Fields: fields}, &r); err != nil {
		return nil, err
	}
	return r.Torrents, nil
}

// --- transmission_list

type listArgs struct {
	Filter string `json:"filter,omitempty" jsonschema:"enum=all,enum=downloading,enum=seeding,enum=paused,enum=done,default=all,description=Which torrents: all; downloading or seeding (queued ones included); paused (stopped); done (fully downloaded)"`
}

type listResult struct {
	Torrents []torrentView `json:"torrents"`
	More     int           `json:"more,omitempty"` // torrents matched but not shown
	Totals   totals        `json:"totals"`
}

type torrentView struct {
	ID      int     `json:"id"`
	Name    string  `json:"name"`
	Status  string  `json:"status"`
	Percent float64 `json:"percent"`
	Down    string  `json:"down,omitempty"`
	Up      string  `json:"up,omitempty"`
	ETA     string  `json:"eta"`
	Size    string  `json:"size"`
	Dir     string  `json:"dir,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// totals cover every torrent the filter matched, shown or not.
type totals struct {
	Torrents    int    `json:"torrents"`
	Downloading int    `json:"downloading"`
	Seeding     int    `json:"seeding"`
	Stopped     int    `json:"stopped"`
	WithErrors  int    `json:"with_errors,omitempty"`
	Down        string `json:"down"`
	Up          string `json:"up"`
	Size        string `json:"size"`
}

func (t *transmission) list(ctx context.Context, a listArgs) (listResult, error) {
	all, err := t.torrents(ctx, nil, listFields...)
	if err != nil {
		return listResult{}, err
	}
	return summarize(all, a.Filter), nil
}

func summarize(all []torrent, filter string) listResult {
	var picked []torrent
	for _, tr := range all {
		if matches(tr, filter) {
			picked = append(picked, tr)
		}
	}
	// What is moving comes first, so a cut list keeps what matters now.
	slices.SortStableFunc(picked, func(a, b torrent) int {
		return cmp.Or(cmp.Compare(rank(a.Status), rank(b.Status)), cmp.Compare(a.ID, b.ID))
	})
	res := listResult{Torrents: []torrentView{}}
	var down, up, size int64
	for i, tr := range picked {
		down += tr.RateDownload
		up += tr.RateUpload
		size += tr.TotalSize
		switch tr.Status {
		case statusDownload, statusDownloadWait:
			res.Totals.Downloading++
		case statusSeed, statusSeedWait:
			res.Totals.Seeding++
		case statusStopped:
			res.Totals.Stopped++
		}
		if tr.Error != 0 {
			res.Totals.WithErrors++
		}
		if i < maxListed {
			res.Torrents = append(res.Torrents, view(tr))
		}
	}
	res.More = max(0, len(picked)-maxListed)
	res.Totals.Torrents = len(picked)
	res.Totals.Down, res.Totals.Up, res.Totals.Size = human.Decimal.Rate(down), human.Decimal.Rate(up), human.Decimal.Size(size)
	return res
}

func matches(tr torrent, filter string) bool {
	switch filter {
	case "downloading":
		return tr.Status == statusDownload || tr.Status == statusDownloadWait
	case "seeding":
		return tr.Status == statusSeed || tr.Status == statusSeedWait
	case "paused":
		return tr.Status == statusStopped
	case "done":
		return tr.PercentDone >= 1
	}
	return true
}

// rank orders statuses by how active they are.
func rank(status int) int {
	order := []int{statusDownload, statusDownloadWait, statusCheck, statusCheckWait, statusSeed, statusSeedWait, statusStopped}
	if i := slices.Index(order, status); i >= 0 {
		return i
	}
	return len(order)
}

func view(tr torrent) torrentView {
	v := torrentView{
		ID:      tr.ID,
		Name:    httpapi.Text(tr.Name, 150),
		Status:  statusWord(tr.Status),
		Percent: human.Percent(tr.PercentDone),
		ETA:     eta(tr.ETA, tr.PercentDone),
		Size:    human.Decimal.Size(tr.TotalSize),
		Dir:     httpapi.Text(tr.DownloadDir, 150),
		Error:   errorText(tr.Error, tr.ErrorString),
	}
	if tr.RateDownload > 0 {
		v.Down = human.Decimal.Rate(tr.RateDownload)
	}
	if tr.RateUpload > 0 {
		v.Up = human.Decimal.Rate(tr.RateUpload)
	}
	return v
}

func statusWord(s int) string {
	if s >= 0 && s < len(statusWords) {
		return statusWords[s]
	}
	return "status " + strconv.Itoa(s)
}

// eta words Transmission's seconds left; it uses -1 (not available) and -2
// (unknown) when it cannot tell.
func eta(seconds int64, done float64) string {
	switch {
	case done >= 1:
		return "done"
	case seconds < 0:
		return "unknown"
	}
	return human.Duration(seconds)
}

func errorText(code int, msg string) string {
	if code == 0 {
		return ""
	}
	kind := map[int]string{1: "tracker warning", 2: "tracker error", 3: "local error"}[code]
	if kind == "" {
		kind = "error"
	}
	if msg = httpapi.Text(msg, 200); msg != "" {
		return kind + ": " + msg
	}
	return kind
}

// --- transmission_add

type addArgs struct {
	Source      string `json:"source" jsonschema:"minLength=1,maxLength=8192,description=A magnet: link or the http(s) URL of a .torrent file"`
	DownloadDir string `json:"download_dir,omitempty" jsonschema:"maxLength=1024,description=Absolute folder on the Transmission machine to download into; omit it for Transmission's default"`
	Paused      *bool  `json:"paused,omitempty" jsonschema:"description=true adds the torrent without starting it; omit it for Transmission's default (usually start)"`
}

type addRequest struct {
	Filename    string `json:"filename"`
	DownloadDir string `json:"download-dir,omitempty"`
	Paused      *bool  `json:"paused,omitempty"`
}

type torrentRef struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

type addResult struct {
	Result string `json:"result"` // "added" or "already present"
	ID     int    `json:"id"`
	Name   string `json:"name"`
	Paused bool   `json:"paused,omitempty"`
}

func (t *transmission) add(ctx context.Context, a addArgs) (addResult, error) {
	src, err := source.Check(a.Source)
	if err != nil {
		return addResult{}, err
	}
	req := addRequest{Filename: src, DownloadDir: strings.TrimSpace(a.DownloadDir), Paused: a.Paused}
	var r struct {
		Added     *torrentRef `json:"torrent-added"`
		Duplicate *torrentRef `json:"torrent-duplicate"`
	}
	err = t.call(ctx, "torrent-add", req, &r)
	var re *rpcError
	switch {
	case errors.As(err, &re) && re.result == "duplicate torrent":
		// Transmission before 2.80 refused a duplicate instead of naming it.
		return addResult{}, errors.New("Transmission already has this torrent; transmission_list shows it")
	case errors.As(err, &re):
		return addResult{}, fmt.Errorf("Transmission could not add the torrent: %s", re.result)
	case err != nil:
		return addResult{}, err
	case r.Added != nil:
		return addResult{Result: "added", ID: r.Added.ID, Name: httpapi.Text(r.Added.Name, 150), Paused: a.Paused != nil && *a.Paused}, nil
	case r.Duplicate != nil:
		return addResult{Result: "already present", ID: r.Duplicate.ID, Name: httpapi.Text(r.Duplicate.Name, 150)}, nil
	}
	return addResult{}, fmt.Errorf("Transmission answered torrent-add without naming the torrent: %w", httpapi.ErrBadResponse)
}

// --- transmission_pause, transmission_resume, transmission_remove

type idsArgs struct {
	IDs []int `json:"ids" jsonschema:"minItems=1,maxItems=100,description=Torrent ids as transmission_list shows them"`
}

type removeArgs struct {
	IDs        []int `json:"ids" jsonschema:"minItems=1,maxItems=100,description=Torrent ids as transmission_list shows them"`
	DeleteData bool  `json:"delete_data,omitempty" jsonschema:"default=false,description=true also deletes the downloaded files; false keeps them on disk"`
}

type actionResult struct {
	Done       string       `json:"done"` // what happened: paused, resumed, removed
	Torrents   []torrentRef `json:"torrents"`
	DataDelete bool         `json:"data_deleted,omitempty"`
}

func (t *transmission) pause(ctx context.Context, a idsArgs) (actionResult, error) {
	return t.act(ctx, a.IDs, "torrent-stop", "paused", nil)
}

func (t *transmission) resume(ctx context.Context, a idsArgs) (actionResult, error) {
	return t.act(ctx, a.IDs, "torrent-start", "resumed", nil)
}

func (t *transmission) remove(ctx context.Context, a removeArgs) (actionResult, error) {
	res, err := t.act(ctx, a.IDs, "torrent-remove", "removed", map[string]any{"delete-local-data": a.DeleteData})
	res.DataDelete = err == nil && a.DeleteData
	return res, err
}

// act runs method on ids once all of them are known: Transmission skips
// unknown ids silently, which would let the model believe it acted on them.
func (t *transmission) act(ctx context.Context, ids []int, method, done string, extra map[string]any) (actionResult, error) {
	if len(ids) == 0 {
		// The schema asks for one id at least; an empty list would mean
		// every torrent to Transmission.
		return actionResult{}, errors.New("no torrent ids given; transmission_list shows the ids")
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	found, err := t.torrents(ctx, ids, "id", "name")
	if err != nil {
		return actionResult{}, err
	}
	refs := make([]torrentRef, 0, len(found))
	known := map[int]bool{}
	for _, tr := range found {
		known[tr.ID] = true
		refs = append(refs, torrentRef{ID: tr.ID, Name: httpapi.Text(tr.Name, 150)})
	}
	var missing []string
	for _, id := range ids {
		if !known[id] {
			missing = append(missing, strconv.Itoa(id))
		}
	}
	if len(missing) > 0 {
		noun := "id"
		if len(missing) > 1 {
			noun = "ids"
		}
		return actionResult{}, fmt.Errorf("Transmission has no torrent with %s %s (transmission_list shows the ids); nothing was %s", noun, strings.Join(missing, ", "), done)
	}
	args := map[string]any{"ids": ids}
	for k, v := range extra {
		args[k] = v
	}
	if err := t.call(ctx, method, args, nil); err != nil {
		return actionResult{}, err
	}
	slices.SortFunc(refs, func(a, b torrentRef) int { return cmp.Compare(a.ID, b.ID) })
	return actionResult{Done: done, Torrents: refs}, nil
}

// --- the downloads context

// downloads is one line for the system prompt, e.g. "2 downloading at 3.1
// MB/s, nearest done in 12m; 5 seeding".
func (t *transmission) downloads(ctx context.Context) (string, error) {
	all, err := t.torrents(ctx, nil, "id", "status", "rateDownload", "eta", "percentDone", "error")
	if err != nil {
		return "", err
	}
	return downloadsLine(all), nil
}

func downloadsLine(all []torrent) string {
	d := human.Downloads{Nearest: -1}
	for _, tr := range all {
		switch tr.Status {
		case statusDownload:
			d.Downloading++
			d.Speed += tr.RateDownload
			d.Soonest(tr.ETA)
		case statusDownloadWait:
			d.Queued++
		case statusSeed:
			d.Seeding++
		}
		if tr.Error != 0 {
			d.Errors++
		}
	}
	return d.Line(human.Decimal)
}
