package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mmcpd/mmcpd/pkg/server"
)

const sessionsUsage = `usage: mmcpd sessions [--addr HOST:PORT] [--limit N | --all]   list sessions, most recent first
       mmcpd sessions show [--addr HOST:PORT] ID                each turn of a session and its steps
       mmcpd sessions rm [--addr HOST:PORT] ID                  delete a session
`

// sessions lists, shows or deletes sessions of a running daemon, through
// its HTTP API with the token, as chat does.
func sessions(args []string, stdout, stderr io.Writer) error {
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("sessions "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, sessionsUsage) }
	cf := clientFlags{
		addr:    fs.String("addr", "", "daemon address (default: MMCP_LISTEN_ADDR)"),
		timeout: fs.Duration("timeout", 30*time.Second, "give up after this long"),
	}
	var limit *int
	var all *bool
	if sub == "list" {
		limit = fs.Int("limit", 20, "how many sessions to list (1 to 100)")
		all = fs.Bool("all", false, "list every session")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	want := 1
	switch sub {
	case "list":
		want = 0
		if *limit < 1 || *limit > 100 {
			return usageError{errors.New("--limit must be from 1 to 100")}
		}
	case "show", "rm":
	default:
		return usageError{fmt.Errorf("unknown sessions command %q\n%s", sub, sessionsUsage)}
	}
	if fs.NArg() != want || want == 1 && strings.TrimSpace(fs.Arg(0)) == "" {
		return usageError{errors.New(strings.TrimSuffix(sessionsUsage, "\n"))}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	switch sub {
	case "show":
		return showSession(c, fs.Arg(0), stdout)
	case "rm":
		if err := c.call(http.MethodDelete, "/v1/sessions/"+url.PathEscape(fs.Arg(0)), nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted session %s\n", fs.Arg(0))
		return nil
	}
	return listSessions(c, *limit, *all, stdout, stderr)
}

func listSessions(c client, limit int, all bool, stdout, stderr io.Writer) error {
	var list []server.SessionList
	cursor := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if all {
			q.Set("limit", "100")
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page server.SessionList
		if err := c.call(http.MethodGet, "/v1/sessions?"+q.Encode(), &page); err != nil {
			return err
		}
		list = append(list, page)
		cursor = page.NextCursor
		if !all || cursor == "" {
			break
		}
	}
	n := 0
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for _, page := range list {
		for _, s := range page.Sessions {
			if n == 0 {
				fmt.Fprintln(tw, "ID\tUPDATED\tTITLE")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.ID, s.Updated.Local().Format("2006-01-02 15:04"), oneLine(s.Title, 80))
			n++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintln(stdout, "no sessions")
	}
	if cursor != "" {
		fmt.Fprintf(stderr, "(the %d most recent; more with --limit N or --all)\n", n)
	}
	return nil
}

// showSession prints a session as a person reads it: each turn's question,
// the steps with their thought and one line of result, and the answer.
func showSession(c client, id string, stdout io.Writer) error {
	var v server.SessionView
	if err := c.call(http.MethodGet, "/v1/sessions/"+url.PathEscape(id), &v); err != nil {
		return err
	}
	fmt.Fprintln(stdout, v.Title)
	fmt.Fprintf(stdout, "session %s, created %s, updated %s\n", v.ID, v.Created.Local().Format(time.DateTime), v.Updated.Local().Format(time.DateTime))
	for i, t := range v.Turns {
		fmt.Fprintf(stdout, "\nturn %d: %s, %s (trace %s)\n", i+1, strings.ReplaceAll(t.Status, "_", " "), t.Started.Local().Format(time.DateTime), t.TraceID)
		for _, it := range t.Items {
			switch it.Type {
			case "user":
				fmt.Fprintf(stdout, "  you: %s\n", oneLine(it.Content, resultChars))
			case "tool_call":
				fmt.Fprintf(stdout, "  step: %s %s\n", it.Tool, oneLine(string(it.Args), resultChars))
				if it.Thought != "" {
					fmt.Fprintf(stdout, "    thought: %s\n", oneLine(it.Thought, resultChars))
				}
			case "tool_result":
				fmt.Fprintf(stdout, "    result: %s\n", oneLine(it.Content, resultChars))
			case "assistant":
				// The answer whole: it is what the turn was for.
				fmt.Fprintf(stdout, "  answer: %s\n", strings.ReplaceAll(strings.TrimSpace(it.Content), "\n", "\n          "))
			}
		}
		if t.Error != "" {
			fmt.Fprintf(stdout, "  error: %s\n", oneLine(t.Error, resultChars))
		}
	}
	if len(v.Turns) == 0 {
		fmt.Fprintln(stdout, "\n(no turns)")
	}
	return nil
}

// call makes one plain JSON request to the daemon and decodes its answer
// into out (when not nil). Errors say what to do: start the daemon, set the
// token, or what the daemon said.
func (c client) call(method, path string, out any) error {
	req, err := http.NewRequest(method, reachable(c.base)+path, nil)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("no daemon at %s: start it with \"make run\" (or mmcpd serve)", c.base)
	}
	if err != nil {
		return fmt.Errorf("calling %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e server.ErrorBody
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return fmt.Errorf("daemon answered %s", resp.Status)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			e.Error.Message += "; set MMCP_API_TOKEN to the daemon's token"
		}
		return apiError(e)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding the answer of %s %s: %w", method, path, err)
	}
	return nil
}
