package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"

	convo "github.com/mmcpd/mmcpd/pkg/context"
)

// maxStreamBytes bounds the bytes read from one streamed OpenAI-style reply.
// Each piece comes as an event of its own with an envelope of 150 to 300
// bytes (id, model, created, choices), twice Ollama's: the bound holds about
// 16,000 such events, more than a reply can have in a usual context, and a
// longer reply ends with ErrReplyTooLarge. The content cap still holds.
const maxStreamBytes = 16 * MaxReplyBytes

// maxSideBytes bounds every other body: a models list, an error's body.
const maxSideBytes = 1 << 20

// maxErrorBody is how much of an error's body is kept to explain it.
const maxErrorBody = 64 << 10

// schemaName is the json_schema name response_format carries: it shows in
// the server's logs.
const schemaName = "mmcpd_reply"

// OpenAIOptions configures an OpenAI backend.
type OpenAIOptions struct {
	// BaseURL is where chat/completions and models are served, e.g.
	// http://nas:8080/v1 (llama.cpp's llama-server, vLLM, LM Studio).
	BaseURL string
	Model   string
	// APIKey is sent as a bearer token; empty sends none.
	APIKey string
	// KeySetting names the variable the key comes from, for the error that
	// says the server refused it.
	KeySetting  string
	Temperature float64
	// Timeout, IdleTimeout, Retries, Backoff and ReplyReserve are
	// Options' (the Ollama client's) and mean the same here.
	Timeout      time.Duration
	IdleTimeout  time.Duration
	Retries      int
	Backoff      time.Duration
	ReplyReserve int
	// ContextTokens is the model's context in tokens until the server says
	// otherwise (vLLM's max_model_len, a refusal that names its size); 0
	// means DefaultNumCtx. The request cannot set it: the server was
	// started with it.
	ContextTokens int
	// FailFast: a refused connection is never retried here (see Options).
	FailFast bool
}

// OpenAI talks to one model on a server with OpenAI's chat completions API.
// The reply schema goes as response_format json_schema, which llama.cpp's
// server turns into a grammar as Ollama does; the reply is streamed, and held
// to the same bounds as the Ollama client's (time, size, content): the
// server is as untrusted as any. It is safe for concurrent use.
type OpenAI struct {
	chat        openai.ChatCompletionService
	models      openai.ModelService
	base        string
	model       string
	keySetting  string
	temperature float64
	timeout     time.Duration
	idle        time.Duration
	retries     int
	backoff     time.Duration
	failFast    bool
	reserve     int // tokens of the context kept for the reply, when set
	ratio       *ratio

	mu     sync.Mutex
	numCtx int  // the model's context in tokens, as last known
	told   bool // numCtx came from the server
}

// NewOpenAI checks the options and builds an OpenAI backend. It does not
// contact the server: use Check for that.
func NewOpenAI(o OpenAIOptions) (*OpenAI, error) {
	base := strings.TrimRight(strings.TrimSpace(o.BaseURL), "/")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm: OpenAI-compatible URL %q is not an http(s) URL such as http://127.0.0.1:8080/v1", o.BaseURL)
	}
	model := strings.TrimSpace(o.Model)
	switch {
	case model == "":
		return nil, errors.New("llm: no model name given for the OpenAI-compatible server")
	case o.Timeout < 0, o.IdleTimeout < 0, o.Backoff < 0:
		return nil, errors.New("llm: timeouts and backoff must not be negative")
	case o.Retries < 0, o.ContextTokens < 0, o.ReplyReserve < 0:
		return nil, errors.New("llm: retries, context tokens and reply reserve must not be negative")
	}
	c := &OpenAI{
		base:        base,
		model:       model,
		keySetting:  o.KeySetting,
		temperature: o.Temperature,
		timeout:     o.Timeout,
		idle:        o.IdleTimeout,
		retries:     o.Retries,
		backoff:     o.Backoff,
		failFast:    o.FailFast,
		reserve:     o.ReplyReserve,
		ratio:       newRatio(),
		numCtx:      o.ContextTokens,
	}
	if c.idle == 0 {
		c.idle = c.timeout
	}
	if c.backoff == 0 {
		c.backoff = time.Second
	}
	if c.numCtx == 0 {
		c.numCtx = DefaultNumCtx
	}
	// The services are built from these options alone: openai.NewClient
	// would add OPENAI_API_KEY, OPENAI_BASE_URL and the like from the
	// daemon's environment, and send a key meant for another server.
	opts := []option.RequestOption{
		option.WithBaseURL(base + "/"),
		option.WithHTTPClient(&http.Client{Transport: recorded{capped{transport()}}}),
		// Retries are this client's (Retry-After honoured, bounded,
		// counted in the error), not the library's.
		option.WithMaxRetries(0),
	}
	if o.APIKey != "" {
		opts = append(opts, option.WithAPIKey(o.APIKey))
	}
	c.chat = openai.NewChatCompletionService(opts...)
	c.models = openai.NewModelService(opts...)
	return c, nil
}

// Model is the model name every request uses.
func (c *OpenAI) Model() string { return c.model }

// Chat is ChatStream without pieces.
func (c *OpenAI) Chat(ctx context.Context, msgs []convo.Message, format json.RawMessage) (Reply, error) {
	return c.ChatStream(ctx, msgs, format, nil)
}

// ChatStream sends one streamed chat completion with format as the
// response_format's schema and returns the whole reply, handing each piece
// of its content to onPiece (when not nil) as it comes. 429 and 503 are
// retried after the server's Retry-After (or the backoff), refused
// connections with the backoff unless FailFast.
func (c *OpenAI) ChatStream(ctx context.Context, msgs []convo.Message, format json.RawMessage, onPiece func(string)) (Reply, error) {
	params, err := c.params(msgs, format)
	if err != nil {
		return Reply{}, err
	}
	total := 0
	for _, m := range msgs {
		total += utf8.RuneCountInString(m.Content)
	}
	reply, err := c.retry(ctx, params, onPiece)
	switch {
	case err == nil:
		// prompt_tokens counts the whole prompt on these servers (a cached
		// prefix included), so the sample is the whole prompt.
		c.ratio.learn(total, reply.Usage.PromptTokens)
	case errors.Is(err, ErrContextTooLong):
		c.ratio.refused(total, c.contextTokens())
	}
	return reply, err
}

func (c *OpenAI) params(msgs []convo.Message, format json.RawMessage) (openai.ChatCompletionNewParams, error) {
	out := make([]openai.ChatCompletionMessageParamUnion, len(msgs))
	for i, m := range msgs {
		role, err := wireRole(m.Role)
		if err != nil {
			return openai.ChatCompletionNewParams{}, fmt.Errorf("llm: message %d: %w", i, err)
		}
		switch role {
		case "system":
			out[i] = openai.SystemMessage(m.Content)
		case "assistant":
			out[i] = openai.AssistantMessage(m.Content)
		default:
			out[i] = openai.UserMessage(m.Content)
		}
	}
	p := openai.ChatCompletionNewParams{
		Model:       c.model,
		Messages:    out,
		Temperature: openai.Float(c.temperature),
		// The usage comes in one last event, which servers send only when
		// asked.
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if len(format) > 0 {
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{
			OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
					Name:   schemaName,
					Schema: format,
					Strict: openai.Bool(true),
				},
			},
		}
	}
	return p, nil
}

func (c *OpenAI) retry(ctx context.Context, params openai.ChatCompletionNewParams, onPiece func(string)) (Reply, error) {
	delay := c.backoff
	for attempt := 1; ; attempt++ {
		reply, info, err := c.once(ctx, params, onPiece)
		if err == nil {
			return reply, nil
		}
		if ctx.Err() != nil {
			return Reply{}, fmt.Errorf("chat for model %q on %s: %w", c.model, c.base, ctx.Err())
		}
		wait, again := c.again(err, info)
		if attempt > c.retries || !again {
			return Reply{}, c.explain("chat request", err, info, attempt)
		}
		if wait == 0 {
			wait = delay
		}
		t := time.NewTimer(min(wait, maxBackoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return Reply{}, fmt.Errorf("chat for model %q on %s: %w", c.model, c.base, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, maxBackoff)
	}
}

// again reports whether another attempt may succeed soon, and after how long
// the server asked to wait (0: the client's own backoff).
func (c *OpenAI) again(err error, info *callInfo) (time.Duration, bool) {
	var le *llmError
	if errors.As(err, &le) {
		return 0, false // a reply too large, a timeout: not the server being busy
	}
	if info.status == http.StatusTooManyRequests || info.status == http.StatusServiceUnavailable {
		return retryAfter(info.header.Get("Retry-After")), true
	}
	return 0, info.status == 0 && refused(err) && !c.failFast
}

// retryAfter reads Retry-After in seconds or as an HTTP date; 0 when absent
// or unreadable.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// once makes one streamed call.
func (c *OpenAI) once(ctx context.Context, params openai.ChatCompletionNewParams, onPiece func(string)) (Reply, *callInfo, error) {
	start := time.Now()
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watch := newWatchdog(cancel, c.timeout, c.idle)
	defer watch.stop()
	info := &callInfo{}
	body := &bodyCap{limit: maxStreamBytes}
	callCtx = context.WithValue(context.WithValue(callCtx, bodyCapKey{}, body), callInfoKey{}, info)

	stream := c.chat.NewStreaming(callCtx, params)
	defer stream.Close()
	var (
		events   int
		overCaps bool
		content  strings.Builder
		finish   string
		usage    openai.CompletionUsage
	)
read:
	for stream.Next() {
		ev := stream.Current()
		watch.piece()
		events++
		if ev.JSON.Usage.Valid() {
			usage = ev.Usage
		}
		for _, ch := range ev.Choices {
			if ch.Index != 0 {
				continue // n is never asked for: one choice is read
			}
			piece := ch.Delta.Content
			if content.Len()+len(piece) > MaxReplyBytes {
				overCaps = true
				cancel(errTooLarge)
				break read
			}
			content.WriteString(piece)
			if onPiece != nil && piece != "" {
				onPiece(piece)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	err := stream.Err()
	var late *timeout
	switch {
	case overCaps:
		return Reply{}, info, c.tooLarge(fmt.Sprintf("more than %d bytes (%d KiB) of content, the most a reply may have", MaxReplyBytes, MaxReplyBytes>>10))
	case body.over.Load():
		return Reply{}, info, c.tooLarge(fmt.Sprintf("more than %d bytes of response body, the most a streamed reply may take", maxStreamBytes))
	case ctx.Err() == nil && errors.As(context.Cause(callCtx), &late):
		return Reply{}, info, c.timedOut(late)
	case err != nil:
		return Reply{}, info, err
	case events == 0:
		return Reply{}, info, c.badResponse("an empty response")
	case finish == "":
		return Reply{}, info, c.badResponse("an incomplete response (no event with a finish_reason)")
	}
	return Reply{
		Content:   content.String(),
		Model:     c.model,
		Truncated: finish == "length",
		Usage: Usage{
			Calls:            1,
			PromptTokens:     int(usage.PromptTokens),
			CompletionTokens: int(usage.CompletionTokens),
			// These servers report no time of their own.
			ModelTime: time.Since(start),
		},
	}, info, nil
}

// Check reports whether the server answers and serves the model: the model
// must be among those GET models lists. It also learns the model's context
// where the list says it (vLLM's max_model_len).
func (c *OpenAI) Check(ctx context.Context) error {
	callCtx, cancel := context.WithCancel(ctx)
	if c.timeout > 0 {
		callCtx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	defer cancel()
	info := &callInfo{}
	body := &bodyCap{limit: maxSideBytes}
	callCtx = context.WithValue(context.WithValue(callCtx, bodyCapKey{}, body), callInfoKey{}, info)
	page, err := c.models.List(callCtx)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return fmt.Errorf("model check for model %q on %s: %w", c.model, c.base, ctx.Err())
	case pastDeadline(callCtx):
		return c.timedOut(&timeout{setting: "MMCP_LLM_TIMEOUT", after: c.timeout})
	case body.over.Load():
		return c.badResponse(fmt.Sprintf("a models list over %d bytes", maxSideBytes))
	default:
		return c.explain("model check", err, info, 1)
	}
	var ids []string
	for _, m := range page.Data {
		if m.ID != c.model {
			ids = append(ids, m.ID)
			continue
		}
		var n int
		if f, ok := m.JSON.ExtraFields["max_model_len"]; ok && json.Unmarshal([]byte(f.Raw()), &n) == nil && n > 0 {
			c.learnContext(n)
		}
		return nil
	}
	if len(ids) > 5 {
		ids = append(ids[:5], "...")
	}
	return &llmError{
		msg: fmt.Sprintf("model %q is not served by the OpenAI-compatible server at %s, which lists %s: set the model after # in MMCP_LLM_BACKENDS to one of them",
			c.model, c.base, listed(ids)),
		kind: ErrModelMissing,
	}
}

func listed(ids []string) string {
	if len(ids) == 0 {
		return "no model"
	}
	return strings.Join(ids, ", ")
}

// PromptBudget is how many characters of prompt fit the model's context with
// the reply's reserve kept free, at the ratio learned from this server.
func (c *OpenAI) PromptBudget(context.Context) (chars int, why string) {
	numCtx := c.contextTokens()
	reserve := c.reserve
	if reserve == 0 {
		reserve = min(DefaultReplyReserve, numCtx/4)
	}
	r := c.ratio.current()
	chars = max(int(float64(numCtx-reserve)*r), 0)
	src := "assumed until the server says"
	if c.contextKnown() {
		src = "as the server reported it"
	}
	return chars, fmt.Sprintf("the %d characters that fit the %d-token context of %q on %s (%s) with %d tokens kept for the reply, at %.1f characters per token",
		chars, numCtx, c.model, c.base, src, reserve, r)
}

func (c *OpenAI) contextTokens() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.numCtx
}

func (c *OpenAI) contextKnown() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.told
}

func (c *OpenAI) learnContext(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > 0 && (n != c.numCtx || !c.told) {
		c.numCtx, c.told = n, true
	}
}

// callInfoKey marks, in a request's context, the callInfo recorded fills.
type callInfoKey struct{}

// callInfo is what the transport saw of a response: its status and headers,
// and, for an error status, the start of its body. The library's own error
// is no help when a proxy answers with a page instead of JSON, or when a
// server's error object does not have the fields OpenAI's has: the status is
// then all that is left of it.
type callInfo struct {
	status int
	header http.Header
	body   []byte // an error's body, at most maxErrorBody
}

// recorded is a RoundTripper that fills the request's callInfo.
type recorded struct{ base http.RoundTripper }

func (t recorded) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	info, ok := req.Context().Value(callInfoKey{}).(*callInfo)
	if !ok {
		return resp, nil
	}
	info.status, info.header = resp.StatusCode, resp.Header
	if resp.StatusCode >= 400 {
		// Read here, within the bound, and handed on as read: an error body
		// is never larger than this in memory.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		info.body = b
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
	return resp, nil
}

// errorBody is the error object these servers send: OpenAI's {"error":
// {"message", "type", "code"}}, with llama.cpp's n_ctx beside, or vLLM's
// flat {"message", "type", "code"}.
type errorBody struct {
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
}

type errorObject struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	NCtx    int    `json:"n_ctx"`
}

// serverSays reads an error body: the server's words, and the context size
// when it names one.
func serverSays(body []byte) (msg string, nCtx int) {
	var eb errorBody
	if json.Unmarshal(body, &eb) != nil {
		return clip(strings.TrimSpace(string(body))), 0
	}
	var obj errorObject
	switch {
	case len(eb.Error) > 0 && json.Unmarshal(eb.Error, &obj) == nil:
		msg, nCtx = obj.Message, obj.NCtx
	case len(eb.Error) > 0:
		_ = json.Unmarshal(eb.Error, &msg) // {"error": "text"}
	default:
		msg = eb.Message
	}
	if msg == "" {
		msg = clip(strings.TrimSpace(string(body)))
	}
	if nCtx == 0 {
		if m := maxContextRE.FindStringSubmatch(msg); m != nil {
			nCtx, _ = strconv.Atoi(m[1])
		}
	}
	return clip(msg), nCtx
}

// maxContextRE finds the size in vLLM's and OpenAI's words: "This model's
// maximum context length is 4096 tokens."
var maxContextRE = regexp.MustCompile(`maximum context length is (\d+)`)

// contextRefusal reports whether a server's words say the prompt is longer
// than the context: llama.cpp's "the request exceeds the available context
// size", vLLM's and OpenAI's "maximum context length", and the code
// context_length_exceeded.
func contextRefusal(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "context size") || strings.Contains(m, "context length") ||
		strings.Contains(m, "context_length_exceeded") || strings.Contains(m, "exceed_context_size")
}

// schemaRefusal reports whether a 400's words are about the reply schema:
// llama.cpp answers "JSON schema conversion failed" (or the converter's own
// words) when it cannot make a grammar of it, vLLM names guided decoding.
func schemaRefusal(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "schema") || strings.Contains(m, "grammar") || strings.Contains(m, "response_format") ||
		strings.Contains(m, "guided")
}

// explain turns an error of a call into one a person can act on, of the same
// kinds as the Ollama client's.
func (c *OpenAI) explain(op string, err error, info *callInfo, attempts int) error {
	var done *llmError
	if errors.As(err, &done) {
		return err
	}
	tries := ""
	if attempts > 1 {
		tries = fmt.Sprintf(" after %d attempts", attempts)
	}
	where := c.where()
	if info.status >= 400 {
		msg, nCtx := serverSays(info.body)
		status := fmt.Sprintf("%d %s", info.status, http.StatusText(info.status))
		if msg != "" {
			status += ": " + msg
		}
		e := &llmError{cause: err}
		switch s := info.status; {
		case s == http.StatusUnauthorized || s == http.StatusForbidden:
			fix := "set MMCP_LLM_<N>_API_KEY for this entry"
			if c.keySetting != "" {
				fix = "check " + c.keySetting
			}
			e.kind = ErrUnauthorized
			e.msg = fmt.Sprintf("%s refused the %s for model %q (%s): the API key is missing or wrong; %s", where, op, c.model, status, fix)
		case s == http.StatusNotFound:
			e.kind = ErrModelMissing
			e.msg = fmt.Sprintf("model %q is not available on %s (%s): set the model after # in MMCP_LLM_BACKENDS to one its GET %s/models lists, and check that the URL ends where chat/completions is served (often /v1)",
				c.model, where, status, c.base)
		case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
			e.kind = ErrUnavailable
			e.msg = fmt.Sprintf("%s is overloaded or rate-limits (%s)%s; try again later", where, status, tries)
		case (s == http.StatusBadRequest || s == http.StatusRequestEntityTooLarge) && contextRefusal(msg):
			if nCtx > 0 {
				c.learnContext(nCtx)
			}
			e.kind = ErrContextTooLong
			e.msg = fmt.Sprintf("%s refused the %s for model %q: the prompt is longer than the model's context (%d tokens): %s",
				where, op, c.model, c.contextTokens(), msg)
		case s == http.StatusBadRequest && schemaRefusal(msg):
			e.kind = ErrSchemaRefused
			e.msg = fmt.Sprintf("%s refused the reply schema mmcpd sends as response_format json_schema for model %q (%s): the server cannot turn it into a grammar; a tool's arguments use a construct it does not support (GET /v1/schema shows the schema)",
				where, c.model, status)
		case s >= 500:
			e.kind = ErrServerError
			e.msg = fmt.Sprintf("the %s for model %q to %s failed: %s", op, c.model, where, status)
		default:
			e.msg = fmt.Sprintf("%s refused the %s for model %q: %s", where, op, c.model, status)
		}
		return e
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return &llmError{
			msg:   fmt.Sprintf("cannot reach %s (%s)%s: is it running? Start it or fix the URL in MMCP_LLM_BACKENDS", where, reason(ue), tries),
			kind:  ErrUnavailable,
			cause: err,
			down:  true,
		}
	}
	// What is left came with a 200: an error event in the stream, or an
	// event that is not JSON at all.
	text := err.Error()
	if strings.Contains(text, "error while streaming") && contextRefusal(text) {
		return &llmError{
			msg:   fmt.Sprintf("%s refused the %s for model %q: the prompt is longer than the model's context: %s", where, op, c.model, clip(text)),
			kind:  ErrContextTooLong,
			cause: err,
		}
	}
	return &llmError{
		msg:   fmt.Sprintf("%s answered the %s for model %q with an error instead of a reply: %s", where, op, c.model, clip(text)),
		kind:  ErrBadResponse,
		cause: err,
	}
}

// where names the server in errors, as "Ollama at ..." does for Client.
func (c *OpenAI) where() string { return "the OpenAI-compatible server at " + c.base }

func (c *OpenAI) badResponse(what string) error { return badResponse(c.where(), c.model, what) }

func (c *OpenAI) tooLarge(what string) error { return tooLarge(c.where(), c.model, what) }

func (c *OpenAI) timedOut(t *timeout) error { return timedOut(c.where(), c.model, t) }
