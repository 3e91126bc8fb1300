package main

import (
	"cmp"
	"context"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
	"github.com/mmcpd/mmcpd/plugins/internal/human"
	"github.com/mmcpd/mmcpd/plugins/internal/source"
)

// maxListed bounds the torrents in one answer; the rest are counted.
const maxListed = 20

// maxETA is the ETA qBittorrent gives when it cannot tell (100 days).
const maxETA = 8640000

// addWait bounds how long qbittorrent_add looks for the torrent it added:
// qBittorrent's torrents/add answers before the torrent is listed (a
// .torrent URL is fetched afterwards) and, before 5.x, without naming it.
// addPoll is the pause between looks. Tests shorten both.
var addWait, addPoll = 5 * time.Second, 200 * time.Millisecond

// qbittorrent holds what the tools share: the Web API client, or why there
// is none (a URL setting that is not a URL).
type qbittorrent struct {
	c   *client
	err error
	// legacy is set once torrents/pause and torrents/resume answered: the
	// names before qBittorrent 5.0, which renamed them stop and start.
	legacy atomic.Bool
}

// torrent is one entry of torrents/info, with the fields the tools use.
type torrent struct {
	Hash     string  `json:"hash"`
	Name     string  `json:"name"`
	State    string  `json:"state"`
	Progress float64 `json:"progress"`
	DLSpeed  int64   `json:"dlspeed"`
	UPSpeed  int64   `json:"upspeed"`
	ETA      int64   `json:"eta"`
	Size     int64   `json:"size"`
	Category string  `json:"category"`
	SavePath string  `json:"save_path"`
}

func (q *qbittorrent) torrents(ctx context.Context, query url.Values) ([]torrent, error) {
	if q.err != nil {
		return nil, q.err
	}
	var ts []torrent
	if err := q.c.get(ctx, "torrents/info", query, &ts); err != nil {
		return nil, err
	}
	return ts, nil
}

// health is the plugin's probe: app/version is the cheapest call that
// needs the URL and the login to be right.
func (q *qbittorrent) health(ctx context.Context) error {
	if q.err != nil {
		return q.err
	}
	_, err := q.c.call(ctx, http.MethodGet, "app/version", nil)
	return err
}

// --- states

// kind groups qBittorrent's many states; kinds are in the order a listing
// shows them, what is moving first.
type kind int

const (
	kindDown kind = iota
	kindCheck
	kindSeed
	kindError
	kindPaused
	kindOther
)

type stateInfo struct {
	word string
	kind kind
}

// states are the values of torrents/info's state (API docs, "Get torrent
// list"), with the stopped* names that qBittorrent 5.0 gave paused ones.
var states = map[string]stateInfo{
	"downloading":        {"downloading", kindDown},
	"forcedDL":           {"downloading (forced)", kindDown},
	"metaDL":             {"fetching metadata", kindDown},
	"forcedMetaDL":       {"fetching metadata (forced)", kindDown},
	"stalledDL":          {"stalled", kindDown},
	"queuedDL":           {"queued to download", kindDown},
	"allocating":         {"allocating disk space", kindDown},
	"checkingDL":         {"verifying", kindCheck},
	"checkingUP":         {"verifying", kindCheck},
	"checkingResumeData": {"loading", kindCheck},
	"moving":             {"moving", kindCheck},
	"uploading":          {"seeding", kindSeed},
	"stalledUP":          {"seeding", kindSeed}, // complete, nobody downloading from it
	"forcedUP":           {"seeding (forced)", kindSeed},
	"queuedUP":           {"queued to seed", kindSeed},
	"error":              {"error", kindError},
	"missingFiles":       {"files missing", kindError},
	"pausedDL":           {"paused", kindPaused},
	"pausedUP":           {"paused", kindPaused},
	"stoppedDL":          {"paused", kindPaused},
	"stoppedUP":          {"paused", kindPaused},
}

func state(s string) stateInfo {
	if st, ok := states[s]; ok {
		return st
	}
	return stateInfo{httpapi.Text(s, 40), kindOther} // "unknown", or one newer than this plugin
}

// --- qbittorrent_list

type listArgs struct {
	Filter   string `json:"filter,omitempty" jsonschema:"enum=all,enum=downloading,enum=seeding,enum=paused,enum=completed,enum=errored,default=all,description=Which torrents: all; downloading (queued and stalled ones included) or seeding; paused; completed (fully downloaded); errored"`
	Category string `json:"category,omitempty" jsonschema:"maxLength=200,description=Only the torrents of this qBittorrent category; omit it for every category"`
}

type listResult struct {
	Torrents []torrentView `json:"torrents"`
	More     int           `json:"more,omitempty"` // torrents matched but not shown
	Totals   totals        `json:"totals"`
}

type torrentView struct {
	Hash     string  `json:"hash"`
	Name     string  `json:"name"`
	State    string  `json:"state"`
	Percent  float64 `json:"percent"`
	Down     string  `json:"down,omitempty"`
	Up       string  `json:"up,omitempty"`
	ETA      string  `json:"eta"`
	Size     string  `json:"size"`
	Category string  `json:"category,omitempty"`
	Dir      string  `json:"dir,omitempty"`
}

// totals cover every torrent the filter matched, shown or not.
type totals struct {
	Torrents    int    `json:"torrents"`
	Downloading int    `json:"downloading"`
	Seeding     int    `json:"seeding"`
	Paused      int    `json:"paused"`
	WithErrors  int    `json:"with_errors,omitempty"`
	Down        string `json:"down"`
	Up          string `json:"up"`
	Size        string `json:"size"`
}

func (q *qbittorrent) list(ctx context.Context, a listArgs) (listResult, error) {
	var query url.Values
	if c := strings.TrimSpace(a.Category); c != "" {
		query = url.Values{"category": {c}}
	}
	all, err := q.torrents(ctx, query)
	if err != nil {
		return listResult{}, err
	}
	return summarize(all, a.Filter), nil
}

// summarize filters here rather than with torrents/info's own filter, whose
// names changed in 5.0 (paused became stopped).
func summarize(all []torrent, filter string) listResult {
	var picked []torrent
	for _, t := range all {
		if matches(t, filter) {
			picked = append(picked, t)
		}
	}
	slices.SortStableFunc(picked, func(a, b torrent) int {
		return cmp.Or(cmp.Compare(state(a.State).kind, state(b.State).kind),
			cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)))
	})
	res := listResult{Torrents: []torrentView{}}
	var down, up, size int64
	for i, t := range picked {
		down += t.DLSpeed
		up += t.UPSpeed
		size += max(0, t.Size)
		switch state(t.State).kind {
		case kindDown:
			res.Totals.Downloading++
		case kindSeed:
			res.Totals.Seeding++
		case kindPaused:
			res.Totals.Paused++
		case kindError:
			res.Totals.WithErrors++
		}
		if i < maxListed {
			res.Torrents = append(res.Torrents, view(t))
		}
	}
	res.More = max(0, len(picked)-maxListed)
	res.Totals.Torrents = len(picked)
	res.Totals.Down, res.Totals.Up, res.Totals.Size = human.Binary.Rate(down), human.Binary.Rate(up), human.Binary.Size(size)
	return res
}

func matches(t torrent, filter string) bool {
	switch k := state(t.State).kind; filter {
	case "downloading":
		return k == kindDown
	case "seeding":
		return k == kindSeed
	case "paused":
		return k == kindPaused
	case "completed":
		return t.Progress >= 1
	case "errored":
		return k == kindError
	}
	return true
}

func view(t torrent) torrentView {
	v := torrentView{
		Hash:     t.Hash,
		Name:     httpapi.Text(t.Name, 150),
		State:    state(t.State).word,
		Percent:  human.Percent(t.Progress),
		ETA:      eta(t.ETA, t.Progress),
		Size:     "unknown", // a magnet link's torrent before its metadata came
		Category: httpapi.Text(t.Category, 100),
		Dir:      httpapi.Text(t.SavePath, 150),
	}
	if t.Size > 0 {
		v.Size = human.Binary.Size(t.Size)
	}
	if t.DLSpeed > 0 {
		v.Down = human.Binary.Rate(t.DLSpeed)
	}
	if t.UPSpeed > 0 {
		v.Up = human.Binary.Rate(t.UPSpeed)
	}
	return v
}

// eta words qBittorrent's seconds left; it gives maxETA when it cannot tell.
func eta(seconds int64, progress float64) string {
	switch {
	case progress >= 1:
		return "done"
	case seconds < 0 || seconds >= maxETA:
		return "unknown"
	}
	return human.Duration(seconds)
}

// --- qbittorrent_add

type addArgs struct {
	Source   string `json:"source" jsonschema:"minLength=1,maxLength=8192,description=A magnet: link or the http(s) URL of a .torrent file"`
	Category string `json:"category,omitempty" jsonschema:"maxLength=200,description=qBittorrent category to file it under (created if missing); omit it for none"`
	SavePath string `json:"save_path,omitempty" jsonschema:"maxLength=1024,description=Absolute folder on the qBittorrent machine to download into; omit it for qBittorrent's default (or the category's)"`
	Paused   *bool  `json:"paused,omitempty" jsonschema:"description=true adds the torrent without starting it; omit it for qBittorrent's default (usually start)"`
}

type addResult struct {
	Result string `json:"result"` // "added", "already present" or "requested"
	Hash   string `json:"hash,omitempty"`
	Name   string `json:"name,omitempty"`
	State  string `json:"state,omitempty"`
	Note   string `json:"note,omitempty"`
}

func (q *qbittorrent) add(ctx context.Context, a addArgs) (addResult, error) {
	if q.err != nil {
		return addResult{}, q.err
	}
	src, err := source.Check(a.Source)
	if err != nil {
		return addResult{}, err
	}
	// A magnet link names its torrent; a URL's torrent is told apart from
	// those that were already the newest.
	hash := magnetHash(src)
	var before []torrent
	if hash != "" {
		have, err := q.torrents(ctx, url.Values{"hashes": {hash}})
		if err != nil {
			return addResult{}, err
		}
		if len(have) > 0 {
			t := have[0]
			return addResult{Result: "already present", Hash: t.Hash, Name: httpapi.Text(t.Name, 150), State: state(t.State).word}, nil
		}
	} else if before, err = q.torrents(ctx, newest()); err != nil {
		return addResult{}, err
	}

	form := url.Values{"urls": {src}}
	if c := strings.TrimSpace(a.Category); c != "" {
		form.Set("category", c)
	}
	if p := strings.TrimSpace(a.SavePath); p != "" {
		form.Set("savepath", p)
	}
	if a.Paused != nil {
		v := strconv.FormatBool(*a.Paused)
		form.Set("paused", v)  // before qBittorrent 5.0
		form.Set("stopped", v) // 5.0 and later
	}
	answer, err := q.c.post(ctx, "torrents/add", form)
	switch {
	case errors.Is(err, httpapi.ErrConflict) || (err == nil && answer == "Fails."):
		// Fails. up to 5.1, 409 since: nothing of the source was added.
		return addResult{}, errors.New("qBittorrent did not add the torrent: it has it already, or cannot use the source")
	case err != nil:
		return addResult{}, err
	}
	t, ok, err := q.added(ctx, hash, before)
	switch {
	case err != nil:
		return addResult{}, err
	case !ok:
		return addResult{Result: "requested", Note: "qBittorrent took the source but lists no new torrent yet: it may still be fetching the .torrent file, have failed to (its log says why), or have this torrent already; qbittorrent_list shows it once it is there"}, nil
	}
	return addResult{Result: "added", Hash: t.Hash, Name: httpapi.Text(t.Name, 150), State: state(t.State).word}, nil
}

// newest asks torrents/info for the torrents added last.
func newest() url.Values {
	return url.Values{"sort": {"added_on"}, "reverse": {"true"}, "limit": {"20"}}
}

// added waits, addWait at most, for the torrent an add made to be listed:
// the one with hash, or else a newest one that was not there before. (A
// torrent someone else adds at the same moment could be taken for it.)
func (q *qbittorrent) added(ctx context.Context, hash string, before []torrent) (torrent, bool, error) {
	known := map[string]bool{}
	for _, t := range before {
		known[t.Hash] = true
	}
	deadline := time.Now().Add(addWait)
	if d, ok := ctx.Deadline(); ok && d.Add(-time.Second).Before(deadline) {
		deadline = d.Add(-time.Second) // an answer in time beats a complete one too late
	}
	query := newest()
	if hash != "" {
		query = url.Values{"hashes": {hash}}
	}
	for {
		ts, err := q.torrents(ctx, query)
		if err != nil {
			return torrent{}, false, err
		}
		for _, t := range ts {
			if !known[t.Hash] && (hash == "" || strings.EqualFold(t.Hash, hash)) {
				return t, true, nil
			}
		}
		if time.Now().Add(addPoll).After(deadline) {
			return torrent{}, false, nil
		}
		select {
		case <-ctx.Done():
			return torrent{}, false, ctx.Err()
		case <-time.After(addPoll):
		}
	}
}

// magnetHash is the v1 info hash a magnet link names (xt=urn:btih: with 40
// hex digits or 32 base32 characters) in lower-case hex, as torrents/info
// lists it; "" when it names none (a v2-only link).
func magnetHash(source string) string {
	u, err := url.Parse(source)
	if err != nil || !strings.EqualFold(u.Scheme, "magnet") {
		return ""
	}
	q, _ := url.ParseQuery(u.RawQuery)
	for _, xt := range q["xt"] {
		if len(xt) < 9 || !strings.EqualFold(xt[:9], "urn:btih:") {
			continue
		}
		switch v := xt[9:]; len(v) {
		case 40:
			if isHash(v) {
				return strings.ToLower(v)
			}
		case 32:
			if b, err := base32.StdEncoding.DecodeString(strings.ToUpper(v)); err == nil {
				return hex.EncodeToString(b)
			}
		}
	}
	return ""
}

// isHash reports whether s is a torrent's hash as torrents/info lists it:
// 40 hex digits (the v1 info hash, or a v2 one cut to that length).
func isHash(s string) bool {
	if len(s) != 40 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// --- qbittorrent_pause, qbittorrent_resume, qbittorrent_remove

type torrentsArgs struct {
	Torrents []string `json:"torrents" jsonschema:"minItems=1,maxItems=100,description=Torrents by hash as qbittorrent_list shows them or by name (a part of the name that only one torrent has is enough)"`
}

type removeArgs struct {
	Torrents    []string `json:"torrents" jsonschema:"minItems=1,maxItems=100,description=Torrents by hash as qbittorrent_list shows them or by name (a part of the name that only one torrent has is enough)"`
	DeleteFiles bool     `json:"delete_files,omitempty" jsonschema:"default=false,description=true also deletes the downloaded files; false keeps them on disk"`
}

type torrentRef struct {
	Hash string `json:"hash"`
	Name string `json:"name"`
}

type actionResult struct {
	Done         string       `json:"done"` // what happened: paused, resumed, removed
	Torrents     []torrentRef `json:"torrents"`
	FilesDeleted bool         `json:"files_deleted,omitempty"`
}

func (q *qbittorrent) pause(ctx context.Context, a torrentsArgs) (actionResult, error) {
	return q.act(ctx, a.Torrents, "paused", func(hashes string) error {
		return q.toggle(ctx, "stop", "pause", hashes)
	})
}

func (q *qbittorrent) resume(ctx context.Context, a torrentsArgs) (actionResult, error) {
	return q.act(ctx, a.Torrents, "resumed", func(hashes string) error {
		return q.toggle(ctx, "start", "resume", hashes)
	})
}

func (q *qbittorrent) remove(ctx context.Context, a removeArgs) (actionResult, error) {
	res, err := q.act(ctx, a.Torrents, "removed", func(hashes string) error {
		_, err := q.c.post(ctx, "torrents/delete", url.Values{"hashes": {hashes}, "deleteFiles": {strconv.FormatBool(a.DeleteFiles)}})
		return err
	})
	res.FilesDeleted = err == nil && a.DeleteFiles
	return res, err
}

// toggle runs torrents/<modern>, or torrents/<old> on a qBittorrent before
// 5.0, which knows only that name (each answers 404 to the other's);
// whichever answered is tried first from then on.
func (q *qbittorrent) toggle(ctx context.Context, modern, old, hashes string) error {
	first, second := modern, old
	if q.legacy.Load() {
		first, second = old, modern
	}
	form := url.Values{"hashes": {hashes}}
	_, err := q.c.post(ctx, "torrents/"+first, form)
	if !errors.Is(err, httpapi.ErrNotFound) {
		return err
	}
	if _, err := q.c.post(ctx, "torrents/"+second, form); err != nil {
		return err
	}
	q.legacy.Store(second == old)
	return nil
}

// act runs do on the hashes of the torrents refs name, once every ref names
// exactly one torrent: qBittorrent skips unknown hashes silently, which
// would let the model believe it acted on them.
func (q *qbittorrent) act(ctx context.Context, refs []string, done string, do func(hashes string) error) (actionResult, error) {
	found, err := q.find(ctx, refs, done)
	if err != nil {
		return actionResult{}, err
	}
	res := actionResult{Done: done, Torrents: []torrentRef{}}
	hashes := make([]string, 0, len(found))
	for _, t := range found {
		hashes = append(hashes, t.Hash)
		res.Torrents = append(res.Torrents, torrentRef{Hash: t.Hash, Name: httpapi.Text(t.Name, 150)})
	}
	if err := do(strings.Join(hashes, "|")); err != nil {
		return actionResult{}, err
	}
	return res, nil
}

// find resolves refs to torrents, sorted by name, or says which refs name
// none or more than one.
func (q *qbittorrent) find(ctx context.Context, refs []string, done string) ([]torrent, error) {
	if len(refs) == 0 {
		// The schema asks for one at least; "all" would be every torrent.
		return nil, errors.New("no torrents given; qbittorrent_list shows their hashes and names")
	}
	refs = slices.Clone(refs)
	var hashes []string
	for i, r := range refs {
		refs[i] = strings.TrimSpace(r)
		switch {
		case refs[i] == "":
			return nil, fmt.Errorf("torrents holds an empty name; give hashes or names as qbittorrent_list shows them; nothing was %s", done)
		case isHash(refs[i]):
			hashes = append(hashes, strings.ToLower(refs[i]))
		}
	}
	var query url.Values
	if len(hashes) == len(refs) {
		// Hashes alone need no names: only those torrents are asked for.
		slices.Sort(hashes)
		query = url.Values{"hashes": {strings.Join(slices.Compact(hashes), "|")}}
	}
	all, err := q.torrents(ctx, query)
	if err != nil {
		return nil, err
	}
	var found []torrent
	var missing, ambiguous []string
	for _, r := range refs {
		switch m := match(all, r); len(m) {
		case 0:
			missing = append(missing, strconv.Quote(httpapi.Text(r, 100)))
		case 1:
			if !slices.ContainsFunc(found, func(t torrent) bool { return t.Hash == m[0].Hash }) {
				found = append(found, m[0])
			}
		default:
			slices.SortFunc(m, func(a, b torrent) int { return cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)) })
			names := make([]string, 0, 3)
			for _, t := range m[:min(3, len(m))] {
				names = append(names, httpapi.Text(t.Name, 60))
			}
			if len(m) > 3 {
				names = append(names, "...")
			}
			ambiguous = append(ambiguous, fmt.Sprintf("%q matches %d torrents (%s)", httpapi.Text(r, 100), len(m), strings.Join(names, ", ")))
		}
	}
	var why []string
	if len(missing) > 0 {
		why = append(why, "qBittorrent has no torrent matching "+strings.Join(missing, ", ")+" (qbittorrent_list shows the hashes and names)")
	}
	if len(ambiguous) > 0 {
		why = append(why, strings.Join(ambiguous, "; ")+": give the hash or more of the name")
	}
	if len(why) > 0 {
		return nil, fmt.Errorf("%s; nothing was %s", strings.Join(why, "; "), done)
	}
	slices.SortFunc(found, func(a, b torrent) int {
		return cmp.Or(cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)), cmp.Compare(a.Hash, b.Hash))
	})
	return found, nil
}

// match finds the torrents ref names: by hash; else by whole name, case
// aside; else by a part of the name.
func match(all []torrent, ref string) []torrent {
	if isHash(ref) {
		return slices.DeleteFunc(slices.Clone(all), func(t torrent) bool { return !strings.EqualFold(t.Hash, ref) })
	}
	var whole, part []torrent
	lower := strings.ToLower(ref)
	for _, t := range all {
		switch name := strings.ToLower(t.Name); {
		case name == lower:
			whole = append(whole, t)
		case strings.Contains(name, lower):
			part = append(part, t)
		}
	}
	if len(whole) > 0 {
		return whole
	}
	return part
}

// --- qbittorrent_transfer

type noArgs struct{}

// transferInfo is transfer/info's answer.
type transferInfo struct {
	DLSpeed    int64  `json:"dl_info_speed"`
	DLData     int64  `json:"dl_info_data"`
	UPSpeed    int64  `json:"up_info_speed"`
	UPData     int64  `json:"up_info_data"`
	DLLimit    int64  `json:"dl_rate_limit"`
	UPLimit    int64  `json:"up_rate_limit"`
	DHTNodes   int    `json:"dht_nodes"`
	Connection string `json:"connection_status"`
}

type transferResult struct {
	Connection string `json:"connection"`
	Down       string `json:"down"`
	Up         string `json:"up"`
	Downloaded string `json:"downloaded_this_session"`
	Uploaded   string `json:"uploaded_this_session"`
	DownLimit  string `json:"down_limit"`
	UpLimit    string `json:"up_limit"`
	DHTNodes   int    `json:"dht_nodes"`
}

// connections explain connection_status's values.
var connections = map[string]string{
	"connected":    "connected",
	"firewalled":   "firewalled: peers cannot connect in (check the listening port's forwarding)",
	"disconnected": "disconnected: no network",
}

func (q *qbittorrent) transfer(ctx context.Context, _ noArgs) (transferResult, error) {
	if q.err != nil {
		return transferResult{}, q.err
	}
	var t transferInfo
	if err := q.c.get(ctx, "transfer/info", nil, &t); err != nil {
		return transferResult{}, err
	}
	conn, ok := connections[t.Connection]
	if !ok {
		conn = httpapi.Text(t.Connection, 40)
	}
	return transferResult{
		Connection: conn,
		Down:       human.Binary.Rate(t.DLSpeed),
		Up:         human.Binary.Rate(t.UPSpeed),
		Downloaded: human.Binary.Size(t.DLData),
		Uploaded:   human.Binary.Size(t.UPData),
		DownLimit:  limit(t.DLLimit),
		UpLimit:    limit(t.UPLimit),
		DHTNodes:   t.DHTNodes,
	}, nil
}

// limit words a rate limit; qBittorrent gives 0 for none.
func limit(n int64) string {
	if n <= 0 {
		return "none"
	}
	return human.Binary.Rate(n)
}

// --- the downloads context

// downloads is one line for the system prompt, e.g. "2 downloading at 3.0
// MiB/s, nearest done in 12m; 5 seeding".
func (q *qbittorrent) downloads(ctx context.Context) (string, error) {
	all, err := q.torrents(ctx, nil)
	if err != nil {
		return "", err
	}
	return downloadsLine(all), nil
}

func downloadsLine(all []torrent) string {
	d := human.Downloads{Nearest: -1}
	for _, t := range all {
		switch k := state(t.State).kind; {
		case t.State == "queuedDL":
			d.Queued++
		case k == kindDown:
			d.Downloading++
			d.Speed += t.DLSpeed
			if t.ETA < maxETA { // qBittorrent's "cannot tell"
				d.Soonest(t.ETA)
			}
		case k == kindSeed && t.State != "queuedUP":
			d.Seeding++
		case k == kindError:
			d.Errors++
		}
	}
	return d.Line(human.Binary)
}
