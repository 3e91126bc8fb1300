package arr

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mmcpd/mmcpd/pkg/plugins/httpapi"
)

// How many items the model sees at most, per tool.
const (
	LookupSize   = 8
	QueueSize    = 20
	CalendarSize = 20
)

// NoArgs is the arguments of a tool that takes none.
type NoArgs struct{}

// QueueRecord is the part of a queue record both services share.
type QueueRecord struct {
	Release        string  `json:"title"`
	Size           float64 `json:"size"`
	SizeLeft       float64 `json:"sizeleft"`
	TimeLeft       string  `json:"timeleft"`
	Status         string  `json:"status"`
	State          string  `json:"trackedDownloadState"`
	Health         string  `json:"trackedDownloadStatus"`
	ErrorMessage   string  `json:"errorMessage"`
	StatusMessages []struct {
		Title    string   `json:"title"`
		Messages []string `json:"messages"`
	} `json:"statusMessages"`
}

// QueueItem is a download as the model sees it: enough to say how far it
// is and, when it is stuck, why.
type QueueItem struct {
	Title    string   `json:"title"`
	Release  string   `json:"release,omitempty"`
	Progress float64  `json:"progress_percent"`
	Size     string   `json:"size,omitempty"`
	TimeLeft string   `json:"time_left,omitempty"`
	Status   string   `json:"status"`
	State    string   `json:"state,omitempty"`
	Health   string   `json:"health,omitempty"`
	Error    string   `json:"error,omitempty"`
	Messages []string `json:"messages,omitempty"`
}

// Item is the record under title ("The Expanse S02E05"), or under its
// release name when the service could not tell what it is.
func (r QueueRecord) Item(title string) QueueItem {
	it := QueueItem{
		Title:    title,
		Release:  httpapi.Text(r.Release, 150),
		Size:     Bytes(r.Size),
		TimeLeft: timeLeft(r.TimeLeft),
		Status:   r.Status,
		State:    r.State,
		Error:    httpapi.Text(r.ErrorMessage, 300),
	}
	if title == "" || title == r.Release {
		it.Title, it.Release = it.Release, ""
	}
	if r.Size > 0 {
		it.Progress = math.Round((r.Size-r.SizeLeft)/r.Size*1000) / 10
	}
	if r.Health != "ok" {
		it.Health = r.Health // "ok" on every healthy item would only cost tokens
	}
	for _, m := range r.StatusMessages {
		text := strings.Join(m.Messages, "; ")
		if text == "" {
			continue
		}
		if m.Title != "" && m.Title != r.Release {
			text = m.Title + ": " + text
		}
		if len(it.Messages) < 5 {
			it.Messages = append(it.Messages, httpapi.Text(text, 300))
		}
	}
	return it
}

// Queue fetches the first page of the download queue, with query's extra
// parameters, and makes each record an item.
func Queue[R any](ctx context.Context, c *Client, query url.Values, item func(R) QueueItem) (List[QueueItem], error) {
	query.Set("pageSize", strconv.Itoa(QueueSize))
	var page struct {
		TotalRecords int `json:"totalRecords"`
		Records      []R `json:"records"`
	}
	if err := c.Get(ctx, "/queue", query, &page); err != nil {
		return List[QueueItem]{}, err
	}
	items := make([]QueueItem, len(page.Records))
	for i, r := range page.Records {
		items[i] = item(r)
	}
	return Bounded(items, QueueSize, page.TotalRecords), nil
}

// Bytes is a size as people read it: "1.4 GiB".
func Bytes(n float64) string {
	if n <= 0 {
		return ""
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for ; n >= 1024 && i < len(units)-1; i++ {
		n /= 1024
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}

// timeLeft turns a .NET TimeSpan ("1.02:03:04.5", "00:12:30") into "26h3m5s";
// nothing left is "", anything else is passed on as it came.
func timeLeft(s string) string {
	head, rest, ok := strings.Cut(s, ":")
	mins, secs, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return s
	}
	days, hours, hasDays := strings.Cut(head, ".")
	if !hasDays {
		days, hours = "0", head
	}
	d, err1 := strconv.Atoi(days)
	h, err2 := strconv.Atoi(hours)
	m, err3 := strconv.Atoi(mins)
	sec, err4 := strconv.ParseFloat(secs, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return s
	}
	total := time.Duration(d)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute +
		time.Duration(sec*float64(time.Second))
	if total <= 0 {
		return "" // done, or the client cannot tell
	}
	return total.Round(time.Second).String()
}

// CalendarArgs are the calendar tools' arguments.
type CalendarArgs struct {
	Days int `json:"days,omitempty" jsonschema:"minimum=1,maximum=60,default=7,description=How many days to look ahead; today is the first"`
}

// Window is the calendar's span in env's zone: from the start of today for
// days days (7 when 0).
func (e Env) Window(days int) (start, end time.Time) {
	if days <= 0 {
		days = 7
	}
	now := e.Now().In(e.Zone)
	start = time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, e.Zone)
	return start, start.AddDate(0, 0, days)
}
