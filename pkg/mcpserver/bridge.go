package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Bridge relays an MCP client on stdio (one JSON-RPC message per line, as
// Claude Desktop speaks it) to a running daemon's /mcp, so that there is one
// plugin host however many clients there are. It works on the messages as
// text: whatever the two ends agree on passes, elicitation included (the
// daemon's questions come on the stream of the call that asks them, and the
// client's answers are posted like any other message).
type Bridge struct {
	Endpoint string // the daemon's /mcp URL
	Token    string // MMCP_API_TOKEN, sent as a bearer token when set
	HTTP     *http.Client
	Log      *slog.Logger

	out   io.Writer
	outMu sync.Mutex

	renew sync.Mutex // one new session at a time

	mu        sync.Mutex
	session   string // Mcp-Session-Id the daemon gave
	version   string // the protocol version initialize settled on
	init      []byte // the client's initialize, replayed when the session is lost
	listening bool   // a GET stream for the daemon's own messages is open
}

// maxMessage bounds one message from the client.
const maxMessage = 8 << 20

// Run relays until in ends or ctx is done, then ends the daemon's session.
func (b *Bridge) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	if b.HTTP == nil {
		b.HTTP = &http.Client{}
	}
	if b.Log == nil {
		b.Log = slog.Default()
	}
	b.out = out
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// The client's messages are read on their own goroutine, so that a
	// signal (ctx) ends the bridge even while the client keeps its end of
	// stdin open and says nothing.
	lines := make(chan []byte)
	var readErr error
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), maxMessage)
		for sc.Scan() {
			select {
			case lines <- append([]byte(nil), sc.Bytes()...):
			case <-ctx.Done():
				return
			}
		}
		readErr = sc.Err() // read only after lines is closed
	}()
	ended := false // the client's input ended (not a signal)
read:
	for {
		var raw []byte
		select {
		case <-ctx.Done():
			break read
		case l, ok := <-lines:
			if !ok {
				ended = true
				break read
			}
			raw = l
		}
		msg := bytes.TrimSpace(raw)
		if len(msg) == 0 {
			continue
		}
		var env envelope
		if err := json.Unmarshal(msg, &env); err != nil {
			b.answerError(nil, -32700, "not a JSON-RPC message: "+err.Error())
			continue
		}
		if env.Method == "initialize" || !env.isCall() {
			// In order, each done before the next message: the session
			// must exist before anything else, and notifications/initialized
			// must arrive before the calls that follow it. These answer at
			// once (202), an elicitation's answer included.
			b.send(ctx, msg, env)
			continue
		}
		// A call is posted on its own: it may wait for the user's answer
		// to an elicitation, which must not be held up behind it.
		wg.Go(func() { b.send(ctx, msg, env) })
	}
	// Input ended, but the answers to what was sent are still owed (a
	// script piping its requests in); a signal cancels them (ctx).
	wg.Wait()
	b.end()
	if ended && readErr != nil {
		return fmt.Errorf("reading the client's messages: %w", readErr)
	}
	return nil
}

// envelope is what the bridge reads of a message.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result *struct {
		ProtocolVersion string `json:"protocolVersion"`
	} `json:"result"`
}

// isCall reports whether the message expects an answer.
func (e envelope) isCall() bool { return e.Method != "" && len(e.ID) > 0 && string(e.ID) != "null" }

func (b *Bridge) send(ctx context.Context, msg []byte, env envelope) {
	if env.Method == "initialize" {
		b.mu.Lock()
		b.init, b.session, b.version = msg, "", ""
		b.mu.Unlock()
	}
	stale := b.sessionID()
	resp, err := b.post(ctx, msg)
	if err == nil && resp.StatusCode == http.StatusNotFound && env.Method != "initialize" && stale != "" {
		// The daemon restarted (or dropped an idle session): start a new
		// session as the client did, and send the message again.
		resp.Body.Close()
		if err = b.reinitialize(ctx, stale); err == nil {
			resp, err = b.post(ctx, msg)
		}
	}
	if err != nil {
		if env.isCall() {
			b.answerError(env.ID, -32000, err.Error())
		} else {
			b.Log.Warn("relaying a message to mmcpd", "method", env.Method, "err", err)
		}
		return
	}
	defer resp.Body.Close()
	if env.Method == "initialize" {
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
			b.mu.Lock()
			b.session = id
			b.mu.Unlock()
		}
	}
	switch {
	case resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent:
		return
	case resp.StatusCode != http.StatusOK:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
		why := refusal(resp.StatusCode, body)
		if env.isCall() {
			b.answerError(env.ID, -32000, why)
		} else {
			b.Log.Warn("mmcpd refused a message", "method", env.Method, "status", resp.StatusCode, "why", why)
		}
		return
	}
	b.relay(ctx, resp, env.Method == "initialize")
}

// refusal words a status the daemon answered instead of MCP.
func refusal(status int, body []byte) string {
	text := strings.TrimSpace(string(body))
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		text = e.Error.Message
	}
	if status == http.StatusUnauthorized {
		return "mmcpd refused the token: set MMCP_API_TOKEN to the daemon's (" + text + ")"
	}
	return fmt.Sprintf("mmcpd answered %d: %s", status, text)
}

func (b *Bridge) sessionID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.session
}

// post sends one message to the daemon.
func (b *Bridge) post(ctx context.Context, msg []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.Endpoint, bytes.NewReader(msg))
	if err != nil {
		return nil, fmt.Errorf("building the request to %s: %w", b.Endpoint, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	b.headers(req)
	resp, err := b.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach mmcpd at %s (is the daemon running? mmcpd mcp relays to it): %w", b.Endpoint, err)
	}
	return resp, nil
}

func (b *Bridge) headers(req *http.Request) {
	if b.Token != "" {
		req.Header.Set("Authorization", "Bearer "+b.Token)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.session != "" {
		req.Header.Set("Mcp-Session-Id", b.session)
	}
	if b.version != "" {
		req.Header.Set("Mcp-Protocol-Version", b.version)
	}
}

// reinitialize opens a new session with the client's own initialize, whose
// answer the client already has. Messages that met the lost session at the
// same time renew it once.
func (b *Bridge) reinitialize(ctx context.Context, stale string) error {
	b.renew.Lock()
	defer b.renew.Unlock()
	if b.sessionID() != stale {
		return nil // another message renewed it
	}
	b.mu.Lock()
	init := b.init
	b.session, b.version = "", ""
	b.mu.Unlock()
	if init == nil {
		return errors.New("the daemon lost the session, and the client never initialized one")
	}
	resp, err := b.post(ctx, init)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
		return errors.New(refusal(resp.StatusCode, body))
	}
	b.mu.Lock()
	b.session = resp.Header.Get("Mcp-Session-Id")
	b.mu.Unlock()
	var version string
	if err := eachMessage(resp, func(m []byte) {
		var env envelope
		if json.Unmarshal(m, &env) == nil && env.Result != nil {
			version = env.Result.ProtocolVersion
		}
	}); err != nil {
		return fmt.Errorf("reading the new session's answer: %w", err)
	}
	b.mu.Lock()
	b.version = version
	b.mu.Unlock()
	done, err := b.post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if err != nil {
		return err
	}
	done.Body.Close()
	b.Log.Info("mmcpd lost the MCP session; opened a new one")
	b.listen(ctx)
	return nil
}

// relay writes the messages of a response to the client. After initialize
// it also starts listening for the daemon's own messages.
func (b *Bridge) relay(ctx context.Context, resp *http.Response, initialize bool) {
	err := eachMessage(resp, func(m []byte) {
		if initialize {
			var env envelope
			if json.Unmarshal(m, &env) == nil && env.Result != nil && env.Result.ProtocolVersion != "" {
				b.mu.Lock()
				b.version = env.Result.ProtocolVersion
				b.mu.Unlock()
			}
		}
		b.write(m)
	})
	if err != nil && ctx.Err() == nil {
		b.Log.Warn("reading mmcpd's answer", "err", err)
	}
	if initialize && b.sessionID() != "" {
		b.listen(ctx)
	}
}

// listen keeps a GET stream open for what the daemon sends on its own (a
// changed tool list), reopening it when it ends.
func (b *Bridge) listen(ctx context.Context) {
	b.mu.Lock()
	if b.listening {
		b.mu.Unlock()
		return
	}
	b.listening = true
	b.mu.Unlock()
	go func() {
		defer func() {
			b.mu.Lock()
			b.listening = false
			b.mu.Unlock()
		}()
		for ctx.Err() == nil && b.sessionID() != "" {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.Endpoint, nil)
			if err != nil {
				return
			}
			req.Header.Set("Accept", "text/event-stream")
			b.headers(req)
			resp, err := b.HTTP.Do(req)
			if err == nil {
				ok := resp.StatusCode == http.StatusOK
				if ok {
					_ = eachMessage(resp, b.write)
				}
				resp.Body.Close()
				if !ok {
					return // no stream here, or the session is gone: the next post reopens one
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
}

// eachMessage reads a response's JSON-RPC messages: one JSON body, or the
// data of each Server-Sent Event.
func eachMessage(resp *http.Response, fn func([]byte)) error {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(body)) > 0 {
			fn(body)
		}
		return nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxMessage)
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if data.Len() > 0 {
				fn(bytes.Clone(data.Bytes()))
				data.Reset()
			}
		case bytes.HasPrefix(line, []byte("data:")):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" ")))
		}
	}
	return sc.Err()
}

// write hands one message to the client, on one line.
func (b *Bridge) write(m []byte) {
	var line bytes.Buffer
	if err := json.Compact(&line, m); err != nil {
		b.Log.Warn("mmcpd sent something that is not JSON; dropped", "err", err)
		return
	}
	line.WriteByte('\n')
	b.outMu.Lock()
	defer b.outMu.Unlock()
	if _, err := b.out.Write(line.Bytes()); err != nil {
		b.Log.Warn("writing to the MCP client", "err", err)
	}
}

// answerError answers a call the daemon could not.
func (b *Bridge) answerError(id json.RawMessage, code int, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	m, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	b.write(m)
}

// end closes the daemon's session, when there is one.
func (b *Bridge) end() {
	if b.sessionID() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, b.Endpoint, nil)
	if err != nil {
		return
	}
	b.headers(req)
	if resp, err := b.HTTP.Do(req); err == nil {
		resp.Body.Close()
	}
}
