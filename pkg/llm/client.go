// Package llm owns the model client: one chat call to Ollama with the union
// schema as format, retries on overload, and errors a person can act on.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ollama/ollama/api"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/schema"
)

// DefaultNumCtx is the context size sent when Options.NumCtx is 0. Ollama's
// own default is small and it silently cuts long prompts from the front, so
// a num_ctx is always sent.
const DefaultNumCtx = 8192

// MaxReplyBytes bounds the content of one reply: the decoder refuses anything
// longer, so reading more would only cost memory. It holds while the reply is
// read, not after.
const MaxReplyBytes = schema.MaxReplyBytes

// maxBodyBytes bounds the bytes read from one response body, whatever its
// lines hold: without it a line with no newline would be buffered before its
// content could be counted, and lines with no content would never end. A
// reply at the content cap in one line takes at most 6 times that on the wire
// (JSON's worst escaping, \u00XX for every byte) plus the other fields, which
// 64 KiB covers many times over. Streamed, Ollama spends ~130 bytes of
// envelope per token: the bound holds about 12,000 tokens, more than a reply
// can have in the default num_ctx (8192), and a longer reply ends here with
// ErrReplyTooLarge.
const maxBodyBytes = 6*MaxReplyBytes + 64<<10

// maxBackoff caps the doubling so that a large Retries setting cannot turn
// into waits of minutes or hours between two attempts.
const maxBackoff = time.Minute

// DefaultDownFreshness is how long Ollama, once a call found it unreachable,
// is taken as still down: a chat then tries once instead of spending seconds
// in retries (1+2+4 s by default) that readiness already knows are in vain.
// Probes of /readyz come every 10 s or so (Kubernetes' default), so 30 s
// spans a few of them; one attempt is still made, so a server that came
// back within that time is found at once.
const DefaultDownFreshness = 30 * time.Second

// Options configures a Client.
type Options struct {
	Host        string  // base URL, e.g. http://127.0.0.1:11434
	Model       string  // e.g. qwen2.5:7b-instruct
	NumCtx      int     // context size in tokens; 0 means DefaultNumCtx
	Temperature float64 // sampling temperature
	// Timeout bounds a check, and how long a chat may wait for its first
	// piece (the prompt is read then, and a model loaded); 0 means none.
	Timeout time.Duration
	// IdleTimeout bounds the silence between two pieces of a reply once
	// the first came: a model that keeps writing is never cut, one that
	// stops is. 0 means Timeout.
	IdleTimeout time.Duration
	Retries     int           // how many times to retry 429, 503 and refused connections
	Backoff     time.Duration // first backoff delay, doubled each retry; 0 means 1s
	KeepAlive   time.Duration // how long Ollama keeps the model loaded; 0 means Ollama's default
	// ReplyReserve is how many tokens of num_ctx PromptBudget keeps free for
	// the reply; 0 means DefaultReplyReserve, or a quarter of num_ctx if
	// that is less.
	ReplyReserve int
	// DownFreshness is how long a server found unreachable is taken as
	// still down: a chat then tries once, without retries. 0 means
	// DefaultDownFreshness.
	DownFreshness time.Duration
	Log           *slog.Logger // where reachability changes go; nil means slog.Default()
	// FailFast: a refused connection is never retried here. A Pool of
	// several servers sets it, since another server answers sooner than
	// this one comes back.
	FailFast bool
}

// Client talks to one model on one Ollama server. It is safe for concurrent
// use.
type Client struct {
	api         *api.Client
	host        string
	model       string
	numCtx      int
	temperature float64
	timeout     time.Duration
	idle        time.Duration
	retries     int
	backoff     time.Duration
	keepAlive   time.Duration
	downFresh   time.Duration
	failFast    bool
	// replyReserve tokens of numCtx are left for the reply; ratio learns
	// how many characters make a token of the rest (see PromptBudget).
	replyReserve int
	ratio        *ratio
	log          *slog.Logger
	reach        reachability
}

// New checks the options and builds a Client. It does not contact the
// server: use Check for that.
func New(o Options) (*Client, error) {
	host := strings.TrimRight(strings.TrimSpace(o.Host), "/")
	u, err := url.Parse(host)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm: Ollama host %q is not an http(s) URL such as http://127.0.0.1:11434", o.Host)
	}
	model := strings.TrimSpace(o.Model)
	if model == "" {
		return nil, errors.New("llm: no model name given (for example qwen2.5:7b-instruct)")
	}
	switch {
	case o.NumCtx < 0:
		return nil, fmt.Errorf("llm: num_ctx must not be negative, got %d", o.NumCtx)
	case o.Timeout < 0:
		return nil, fmt.Errorf("llm: timeout must not be negative, got %s", o.Timeout)
	case o.IdleTimeout < 0:
		return nil, fmt.Errorf("llm: idle timeout must not be negative, got %s", o.IdleTimeout)
	case o.Retries < 0:
		return nil, fmt.Errorf("llm: retries must not be negative, got %d", o.Retries)
	case o.Backoff < 0:
		return nil, fmt.Errorf("llm: backoff must not be negative, got %s", o.Backoff)
	case o.DownFreshness < 0:
		return nil, fmt.Errorf("llm: down freshness must not be negative, got %s", o.DownFreshness)
	case o.ReplyReserve < 0:
		return nil, fmt.Errorf("llm: reply reserve must not be negative, got %d", o.ReplyReserve)
	}
	c := &Client{
		// A client of our own, for its transport. The timeout is each call's
		// context, not http.Client.Timeout: the api client drops errors met
		// while reading a body, and a deadline passed in the middle of a
		// slow reply must still be known as one.
		api:         api.NewClient(u, &http.Client{Transport: capped{transport()}}),
		host:        host,
		model:       model,
		numCtx:      o.NumCtx,
		temperature: o.Temperature,
		timeout:     o.Timeout,
		idle:        o.IdleTimeout,
		retries:     o.Retries,
		backoff:     o.Backoff,
		keepAlive:   o.KeepAlive,
		downFresh:   o.DownFreshness,
		failFast:    o.FailFast,
		log:         o.Log,
		ratio:       newRatio(),
	}
	if c.idle == 0 {
		c.idle = c.timeout
	}
	if c.downFresh == 0 {
		c.downFresh = DefaultDownFreshness
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.numCtx == 0 {
		c.numCtx = DefaultNumCtx
	}
	c.replyReserve = o.ReplyReserve
	if c.replyReserve == 0 {
		c.replyReserve = min(DefaultReplyReserve, c.numCtx/4)
	}
	if c.replyReserve >= c.numCtx {
		return nil, fmt.Errorf("llm: reply reserve %d leaves nothing of num_ctx %d for the prompt", c.replyReserve, c.numCtx)
	}
	if c.backoff == 0 {
		c.backoff = time.Second
	}
	return c, nil
}

// Model is the model name every request uses.
func (c *Client) Model() string { return c.model }

// Host is the server's base URL, without a trailing slash.
func (c *Client) Host() string { return c.host }

// Reply is the model's answer to one chat request.
type Reply struct {
	Content string // the assistant message; may be empty
	Usage   Usage
	// Backend and Model name the server and the model that wrote the
	// reply; a Pool sets Backend (its entry's name), each client Model.
	Backend string
	Model   string
	// Failover says why a Pool's call moved from the server the session was
	// on to Backend; empty when it did not move.
	Failover string
	// Truncated means the reply stopped at the end of the model's context
	// (done_reason "length"): the request turns context shifting off, so a
	// reply that fills num_ctx ends there, cut, instead of going on past
	// a context Ollama quietly shortened from the front.
	Truncated bool
}

// Usage counts what model calls cost.
type Usage struct {
	Calls            int           `json:"model_calls"`
	PromptTokens     int           `json:"prompt_tokens"`
	CompletionTokens int           `json:"completion_tokens"`
	ModelTime        time.Duration `json:"model_time_ns"` // Ollama's total_duration
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.Calls += o.Calls
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
	u.ModelTime += o.ModelTime
}

// Chat sends one chat request with format as the JSON Schema the reply must
// follow (none when format is empty) and returns the whole reply. Overload
// (429, 503) and refused connections are retried with exponential backoff,
// except a refused connection while the server is known to be down (see
// DownFreshness).
func (c *Client) Chat(ctx context.Context, msgs []convo.Message, format json.RawMessage) (Reply, error) {
	return c.ChatStream(ctx, msgs, format, nil)
}

// ChatStream is Chat that also hands each piece of the reply's content to
// onPiece (when not nil) as it arrives, in order, on the caller's goroutine.
// The pieces of a call that then fails have been handed all the same; a
// retried attempt (overload, refused) never sent any.
func (c *Client) ChatStream(ctx context.Context, msgs []convo.Message, format json.RawMessage, onPiece func(string)) (Reply, error) {
	req, err := c.request(msgs, format)
	if err != nil {
		return Reply{}, err
	}
	total, fresh := c.ratio.sent(msgs)
	reply, err := c.chat(ctx, req, onPiece)
	c.observe(err)
	switch {
	case err == nil:
		c.ratio.learn(fresh, reply.Usage.PromptTokens)
	case errors.Is(err, ErrContextTooLong):
		c.ratio.refused(total, c.numCtx)
	}
	return reply, err
}

func (c *Client) chat(ctx context.Context, req *api.ChatRequest, onPiece func(string)) (Reply, error) {
	delay := c.backoff
	for attempt := 1; ; attempt++ {
		reply, err := c.chatOnce(ctx, req, onPiece)
		if err == nil {
			return reply, nil
		}
		if ctx.Err() != nil {
			return Reply{}, c.ctxErr(ctx, "chat")
		}
		if attempt > c.retries || !retryable(err) || refused(err) && (c.failFast || c.knownDown()) {
			return Reply{}, c.explain("chat request", err, attempt)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return Reply{}, c.ctxErr(ctx, "chat")
		case <-t.C:
		}
		delay = min(2*delay, maxBackoff)
	}
}

// Check reports whether the server is reachable and has the model.
func (c *Client) Check(ctx context.Context) error {
	err := c.check(ctx)
	c.observe(err)
	return err
}

func (c *Client) check(ctx context.Context) error {
	callCtx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.api.Show(callCtx, &api.ShowRequest{Model: c.model})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return c.ctxErr(ctx, "model check")
	case pastDeadline(callCtx):
		return c.timedOut(&timeout{setting: "MMCP_LLM_TIMEOUT", after: c.timeout})
	}
	return c.explain("model check", err, 1)
}

// callContext bounds one HTTP call by the client's timeout.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout > 0 {
		return context.WithTimeout(ctx, c.timeout)
	}
	return context.WithCancel(ctx)
}

// pastDeadline reports whether a call's own deadline ended it; callers
// check their own context first, so its deadline is never taken for this
// one.
func pastDeadline(callCtx context.Context) bool {
	return errors.Is(callCtx.Err(), context.DeadlineExceeded)
}

func (c *Client) request(msgs []convo.Message, format json.RawMessage) (*api.ChatRequest, error) {
	out := make([]api.Message, len(msgs))
	for i, m := range msgs {
		role, err := wireRole(m.Role)
		if err != nil {
			return nil, fmt.Errorf("llm: message %d: %w", i, err)
		}
		out[i] = api.Message{Role: role, Content: m.Content}
	}
	// Streamed, so that the reply can be shown as it is written and a
	// model that keeps writing is bounded by its silences, not its length.
	stream := true
	// Ollama's defaults cut silently: truncate drops the oldest messages
	// of a prompt longer than num_ctx, shift drops the start of the
	// context when a reply reaches its end. Off, the first is an error
	// (ErrContextTooLong) and the second a reply cut at done_reason
	// "length" (Reply.Truncated): the window stays the only thing that cuts.
	no := false
	req := &api.ChatRequest{
		Model:    c.model,
		Messages: out,
		Stream:   &stream,
		Truncate: &no,
		Shift:    &no,
		Options: map[string]any{
			"temperature": c.temperature,
			"num_ctx":     c.numCtx,
		},
		// Tools stay empty: models ignore native tools when a format is set.
	}
	if len(format) > 0 {
		req.Format = format
	}
	if c.keepAlive != 0 {
		req.KeepAlive = &api.Duration{Duration: c.keepAlive}
	}
	return req, nil
}

// wireRole maps our roles to the ones chat templates know. Observations go as
// user messages: many templates silently drop unknown roles, and the loop
// already names the tool in the content.
func wireRole(r convo.Role) (string, error) {
	switch r {
	case convo.System:
		return "system", nil
	case convo.User, convo.Observation:
		return "user", nil
	case convo.Assistant:
		return "assistant", nil
	}
	return "", fmt.Errorf("unknown role %q", r)
}

func (c *Client) chatOnce(ctx context.Context, req *api.ChatRequest, onPiece func(string)) (Reply, error) {
	// Cancelling this context drops the connection: the rest of a reply that
	// is too large, or too slow, is never read.
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watch := newWatchdog(cancel, c.timeout, c.idle)
	defer watch.stop()
	overBody := &bodyCap{limit: maxBodyBytes}
	callCtx = context.WithValue(callCtx, bodyCapKey{}, overBody)

	var (
		chunks   int
		done     bool
		overCaps bool
		content  strings.Builder
		final    api.ChatResponse
	)
	err := c.api.Chat(callCtx, req, func(r api.ChatResponse) error {
		watch.piece()
		chunks++
		if content.Len()+len(r.Message.Content) > MaxReplyBytes {
			overCaps = true
			cancel(errTooLarge)
			return errTooLarge
		}
		content.WriteString(r.Message.Content)
		if onPiece != nil && r.Message.Content != "" {
			onPiece(r.Message.Content)
		}
		if r.Done {
			done = true
			final = r
		}
		return nil
	})
	// The api client's line scanner ends quietly on a read error, so the
	// body cap is known by its flag, not by err.
	var late *timeout
	switch {
	case overCaps:
		return Reply{}, c.tooLarge(fmt.Sprintf("more than %d bytes (%d KiB) of content, the most a reply may have", MaxReplyBytes, MaxReplyBytes>>10))
	case overBody.over.Load():
		return Reply{}, c.tooLarge(fmt.Sprintf("more than %d bytes of response body, the most a reply of %d bytes (%d KiB) of content may take", maxBodyBytes, MaxReplyBytes, MaxReplyBytes>>10))
	case ctx.Err() == nil && errors.As(context.Cause(callCtx), &late):
		// Whatever the api client made of the cut body (nothing, or a
		// partial line), the reply did not come in time.
		return Reply{}, c.timedOut(late)
	case err != nil:
		return Reply{}, err
	}
	// The api client returns nil for a 200 with an empty or cut-off body
	// without ever calling back, so completeness is checked here.
	switch {
	case chunks == 0:
		return Reply{}, c.badResponse("an empty response")
	case !done:
		return Reply{}, c.badResponse("an incomplete response (no final message with done=true)")
	}
	return Reply{
		Content:   content.String(),
		Model:     c.model,
		Truncated: final.DoneReason == "length",
		Usage: Usage{
			Calls:            1,
			PromptTokens:     final.PromptEvalCount,
			CompletionTokens: final.EvalCount,
			ModelTime:        final.TotalDuration,
		},
	}, nil
}
