package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/mmcpd/mmcpd/pkg/server"
)

// client talks to a running daemon.
type client struct {
	base  string
	token string
	http  *http.Client
}

func (c client) chat(req server.ChatRequest) (*server.ChatResponse, error) {
	return c.post("/v1/chat", req)
}

func (c client) respond(req server.RespondRequest) (*server.ChatResponse, error) {
	return c.post("/v1/chat/respond", req)
}

func (c client) post(path string, req any) (*server.ChatResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequest(http.MethodPost, reachable(c.base)+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(hreq)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("no daemon at %s: start it with \"make run\" (or mmcpd serve)", c.base)
	}
	if err != nil {
		return nil, fmt.Errorf("calling %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e server.ErrorBody
		if json.Unmarshal(data, &e) == nil && e.Error.Code != "" {
			return nil, fmt.Errorf("%s (%s, trace %s)", e.Error.Message, e.Error.Code, e.TraceID)
		}
		return nil, fmt.Errorf("daemon answered %s", resp.Status)
	}
	var out server.ChatResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decoding the answer: %w", err)
	}
	return &out, nil
}

// reachable turns a base URL made from a listen address into one this
// machine can call: a wildcard host (":8787", "0.0.0.0:8787", "[::]:8787")
// becomes loopback, which the daemon accepts as Host; an empty Host it does
// not.
func reachable(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base // the request fails with the parse error
	}
	switch host := u.Hostname(); {
	case host == "" || host == "0.0.0.0":
		u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	case host == "::":
		u.Host = net.JoinHostPort("::1", u.Port())
	}
	return u.String()
}

// printOutcome prints an answer, or what the agent wants to do and how to
// allow it.
func printOutcome(stdout, stderr io.Writer, res *server.ChatResponse, steps bool) {
	if steps {
		printSteps(stdout, res.Steps)
	}
	if res.Type == server.TypeActionRequest {
		fmt.Fprintf(stdout, "The agent wants to run %s %s\n", res.Tool, res.Args)
		if res.Explanation != "" {
			fmt.Fprintf(stdout, "  because: %s\n", res.Explanation)
		}
		fmt.Fprintf(stdout, "Allow it:  mmcpd respond --session %s --approval %s approve\nRefuse it: mmcpd respond --session %s --approval %s deny\n",
			res.SessionID, res.ApprovalID, res.SessionID, res.ApprovalID)
	} else {
		fmt.Fprintln(stdout, res.Answer)
	}
	fmt.Fprintf(stderr, "(session %s, trace %s)\n", res.SessionID, res.TraceID)
}

func printSteps(w io.Writer, steps []server.Step) {
	for _, s := range steps {
		fmt.Fprintf(w, "step %d: %s %s (%s)\n", s.Number, s.Action, s.Args, s.Duration)
		if s.Thought != "" {
			fmt.Fprintf(w, "  thought: %s\n", s.Thought)
		}
		if s.Retries > 0 {
			fmt.Fprintf(w, "  re-asked %d times after invalid replies\n", s.Retries)
		}
		switch {
		case s.Error != "":
			fmt.Fprintf(w, "  error: %s\n", s.Error)
		case s.Observation != "":
			fmt.Fprintf(w, "  result: %s\n", strings.ReplaceAll(clip(s.Observation, 400), "\n", "\n          "))
		}
	}
	fmt.Fprintln(w)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

func indentJSON(b []byte) []byte {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		return b
	}
	return out.Bytes()
}
