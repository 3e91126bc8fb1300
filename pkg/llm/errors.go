package llm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/ollama/ollama/api"
)

var (
	// ErrUnavailable means the server could not be reached, was overloaded
	// after every retry, or did not answer in time. The caller may try again
	// later.
	ErrUnavailable = errors.New("ollama unavailable")
	// ErrModelMissing means the server does not have the model: it must be
	// pulled first.
	ErrModelMissing = errors.New("model not available")
	// ErrBadResponse means a 200 that is empty, incomplete (no final message
	// with done=true) or carries an error instead of a reply.
	ErrBadResponse = errors.New("bad response from ollama")
	// ErrReplyTooLarge means the reply passed MaxReplyBytes of content, or
	// its response body passed the bound of the bytes read for one; the call
	// stopped reading there. It is an ErrBadResponse: the server maps both to
	// model_error.
	ErrReplyTooLarge = fmt.Errorf("%w: reply too large", ErrBadResponse)
	// ErrServerError means Ollama, or a proxy before it, answered with a
	// server error status other than 503 (500 "llama runner process has
	// terminated", 502, 504): the message quotes what it said. It is an
	// ErrBadResponse: the server maps both to model_error.
	ErrServerError = fmt.Errorf("%w: server error", ErrBadResponse)
	// ErrTimeout means the model sent nothing within Options.Timeout
	// (MMCP_LLM_TIMEOUT) of the call's start, or then stopped for longer
	// than Options.IdleTimeout (MMCP_LLM_IDLE_TIMEOUT) between two pieces:
	// the server is there, but slower than the settings allow. It is not
	// retried, and it is not ErrUnavailable.
	ErrTimeout = errors.New("model timed out")
	// ErrContextTooLong means Ollama refused the prompt as longer than the
	// model's context (num_ctx): the client asks it never to cut a prompt
	// itself. A smaller window may fit; the same prompt never will.
	ErrContextTooLong = errors.New("prompt longer than the model's context")
	// ErrUnauthorized means the server refused the request's credentials
	// (401, 403): the API key setting is missing or wrong. Trying again
	// cannot help.
	ErrUnauthorized = errors.New("model server refused the credentials")
	// ErrSchemaRefused means the server refused the reply schema: its
	// converter cannot make a grammar of it (Ollama's "invalid JSON schema
	// in format", llama.cpp's "JSON schema conversion failed"). Trying
	// again cannot help; leaving out the tool whose arguments it cannot
	// convert can.
	ErrSchemaRefused = errors.New("model server refused the reply schema")
)

// llmError carries a message meant for a person while errors.Is still finds
// the sentinel (kind) and errors.As the api package's error (cause).
type llmError struct {
	msg   string
	kind  error
	cause error
	// down: the server could not be reached at all (refused, no such host,
	// no route), as opposed to answering badly or slowly.
	down bool
}

func (e *llmError) Error() string { return e.msg }

func (e *llmError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.kind, e.cause} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (c *Client) badResponse(what string) error {
	return badResponse("Ollama at "+c.host, c.model, what)
}

func (c *Client) tooLarge(what string) error { return tooLarge("Ollama at "+c.host, c.model, what) }

func (c *Client) timedOut(t *timeout) error { return timedOut("Ollama at "+c.host, c.model, t) }

// badResponse is the error of a 200 that holds no reply; where names the
// server ("Ollama at ...") and what says what came instead.
func badResponse(where, model, what string) error {
	return &llmError{
		msg:  fmt.Sprintf("%s sent %s to the chat request for model %q", where, what, model),
		kind: ErrBadResponse,
	}
}

// tooLarge is the error of a call stopped because the reply passed a cap;
// what says which.
func tooLarge(where, model, what string) error {
	return &llmError{
		msg:  fmt.Sprintf("%s sent a reply too large to the chat request for model %q: %s; the call was stopped there", where, model, what),
		kind: ErrReplyTooLarge,
	}
}

// timedOut is the error of a call that passed one of the client's timeouts.
// It names the setting, since raising it is the fix on a slow machine.
func timedOut(where, model string, t *timeout) error {
	msg := fmt.Sprintf("the model %q on %s did not answer within %s (%s); a slow machine, or a model still loading, may need more",
		model, where, seconds(t.after), t.setting)
	if t.pieces > 0 {
		pieces := fmt.Sprintf("%d pieces", t.pieces)
		if t.pieces == 1 {
			pieces = "the first piece"
		}
		msg = fmt.Sprintf("the model %q on %s sent nothing for %s (%s) after %s of its reply; a slow machine may need more",
			model, where, seconds(t.after), t.setting, pieces)
	}
	return &llmError{msg: msg, kind: ErrTimeout}
}

// seconds writes a whole number of seconds as the settings are usually
// written (120s, not 2m0s).
func seconds(d time.Duration) string {
	if d >= time.Second && d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

func (c *Client) ctxErr(ctx context.Context, op string) error {
	return fmt.Errorf("%s for model %q on %s: %w", op, c.model, c.host, ctx.Err())
}

// retryable reports whether another attempt may succeed soon: the server said
// it is busy, or it is not listening (yet).
func retryable(err error) bool {
	var se api.StatusError
	if errors.As(err, &se) {
		return se.StatusCode == http.StatusTooManyRequests || se.StatusCode == http.StatusServiceUnavailable
	}
	return refused(err)
}

// tooLong reports whether Ollama's words for a 400 say the prompt is longer
// than the context: "the input length exceeds the context length" from its
// runners, "input exceeds maximum context length" elsewhere.
func tooLong(msg string) bool {
	msg = strings.ToLower(msg)
	return strings.Contains(msg, "exceeds") && strings.Contains(msg, "context length")
}

// refused reports whether nothing listens where the server should be.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// unreachable reports whether err says the server could not be reached.
func unreachable(err error) bool {
	var le *llmError
	return errors.As(err, &le) && le.down
}

// explain turns an error of the api package into one a person can act on.
func (c *Client) explain(op string, err error, attempts int) error {
	var done *llmError
	if errors.As(err, &done) {
		return err // already explained
	}
	tries := ""
	if attempts > 1 {
		tries = fmt.Sprintf(" after %d attempts", attempts)
	}

	var se api.StatusError
	if errors.As(err, &se) {
		switch se.StatusCode {
		case http.StatusNotFound:
			return &llmError{
				msg:   fmt.Sprintf("model %q is not available on %s: run \"ollama pull %s\"", c.model, c.host, c.model),
				kind:  ErrModelMissing,
				cause: err,
			}
		case http.StatusBadRequest:
			if strings.Contains(se.ErrorMessage, "schema") {
				return &llmError{
					msg: fmt.Sprintf("Ollama at %s refused the reply schema mmcpd sends as format for model %q (%s): its converter cannot turn it into a grammar; a tool's arguments use a construct it does not support (GET /v1/schema shows the schema)",
						c.host, c.model, statusText(se)),
					kind:  ErrSchemaRefused,
					cause: err,
				}
			}
			if tooLong(se.ErrorMessage) {
				return &llmError{
					msg: fmt.Sprintf("Ollama at %s refused the %s for model %q: the prompt is longer than the model's context (num_ctx %d tokens, MMCP_OLLAMA_NUM_CTX): %s",
						c.host, op, c.model, c.numCtx, se.ErrorMessage),
					kind:  ErrContextTooLong,
					cause: err,
				}
			}
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			return &llmError{
				msg:   fmt.Sprintf("Ollama at %s is overloaded (%s)%s; try again later", c.host, statusText(se), tries),
				kind:  ErrUnavailable,
				cause: err,
			}
		}
		var kind error
		if se.StatusCode >= 500 {
			// Ollama failed (the runner crashed, out of memory) or a proxy
			// before it did: its words are the explanation, not a bug of
			// ours.
			kind = ErrServerError
		}
		return &llmError{
			msg:   fmt.Sprintf("the %s for model %q to Ollama at %s failed: %s", op, c.model, c.host, statusText(se)),
			kind:  kind,
			cause: err,
		}
	}
	var ae api.AuthorizationError
	if errors.As(err, &ae) {
		return &llmError{
			msg:   fmt.Sprintf("Ollama at %s refused the %s for model %q: %d %s", c.host, op, c.model, ae.StatusCode, http.StatusText(ae.StatusCode)),
			kind:  ErrUnauthorized,
			cause: err,
		}
	}

	// The call's own deadline is caught before this (pastDeadline): a transport
	// error left here, a timeout included, is one of dialing.
	var ue *url.Error
	if errors.As(err, &ue) {
		return &llmError{
			msg:   fmt.Sprintf("cannot reach Ollama at %s (%s)%s: is it running? Start it with \"ollama serve\" or fix the host setting", c.host, reason(ue), tries),
			kind:  ErrUnavailable,
			cause: err,
			down:  true,
		}
	}

	// What is left came with a 200: an {"error": ...} line or a line that is
	// not JSON at all (a proxy's page, a cut-off body).
	return &llmError{
		msg:   fmt.Sprintf("Ollama at %s answered the %s for model %q with an error instead of a reply: %s", c.host, op, c.model, clip(err.Error())),
		kind:  ErrBadResponse,
		cause: err,
	}
}

func statusText(se api.StatusError) string {
	status := se.Status // empty for non-streaming endpoints such as /api/show
	if status == "" {
		status = fmt.Sprintf("%d %s", se.StatusCode, http.StatusText(se.StatusCode))
	}
	if se.ErrorMessage == "" {
		return status
	}
	return status + ": " + se.ErrorMessage
}

// reason is the short cause of a transport failure, without the method and
// URL that url.Error puts in front.
func reason(ue *url.Error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(ue, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(ue, &dns):
		if dns.IsNotFound {
			return fmt.Sprintf("host %q not found", dns.Name)
		}
		return fmt.Sprintf("cannot resolve host %q: %s", dns.Name, dns.Err)
	}
	return ue.Err.Error()
}

// clip keeps an error that may quote a whole response body readable.
func clip(s string) string {
	const limit = 300
	if r := []rune(s); len(r) > limit {
		return string(r[:limit]) + "..."
	}
	return s
}
