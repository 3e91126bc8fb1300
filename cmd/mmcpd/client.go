package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// client talks to a running daemon.
type client struct {
	base  string
	token string
	http  *http.Client
	// events, when set, gets each event of a turn as it arrives.
	events func(event)
}

// event is one Server-Sent Event of a streamed turn.
type event struct {
	name string
	data []byte
}

func (c client) chat(req server.ChatRequest) (*server.ChatResponse, error) {
	return c.stream("/v1/chat", req)
}

func (c client) respond(req server.RespondRequest) (*server.ChatResponse, error) {
	return c.stream("/v1/chat/respond", req)
}

// stream posts req asking for the turn's events, hands each to c.events as
// it arrives, and returns the answer the done event carries, or the error of
// the error event.
func (c client) stream(path string, req any) (*server.ChatResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequest(http.MethodPost, reachable(c.base)+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
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
	if resp.StatusCode != http.StatusOK {
		// Refused before the turn started: a plain JSON error.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e server.ErrorBody
		if json.Unmarshal(data, &e) == nil && e.Error.Code != "" {
			return nil, apiError(e)
		}
		return nil, fmt.Errorf("daemon answered %s", resp.Status)
	}
	return readEvents(resp.Body, c.events)
}

func apiError(e server.ErrorBody) error {
	return fmt.Errorf("%s (%s, trace %s)", e.Error.Message, e.Error.Code, e.TraceID)
}

// readEvents reads a turn's Server-Sent Events until its done or error
// event, handing the others to on (when set). Comments (the daemon's
// heartbeats) are skipped.
func readEvents(r io.Reader, on func(event)) (*server.ChatResponse, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20) // the done event holds every step's result
	var ev event
	for sc.Scan() {
		line := sc.Text()
		if line != "" {
			if name, ok := strings.CutPrefix(line, "event:"); ok {
				ev.name = strings.TrimSpace(name)
			} else if data, ok := strings.CutPrefix(line, "data:"); ok {
				if len(ev.data) > 0 {
					ev.data = append(ev.data, '\n') // data lines join with newlines
				}
				ev.data = append(ev.data, strings.TrimPrefix(data, " ")...)
			}
			continue
		}
		switch ev.name {
		case "":
		case "done":
			var out server.ChatResponse
			if err := json.Unmarshal(ev.data, &out); err != nil {
				return nil, fmt.Errorf("decoding the answer: %w", err)
			}
			return &out, nil
		case "error":
			var e server.ErrorBody
			if err := json.Unmarshal(ev.data, &e); err != nil || e.Error.Code == "" {
				return nil, fmt.Errorf("the turn failed, and its error event is unreadable: %s", ev.data)
			}
			return nil, apiError(e)
		default:
			if on != nil {
				on(ev)
			}
		}
		ev = event{}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the turn's events: %w", err)
	}
	return nil, errors.New("the daemon closed the stream before the turn ended")
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

// resultChars bounds the one line a step's result, error or arguments get.
const resultChars = 300

// turnPrinter shows a streamed turn as it happens. With steps, each step's
// call and thought, and one line of its result, are printed as their events
// arrive; the answer comes last. On a terminal, a status line says what the
// turn is waiting on, and for how long.
type turnPrinter struct {
	stdout, stderr io.Writer
	steps          bool
	status         *statusLine // nil when stdout or stderr is no terminal
	printed        bool        // a step was printed: a blank line before the answer
	// answer is the answer text printed so far, as the model writes it;
	// answering says it is being printed now.
	answer    strings.Builder
	answering bool
}

// newTurnPrinter prints to stdout and stderr; call end when the turn is over.
func newTurnPrinter(stdout, stderr io.Writer, steps bool) *turnPrinter {
	p := &turnPrinter{stdout: stdout, stderr: stderr, steps: steps}
	// Only for a person watching: a script or a test reads clean output.
	if isTerminal(stdout) && isTerminal(stderr) {
		p.status = newStatusLine(stderr)
	}
	return p
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && terminal(f)
}

func (p *turnPrinter) event(ev event) {
	var e loop.Event
	if json.Unmarshal(ev.data, &e) != nil {
		return // an event this client does not know
	}
	switch e.Type {
	case loop.EventAnswerDelta:
		p.streamAnswer(e.Step, e.Text)
		return
	case loop.EventAnswerRetracted:
		p.retractAnswer()
		return
	}
	switch e.Type {
	case loop.EventStepStart, loop.EventValidationError:
		p.status.show("waiting on the model")
	case loop.EventToolStart:
		p.status.show("running " + e.Action)
	case loop.EventModelReply, loop.EventToolEnd:
		p.status.clear()
	}
	if !p.steps {
		return
	}
	switch e.Type {
	case loop.EventModelReply:
		if len(e.Calls) > 0 {
			names := make([]string, len(e.Calls))
			for i, c := range e.Calls {
				names[i] = c.Action + " " + oneLine(string(c.Args), resultChars/len(e.Calls))
			}
			p.line("step %d: %d calls at once: %s (model %s)", e.Step, len(e.Calls), strings.Join(names, "; "), e.Duration.Round(time.Millisecond))
			if e.Thought != "" {
				p.line("  thought: %s", e.Thought)
			}
			return
		}
		if e.Action == "" {
			return // an invalid reply: its validation_error follows
		}
		if p.answering {
			return // the answer is on the screen already, after its step line
		}
		p.line("step %d: %s %s (model %s)", e.Step, e.Action, oneLine(string(e.Args), resultChars), e.Duration.Round(time.Millisecond))
		if e.Thought != "" {
			p.line("  thought: %s", e.Thought)
		}
	case loop.EventValidationError:
		p.line("  invalid reply, asking again: %s", oneLine(strings.Join(e.Problems, "; "), resultChars))
	case loop.EventToolRetry:
		p.line("  %s failed, again in %s: %s", e.Action, e.Wait, oneLine(e.Error, resultChars))
	case loop.EventToolEnd:
		who := ""
		if e.Batch > 0 {
			who = fmt.Sprintf("%s (call %d of %d) ", e.Action, e.Call, e.Batch)
		}
		if e.Error != "" {
			p.line("  %serror: %s (%s)", who, oneLine(e.Error, resultChars), e.Duration.Round(time.Millisecond))
			return
		}
		p.line("  %sresult: %s (%s)", who, oneLine(e.Observation, resultChars), e.Duration.Round(time.Millisecond))
	}
}

func (p *turnPrinter) line(format string, args ...any) {
	p.status.clear()
	fmt.Fprintf(p.stdout, format+"\n", args...)
	p.printed = true
}

// streamAnswer prints the answer's next piece as the model writes it.
func (p *turnPrinter) streamAnswer(step int, text string) {
	if !p.answering {
		p.status.clear()
		if p.steps {
			p.line("step %d: final_response", step)
		}
		if p.printed {
			fmt.Fprintln(p.stdout)
		}
		p.answering = true
	}
	fmt.Fprint(p.stdout, text)
	p.answer.WriteString(text)
}

// retractAnswer ends an answer the daemon found invalid after printing it:
// what is on the screen cannot be taken back, so it is said to be withdrawn,
// and the corrected answer follows.
func (p *turnPrinter) retractAnswer() {
	if !p.answering {
		return
	}
	fmt.Fprintln(p.stdout)
	fmt.Fprintln(p.stderr, "(that answer was not valid and is withdrawn; the model is asked again)")
	p.answer.Reset()
	p.answering = false
	p.printed = true
}

// end erases the status line for good; the turn is over.
func (p *turnPrinter) end() {
	p.status.stop()
}

// outcome prints an answer, or what the agent wants to do and how to allow
// it.
func (p *turnPrinter) outcome(res *server.ChatResponse) {
	p.end()
	if p.answering && res.Type != server.TypeActionRequest && p.answer.String() == res.Answer {
		fmt.Fprintln(p.stdout) // printed as it was written
		fmt.Fprintf(p.stderr, "(session %s, trace %s)\n", res.SessionID, res.TraceID)
		return
	}
	if p.answering {
		fmt.Fprintln(p.stdout)
	}
	if p.printed || p.answering {
		fmt.Fprintln(p.stdout)
	}
	stdout := p.stdout
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
	fmt.Fprintf(p.stderr, "(session %s, trace %s)\n", res.SessionID, res.TraceID)
}

// statusLine is one line at the bottom of a terminal, such as "waiting on
// the model… 12s", redrawn every second and erased before anything else is
// printed. Its methods do nothing on a nil statusLine.
type statusLine struct {
	w          io.Writer
	mu         sync.Mutex
	label      string // "" when nothing is shown
	since      time.Time
	quit, done chan struct{}
	stopOnce   sync.Once
}

func newStatusLine(w io.Writer) *statusLine {
	s := &statusLine{w: w, quit: make(chan struct{}), done: make(chan struct{})}
	go s.tick()
	return s
}

func (s *statusLine) tick() {
	defer close(s.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			s.mu.Lock()
			s.draw()
			s.mu.Unlock()
		}
	}
}

func (s *statusLine) draw() {
	if s.label != "" {
		// \r goes back to the line's start, \033[K erases what is left of it.
		fmt.Fprintf(s.w, "\r%s… %ds\033[K", s.label, int(time.Since(s.since).Seconds()))
	}
}

// show says what the turn waits on now; the time counts from here.
func (s *statusLine) show(label string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.label, s.since = label, time.Now()
	s.draw()
}

// clear erases the line, so that what is printed next starts clean.
func (s *statusLine) clear() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.label != "" {
		fmt.Fprint(s.w, "\r\033[K")
		s.label = ""
	}
}

// stop erases the line and stops redrawing it.
func (s *statusLine) stop() {
	if s == nil {
		return
	}
	s.stopOnce.Do(func() {
		close(s.quit)
		<-s.done
	})
	s.clear()
}

// oneLine is s with its white space folded to single spaces, cut to n
// characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		return string([]rune(s)[:n]) + "…"
	}
	return s
}

func indentJSON(b []byte) []byte {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		return b
	}
	return out.Bytes()
}
