package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mmcpd/mmcpd/internal/needs"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// bearer adds the daemon's token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// elicitor answers the daemon's approval questions as told, and keeps them.
type elicitor struct {
	mu        sync.Mutex
	action    string
	questions []string
}

func (e *elicitor) answer(action string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.action = action
}

func (e *elicitor) handle(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.questions = append(e.questions, req.Params.Message)
	return &mcp.ElicitResult{Action: e.action}, nil
}

func (e *elicitor) asked() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.questions...)
}

// mcpConnect opens an MCP session with the daemon at addr; with e, the
// client supports elicitation and answers through it.
func mcpConnect(t *testing.T, t2 mcp.Transport, e *elicitor) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if e != nil {
		opts.ElicitationHandler = e.handle
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "mmcpd-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, t2, nil)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func httpTransport(addr string) *mcp.StreamableClientTransport {
	return &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: bearer{canary}}, MaxRetries: -1}
}

func mcpTools(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	out := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) (string, *mcp.CallToolResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return strings.Join(text, "\n"), res
}

// askSession reads the session id an ask returned.
func askSession(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	var v struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal(b, &v) != nil || v.SessionID == "" {
		t.Fatalf("ask: no session_id in %s", b)
	}
	return v.SessionID
}

func toolCalls(logs *syncBuffer, tool string) int {
	return strings.Count(logs.String(), `"msg":"mcp tool call","tool":"`+tool+`"`)
}

func TestMCPServer(t *testing.T) {
	dir := pluginsFolder(t, "works", "guard", "slow")
	fake := ollamatest.New(t)
	env := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir, "MMCP_TOOL_TIMEOUT=1s"}
	addr, logs, _ := startDaemon(t, env)
	if !waitFor(30*time.Second, func() bool { _, ok := listTools(t, addr)["guard_remove"]; return ok }) {
		t.Fatalf("plugins never ready:\n%s", logs)
	}
	t.Cleanup(func() { noRace(t, logs) })

	t.Run("boundary", func(t *testing.T) {
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
		for _, c := range []struct {
			name    string
			headers []string
			status  int
		}{
			{"no token", nil, http.StatusUnauthorized},
			{"wrong token", []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
			{"rebound host", []string{"Authorization", "Bearer " + canary, "Host", "evil.example"}, http.StatusMisdirectedRequest},
			{"cross origin", []string{"Authorization", "Bearer " + canary, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
			{"allowed", []string{"Authorization", "Bearer " + canary}, http.StatusOK},
		} {
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(init))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for i := 0; i+1 < len(c.headers); i += 2 {
				if c.headers[i] == "Host" {
					req.Host = c.headers[i+1]
				}
				req.Header.Set(c.headers[i], c.headers[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
			}
		}
	})

	t.Run("tools", func(t *testing.T) {
		cs := mcpConnect(t, httpTransport(addr), nil)
		if !strings.Contains(cs.InitializeResult().Instructions, "elicitation") {
			t.Errorf("instructions: %q", cs.InitializeResult().Instructions)
		}
		tools := mcpTools(t, cs)
		api := listTools(t, addr)
		for _, name := range []string{"works_echo", "works_fail", "guard_echo"} {
			got, ok := tools[name]
			if !ok {
				t.Errorf("%s not listed; got %v", name, tools)
				continue
			}
			schema, _ := json.Marshal(got.InputSchema)
			var a, b any
			_ = json.Unmarshal(schema, &a)
			_ = json.Unmarshal(api[name].Schema, &b)
			if ja, _ := json.Marshal(a); string(ja) != string(mustJSON(b)) || got.Description != api[name].Description {
				t.Errorf("%s: schema %s, description %q; /v1/tools has %s, %q", name, schema, got.Description, api[name].Schema, api[name].Description)
			}
		}
		if _, ok := tools["guard_remove"]; ok {
			t.Error("guard_remove (needs approval) listed to a client without elicitation")
		}
		if !strings.Contains(tools["ask"].Description, "elicitation") {
			t.Errorf("ask description: %q", tools["ask"].Description)
		}

		text, res := callTool(t, cs, "works_echo", map[string]any{"text": "hello mcp"})
		if res.IsError || !strings.Contains(text, "hello mcp") || !strings.Contains(text, `"plugin":"works"`) {
			t.Errorf("works_echo: error %v, %q", res.IsError, text)
		}
		text, res = callTool(t, cs, "works_echo", map[string]any{"text": 5})
		if !res.IsError || !strings.Contains(text, "args.text") {
			t.Errorf("works_echo with a number: error %v, %q", res.IsError, text)
		}
		text, res = callTool(t, cs, "works_fail", map[string]any{})
		if !res.IsError || !strings.Contains(text, "upstream refused") {
			t.Errorf("works_fail: error %v, %q", res.IsError, text)
		}
		start := time.Now()
		text, res = callTool(t, cs, "slow_sleep", map[string]any{"ms": 10000})
		if d := time.Since(start); !res.IsError || !strings.Contains(text, "did not finish within 1s (MMCP_TOOL_TIMEOUT)") || d > 5*time.Second {
			t.Errorf("slow_sleep past MMCP_TOOL_TIMEOUT: error %v, %q after %s", res.IsError, text, d)
		}
		text, res = callTool(t, cs, "guard_remove", map[string]any{"text": "x"})
		if !res.IsError || !strings.Contains(text, "nothing was run") {
			t.Errorf("guard_remove without elicitation: error %v, %q", res.IsError, text)
		}
	})

	t.Run("ask", func(t *testing.T) {
		cs := mcpConnect(t, httpTransport(addr), nil)
		fake.Push(answer("Dune is a 2021 film."))
		text, res := callTool(t, cs, "ask", map[string]any{"message": "tell me about Dune"})
		if res.IsError || text != "Dune is a 2021 film." {
			t.Fatalf("ask: error %v, %q", res.IsError, text)
		}
		session := askSession(t, res)
		fake.Push(answer("It has a sequel."))
		text, res = callTool(t, cs, "ask", map[string]any{"message": "and then?", "session_id": session})
		if res.IsError || text != "It has a sequel." || askSession(t, res) != session {
			t.Fatalf("ask again: error %v, %q", res.IsError, text)
		}
		reqs := fake.Requests()
		if last := reqs[len(reqs)-1]; !strings.Contains(mustJSON(last.Messages), "tell me about Dune") {
			t.Errorf("the second ask did not continue the session: %s", mustJSON(last.Messages))
		}
		// Without elicitation, an action is returned unrun, still waiting.
		fake.Push(decision("guard_remove", `{"text":"old film"}`))
		text, res = callTool(t, cs, "ask", map[string]any{"message": "remove the old film"})
		if res.IsError || !strings.Contains(text, "Not run") || !strings.Contains(text, "mmcpd respond --session") {
			t.Errorf("ask leading to an action: error %v, %q", res.IsError, text)
		}
		code, body := apiGet(t, addr, "/v1/sessions/"+askSession(t, res))
		if code != 200 || !strings.Contains(string(body), `"awaiting_approval"`) {
			t.Errorf("session after the unrun action: %d %s", code, body)
		}
	})

	t.Run("elicitation", func(t *testing.T) {
		e := &elicitor{}
		cs := mcpConnect(t, httpTransport(addr), e)
		if _, ok := mcpTools(t, cs)["guard_remove"]; !ok {
			t.Fatal("guard_remove not listed to a client with elicitation")
		}
		e.answer("decline")
		text, res := callTool(t, cs, "guard_remove", map[string]any{"text": "keep me"})
		if !res.IsError || !strings.Contains(text, "declined") {
			t.Errorf("declined guard_remove: error %v, %q", res.IsError, text)
		}
		e.answer("cancel")
		text, res = callTool(t, cs, "guard_remove", map[string]any{"text": "keep me"})
		if !res.IsError || !strings.Contains(text, "cancelled") {
			t.Errorf("cancelled guard_remove: error %v, %q", res.IsError, text)
		}
		e.answer("accept")
		text, res = callTool(t, cs, "guard_remove", map[string]any{"text": "remove me"})
		if res.IsError || !strings.Contains(text, "remove me") {
			t.Errorf("accepted guard_remove: error %v, %q", res.IsError, text)
		}
		// The daemon's log reaches the test a moment later. Only the
		// accepted call ran: not the one without elicitation, nor the
		// declined and cancelled ones.
		waitFor(5*time.Second, func() bool { return toolCalls(logs, "guard_remove") >= 1 })
		time.Sleep(100 * time.Millisecond)
		if n := toolCalls(logs, "guard_remove"); n != 1 {
			t.Errorf("guard_remove ran %d times, want once", n)
		}
		q := e.asked()
		if len(q) != 3 || !strings.Contains(q[2], "guard_remove") || !strings.Contains(q[2], `"text": "remove me"`) {
			t.Errorf("questions: %q", q)
		}

		// ask: the turn's action is confirmed the same way.
		fake.Push(decision("guard_remove", `{"text":"film A"}`), answer("Removed film A."))
		text, res = callTool(t, cs, "ask", map[string]any{"message": "remove film A"})
		if res.IsError || text != "Removed film A." {
			t.Errorf("ask, accepted: error %v, %q", res.IsError, text)
		}
		reqs := fake.Requests()
		if obs := lastUserMessage(reqs[len(reqs)-1]); !strings.Contains(obs, "film A") {
			t.Errorf("the model did not see the tool's result: %q", obs)
		}
		e.answer("decline")
		fake.Push(decision("guard_remove", `{"text":"film B"}`), answer("Left film B alone."))
		text, res = callTool(t, cs, "ask", map[string]any{"message": "remove film B"})
		if res.IsError || text != "Left film B alone." {
			t.Errorf("ask, declined: error %v, %q", res.IsError, text)
		}
		reqs = fake.Requests()
		if obs := lastUserMessage(reqs[len(reqs)-1]); !strings.Contains(obs, "guard_remove was not run: the user declined it") {
			t.Errorf("the model was not told the action was refused: %q", obs)
		}
		if q := e.asked(); len(q) != 5 || !strings.Contains(q[4], "film B") {
			t.Errorf("questions: %q", q)
		}
	})

	t.Run("stdio", func(t *testing.T) {
		e := &elicitor{}
		e.answer("accept")
		cmd := command([]string{"MMCP_LISTEN_ADDR=" + addr, "MMCP_API_TOKEN=" + canary}, "mcp")
		var stderr syncBuffer
		cmd.Stderr = &stderr
		cs := mcpConnect(t, &mcp.CommandTransport{Command: cmd}, e)
		tools := mcpTools(t, cs)
		if _, ok := tools["works_echo"]; !ok {
			t.Fatalf("stdio tools: %v\n%s", tools, &stderr)
		}
		text, res := callTool(t, cs, "works_echo", map[string]any{"text": "over stdio"})
		if res.IsError || !strings.Contains(text, "over stdio") {
			t.Errorf("works_echo over stdio: error %v, %q", res.IsError, text)
		}
		text, res = callTool(t, cs, "guard_remove", map[string]any{"text": "via bridge"})
		if res.IsError || !strings.Contains(text, "via bridge") || len(e.asked()) != 1 {
			t.Errorf("guard_remove over stdio: error %v, %q, asked %q", res.IsError, text, e.asked())
		}
		fake.Push(answer("Answered over stdio."))
		text, res = callTool(t, cs, "ask", map[string]any{"message": "hello"})
		if res.IsError || text != "Answered over stdio." {
			t.Errorf("ask over stdio: error %v, %q\n%s", res.IsError, text, &stderr)
		}
	})

	t.Run("stdio piped", func(t *testing.T) {
		// A script writes its messages at once, without waiting for
		// answers: the session and notifications/initialized come first.
		cmd := command([]string{"MMCP_LISTEN_ADDR=" + addr, "MMCP_API_TOKEN=" + canary}, "mcp")
		cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"works_echo","arguments":{"text":"piped"}}}
`)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mmcpd mcp: %v\n%s", err, &stderr)
		}
		answers := map[int]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var m struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil || m.Error != nil {
				t.Errorf("answer %q (%v)", line, err)
				continue
			}
			answers[m.ID] = string(m.Result)
		}
		if len(answers) != 3 || !strings.Contains(answers[2], `"works_echo"`) || !strings.Contains(answers[3], "piped") {
			t.Errorf("answers: %v", answers)
		}
	})

	t.Run("stdio without token", func(t *testing.T) {
		cmd := command([]string{"MMCP_LISTEN_ADDR=" + addr}, "mcp")
		c := mcp.NewClient(&mcp.Implementation{Name: "mmcpd-test", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err == nil {
			cs.Close()
			t.Fatal("connected without the token")
		}
		if !strings.Contains(err.Error(), "MMCP_API_TOKEN") {
			t.Errorf("error: %v", err)
		}
	})

	// A client that keeps stdin open and says nothing must not keep the
	// bridge from stopping when it is told to.
	t.Run("stdio ends on SIGTERM", func(t *testing.T) {
		cmd := command([]string{"MMCP_LISTEN_ADDR=" + addr, "MMCP_API_TOKEN=" + canary}, "mcp")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Its answer to initialize says the bridge runs, signal handler
		// included; then the client goes quiet with stdin still open.
		io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
		if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
			t.Fatalf("no answer to initialize: %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("mmcpd mcp after SIGTERM: %v", err)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatal("mmcpd mcp still running 10 s after SIGTERM, with stdin open")
		}
	})
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// jsClient is the folder of the TypeScript SDK client script; .ci/run
// installs its pinned packages with npm ci.
const jsClient = "testdata/mcpjs"

// needsJSClient returns node's path, or skips (fails under
// MMCP_TEST_REQUIRE_EXTERNAL=1) when node or the client's packages are not
// installed.
func needsJSClient(t *testing.T) string {
	t.Helper()
	node := needs.Program(t, "node", "nodejs")
	if _, err := os.Stat(filepath.Join(jsClient, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		msg := "SKIP: the TypeScript MCP client is not installed (run: npm ci --prefix cmd/mmcpd/" + jsClient + ")"
		if os.Getenv(needs.RequireVar) == "1" {
			t.Fatal(msg + "; " + needs.RequireVar + "=1 requires it")
		}
		t.Skip(msg)
	}
	return node
}

// jsRun is what client.mjs saw.
type jsRun struct {
	Unauthorized string   `json:"unauthorized"`
	Server       string   `json:"server"`
	Questions    []string `json:"questions"`
	Tools        []struct {
		Name        string          `json:"name"`
		Schema      json.RawMessage `json:"schema"`
		Description string          `json:"description"`
	} `json:"tools"`
	Echo, Ask, Accepted, Declined struct {
		Text       string          `json:"text"`
		IsError    bool            `json:"isError"`
		Structured json.RawMessage `json:"structured"`
	}
}

func TestMCPTypeScriptClient(t *testing.T) {
	node := needsJSClient(t)
	dir := pluginsFolder(t, "works", "guard")
	fake := ollamatest.New(t)
	env := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir}
	addr, logs, _ := startDaemon(t, env)
	if !waitFor(30*time.Second, func() bool { _, ok := listTools(t, addr)["guard_remove"]; return ok }) {
		t.Fatalf("plugins never ready:\n%s", logs)
	}
	t.Cleanup(func() { noRace(t, logs) })
	api := listTools(t, addr)
	for _, mode := range []string{"http", "stdio"} {
		t.Run(mode, func(t *testing.T) {
			fake.Push(answer("Hello, node."))
			args := []string{"client.mjs", mode, "http://" + addr + "/mcp", canary}
			if mode == "stdio" {
				args = []string{"client.mjs", mode, binary}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, args...)
			cmd.Dir = jsClient
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "MMCP_LISTEN_ADDR=" + addr, "MMCP_API_TOKEN=" + canary}
			var stderr syncBuffer
			cmd.Stderr = &stderr
			stdout, err := cmd.Output()
			if err != nil {
				t.Fatalf("node client.mjs %s: %v\n%s\nstderr:\n%s", mode, err, stdout, &stderr)
			}
			var got jsRun
			if err := json.Unmarshal(stdout, &got); err != nil {
				t.Fatalf("client.mjs output: %v\n%s", err, stdout)
			}
			if mode == "http" && !strings.Contains(got.Unauthorized, "missing or wrong bearer token") {
				t.Errorf("without the token: %q", got.Unauthorized)
			}
			if got.Server != "mmcpd" {
				t.Errorf("server name %q", got.Server)
			}
			names := map[string]bool{}
			for _, tl := range got.Tools {
				names[tl.Name] = true
				if want, ok := api[tl.Name]; ok && (tl.Description == "" || !sameJSON(tl.Schema, want.Schema)) {
					t.Errorf("%s: schema %s, /v1/tools %s", tl.Name, tl.Schema, want.Schema)
				}
			}
			for _, n := range []string{"ask", "works_echo", "guard_echo", "guard_remove"} {
				if !names[n] {
					t.Errorf("%s not listed: %v", n, names)
				}
			}
			if got.Echo.IsError || !strings.Contains(got.Echo.Text, "from node") {
				t.Errorf("works_echo: %+v", got.Echo)
			}
			if got.Ask.IsError || got.Ask.Text != "Hello, node." || !strings.Contains(string(got.Ask.Structured), `"session_id"`) {
				t.Errorf("ask: %+v", got.Ask)
			}
			if got.Accepted.IsError || !strings.Contains(got.Accepted.Text, "accepted in node") {
				t.Errorf("accepted guard_remove: %+v", got.Accepted)
			}
			if !got.Declined.IsError || !strings.Contains(got.Declined.Text, "declined") {
				t.Errorf("declined guard_remove: %+v", got.Declined)
			}
			if len(got.Questions) != 2 || !strings.Contains(got.Questions[1], "declined in node") {
				t.Errorf("questions: %q", got.Questions)
			}
		})
	}
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && mustJSON(va) == mustJSON(vb)
}

// TestMCPClientsDoNotHoldShutdown: an MCP client listening for the daemon's
// notifications (the GET stream every SDK client opens) does not make
// SIGTERM wait out MMCP_SHUTDOWN_GRACE.
func TestMCPClientsDoNotHoldShutdown(t *testing.T) {
	fake := ollamatest.New(t)
	env := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_SHUTDOWN_GRACE=30s"}
	addr, logs, daemon := startDaemon(t, env)
	cs := mcpConnect(t, httpTransport(addr), nil)
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// The client opens its stream once initialized; give it a moment.
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- daemon.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("daemon exit: %v\n%s", err, logs)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("shutdown took %s", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon did not stop within 20s of SIGTERM with an MCP client connected:\n%s", logs)
	}
}

// TestMCPBridgeRenewsLostSession: the daemon restarts under a running
// mmcpd mcp; the client's next call goes through on a new session, without
// the client knowing.
func TestMCPBridgeRenewsLostSession(t *testing.T) {
	dir := pluginsFolder(t, "works")
	fake := ollamatest.New(t)
	addr := freeAddr(t)
	env := []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_API_TOKEN=" + canary, "MMCP_PLUGINS_DIR=" + dir}
	startAt := func() (*exec.Cmd, *syncBuffer) {
		logs := &syncBuffer{}
		d := command(append(env, "MMCP_LISTEN_ADDR="+addr, "MMCP_LOG_FORMAT=json"), "serve")
		d.Stdout, d.Stderr = logs, logs
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Process.Kill(); _ = d.Wait() })
		if !waitFor(30*time.Second, func() bool {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil && resp.StatusCode == 200
		}) {
			t.Fatalf("daemon did not come up:\n%s", logs)
		}
		if !waitFor(30*time.Second, func() bool { _, ok := listTools(t, addr)["works_echo"]; return ok }) {
			t.Fatalf("works_echo never listed:\n%s", logs)
		}
		return d, logs
	}
	first, _ := startAt()
	cmd := command([]string{"MMCP_LISTEN_ADDR=" + addr, "MMCP_API_TOKEN=" + canary}, "mcp")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	cs := mcpConnect(t, &mcp.CommandTransport{Command: cmd}, nil)
	if text, res := callTool(t, cs, "works_echo", map[string]any{"text": "before"}); res.IsError || !strings.Contains(text, "before") {
		t.Fatalf("before the restart: %q", text)
	}
	_ = first.Process.Kill()
	_ = first.Wait()
	startAt()
	text, res := callTool(t, cs, "works_echo", map[string]any{"text": "after"})
	if res.IsError || !strings.Contains(text, "after") {
		t.Errorf("after the restart: error %v, %q\nbridge:\n%s", res.IsError, text, &stderr)
	}
	if !strings.Contains(stderr.String(), "opened a new one") {
		t.Errorf("the bridge did not say it renewed the session:\n%s", &stderr)
	}
}

// noRace fails the test when the daemon, built with -race, reported one.
func noRace(t *testing.T, logs *syncBuffer) {
	if strings.Contains(logs.String(), "DATA RACE") {
		t.Errorf("the daemon reported a data race:\n%s", logs)
	}
}
