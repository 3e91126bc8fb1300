package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// The approval tests run the real test plugin (pkg/plugins/testdata), whose
// guard_remove needs approval and writes each run's text to a file.

var guardBuild struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if guardBuild.dir != "" {
		os.RemoveAll(guardBuild.dir)
	}
	os.Exit(code)
}

// guardPlugin builds the test plugin once and returns its path.
func guardPlugin(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the plugin host runs plugins on Linux")
	}
	guardBuild.once.Do(func() {
		if guardBuild.dir, guardBuild.err = os.MkdirTemp("", "mmcpd-server-test"); guardBuild.err != nil {
			return
		}
		guardBuild.out, guardBuild.err = exec.Command("go", "build", "-o", filepath.Join(guardBuild.dir, "testplugin"), "../plugins/testdata/testplugin").CombinedOutput()
	})
	if guardBuild.err != nil {
		t.Fatalf("building the test plugin: %v\n%s", guardBuild.err, guardBuild.out)
	}
	return filepath.Join(guardBuild.dir, "testplugin")
}

// guardEnv is a server whose tools are the guard plugin's, run by the real
// plugin host, with the model's replies scripted.
type guardEnv struct {
	*env
	log string // the plugin's record of guard_remove's runs
}

func startGuard(t *testing.T, limits server.Limits, script ...ollamatest.Reply) *guardEnv {
	t.Helper()
	return startGuardWith(t, options{limits: limits}, script...)
}

// startGuardWith is startGuard with more of the server's options; the token
// and the tools are the guard's.
func startGuardWith(t *testing.T, o options, script ...ollamatest.Reply) *guardEnv {
	t.Helper()
	bin := guardPlugin(t)
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, plugins.FilePrefix+"guard")); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(t.TempDir(), "runs")
	host, err := plugins.New(plugins.Options{Dir: dir, Environ: []string{"MMCP_PLUGIN_GUARD_LOG=" + runs}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	host.Start(context.Background())
	t.Cleanup(host.Close)
	o.token, o.tools = "tok", host
	e := startWith(t, o, script...)
	return &guardEnv{env: e, log: runs}
}

// runs is what guard_remove ran on, one text a run.
func (g *guardEnv) runs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(g.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// ask sends a conversation through the OpenAI client, streamed or not, and
// returns the answer's content.
func ask(t *testing.T, e *env, stream bool, msgs ...openai.ChatCompletionMessageParamUnion) string {
	t.Helper()
	c := openaiClient(e, "tok")
	if !stream {
		got, err := c.Chat.Completions.New(context.Background(), params(msgs...))
		if err != nil {
			t.Fatalf("completion: %v\nlogs:\n%s", err, e.logs)
		}
		return got.Choices[0].Message.Content
	}
	s := c.Chat.Completions.NewStreaming(context.Background(), params(msgs...))
	defer s.Close()
	acc := openai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("streamed completion: %v\nlogs:\n%s", err, e.logs)
	}
	return acc.Choices[0].Message.Content
}

var questionIDs = regexp.MustCompile(`http://[^/\s]+/#session=([0-9a-f-]{36})&approval=([0-9a-f-]{36})`)

// askApproval starts a conversation whose turn asks to run guard_remove on
// text, checks the question, and returns it with the session it names.
func askApproval(t *testing.T, g *guardEnv, stream bool, first string, before ...openai.ChatCompletionMessageParamUnion) (question, session string) {
	t.Helper()
	q := ask(t, g.env, stream, append(before, openai.UserMessage(first))...)
	for _, want := range []string{"I need your yes or no before I run `guard_remove` with:\n- `text`: `\"old\"`\n", "Why: The user wants old removed.",
		"Nothing has run yet. Reply **yes** to run it or **no** to cancel it", "approval code "} {
		if !strings.Contains(q, want) {
			t.Fatalf("question lacks %q:\n%s", want, q)
		}
	}
	m := questionIDs.FindStringSubmatch(q)
	if m == nil || !strings.HasPrefix(m[0], g.url+"/#") {
		t.Fatalf("question has no link to the page at %s:\n%s", g.url, q)
	}
	if r := g.runs(t); len(r) != 0 {
		t.Fatalf("guard_remove ran before the answer: %v", r)
	}
	return q, m[1]
}

// turnsOf reads a session's turns through the API.
func turnsOf(t *testing.T, e *env, session string) []server.TurnView {
	t.Helper()
	resp, body := e.do(t, "GET", "/v1/sessions/"+session, "", "Authorization", "Bearer tok")
	var v server.SessionView
	if resp.StatusCode != 200 || json.Unmarshal(body, &v) != nil {
		t.Fatalf("session %s: %d %s", session, resp.StatusCode, body)
	}
	return v.Turns
}

func removeCall() ollamatest.Reply {
	return call("guard_remove", `{"text":"old"}`, "The user wants old removed.")
}

func TestOpenAIApprovals(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Run("approve", func(t *testing.T) {
				g := startGuard(t, server.Limits{}, removeCall(), final("Removed old."))
				const first = "remove old"
				q, session := askApproval(t, g, stream, first, openai.SystemMessage("Today is Monday."))
				// The client's instructions are rebuilt for every request
				// (Open WebUI puts the date in them): not part of the match.
				yes := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Today is Tuesday."), openai.UserMessage(first), openai.AssistantMessage(q), openai.UserMessage("Yes!")}
				if got := ask(t, g.env, stream, yes...); got != "Removed old." {
					t.Errorf("answer after yes = %q", got)
				}
				if r := g.runs(t); len(r) != 1 || r[0] != "old" {
					t.Errorf("runs after yes = %v, want [old]", r)
				}
				_, body := g.do(t, "GET", "/v1/sessions/"+session, "", "Authorization", "Bearer tok")
				if !strings.Contains(string(body), `"title":"remove old"`) {
					t.Errorf("the session's title is not the first message: %s", body)
				}
				turns := turnsOf(t, g.env, session)
				last := turns[len(turns)-1]
				if last.Status != store.TurnDone || len(last.Items) != 4 || last.Items[2].Type != "tool_result" || last.Items[3].Content != "Removed old." {
					t.Errorf("the session's turn: %+v", last)
				}
				// The same request again (a client retrying, or regenerating
				// the answer): nothing runs, no model call, and it says so.
				calls := len(g.fake.Requests())
				if got := ask(t, g.env, stream, yes...); !strings.Contains(got, "already answered") || !strings.Contains(got, "nothing was run") {
					t.Errorf("replayed yes answered %q", got)
				}
				if r := g.runs(t); len(r) != 1 {
					t.Errorf("runs after the replayed yes = %v", r)
				}
				if n := len(g.fake.Requests()); n != calls {
					t.Errorf("the replay called the model %d times", n-calls)
				}
			})
			t.Run("deny", func(t *testing.T) {
				g := startGuard(t, server.Limits{}, removeCall(), final("Left it alone."))
				// An earlier exchange: kept in the session as a turn of its own.
				q, session := askApproval(t, g, stream, "remove old", openai.UserMessage("hi"), openai.AssistantMessage("Hello!"))
				if got := ask(t, g.env, stream, openai.UserMessage("hi"), openai.AssistantMessage("Hello!"), openai.UserMessage("remove old"), openai.AssistantMessage(q), openai.UserMessage("no")); got != "Left it alone." {
					t.Errorf("answer after no = %q", got)
				}
				if r := g.runs(t); len(r) != 0 {
					t.Errorf("guard_remove ran after a no: %v", r)
				}
				reqs := g.fake.Requests()
				if last := reqs[len(reqs)-1].Messages; !strings.Contains(last[len(last)-1].Content, "guard_remove was not run: the user declined it") {
					t.Errorf("the model was not told: %+v", last[len(last)-1])
				}
				turns := turnsOf(t, g.env, session)
				if len(turns) != 2 || turns[0].Status != store.TurnDone || len(turns[0].Items) != 2 || turns[0].Items[1].Content != "Hello!" ||
					turns[1].Status != store.TurnDone || turns[1].Items[0].Content != "remove old" {
					t.Errorf("the session's turns: %+v", turns)
				}
			})
			t.Run("unrelated reply", func(t *testing.T) {
				g := startGuard(t, server.Limits{}, removeCall(), final("It is sunny."))
				q, session := askApproval(t, g, stream, "remove old")
				history := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("remove old"), openai.AssistantMessage(q)}
				if got := ask(t, g.env, stream, append(history, openai.UserMessage("what is the weather?"))...); got != "It is sunny." {
					t.Errorf("answer to the new message = %q", got)
				}
				reqs := g.fake.Requests()
				if last := reqs[len(reqs)-1].Messages; !strings.Contains(last[len(last)-1].Content, "what is the weather?") {
					t.Errorf("the model did not get the new message: %+v", last[len(last)-1])
				}
				turns := turnsOf(t, g.env, session)
				if turns[0].Status != store.TurnCancelled || !strings.Contains(turns[0].Items[len(turns[0].Items)-1].Content, "guard_remove was not run: the user sent a new message") {
					t.Errorf("the paused turn was not retired: %+v", turns[0])
				}
				// A yes now, to the same question, finds it closed.
				if got := ask(t, g.env, stream, append(history, openai.UserMessage("yes"))...); !strings.Contains(got, "nothing was run") {
					t.Errorf("a yes after the new message answered %q", got)
				}
				if r := g.runs(t); len(r) != 0 {
					t.Errorf("guard_remove ran: %v", r)
				}
			})
			t.Run("yes in another conversation", func(t *testing.T) {
				g := startGuard(t, server.Limits{}, removeCall(), final("Hello."), final("Hi again."), final("Removed old."))
				q, session := askApproval(t, g, stream, "remove old")
				// The question pasted after another history: its code does
				// not match, so the yes is a message like any other.
				if got := ask(t, g.env, stream, openai.UserMessage("remove something else"), openai.AssistantMessage(q), openai.UserMessage("yes")); got != "Hello." {
					t.Errorf("answer in the other conversation = %q", got)
				}
				// A yes with no question before it is a message too.
				if got := ask(t, g.env, stream, openai.UserMessage("hello"), openai.AssistantMessage("Hi! What can I do?"), openai.UserMessage("yes")); got != "Hi again." {
					t.Errorf("answer to a bare yes = %q", got)
				}
				if r := g.runs(t); len(r) != 0 {
					t.Errorf("guard_remove ran from another conversation: %v", r)
				}
				// The approval is still there for its own conversation.
				if turns := turnsOf(t, g.env, session); turns[0].Status != store.TurnAwaiting {
					t.Errorf("the other conversation touched the approval: %+v", turns[0])
				}
				if got := ask(t, g.env, stream, openai.UserMessage("remove old"), openai.AssistantMessage(q), openai.UserMessage("yes")); got != "Removed old." {
					t.Errorf("answer in its own conversation = %q", got)
				}
				if r := g.runs(t); len(r) != 1 {
					t.Errorf("runs = %v, want one", r)
				}
			})
		})
	}
}

func TestOpenAIApprovalExpires(t *testing.T) {
	g := startGuard(t, server.Limits{ApprovalTTL: 200 * time.Millisecond}, removeCall())
	q, session := askApproval(t, g, false, "remove old")
	if !strings.Contains(q, "expires in 200ms") {
		t.Errorf("question does not say when it expires:\n%s", q)
	}
	time.Sleep(300 * time.Millisecond)
	got := ask(t, g.env, false, openai.UserMessage("remove old"), openai.AssistantMessage(q), openai.UserMessage("yes"))
	if !strings.Contains(got, "expired") || !strings.Contains(got, "nothing was run") {
		t.Errorf("a late yes answered %q", got)
	}
	if r := g.runs(t); len(r) != 0 {
		t.Errorf("guard_remove ran after expiry: %v", r)
	}
	if turns := turnsOf(t, g.env, session); turns[0].Status != store.TurnFailed || turns[0].Error != store.ExpiredReason {
		t.Errorf("the expired turn: %+v", turns[0])
	}
}

// TestOpenAIApprovalAnsweredOnThePage: the link's ids are the ones POST
// /v1/chat/respond takes, so the page (or curl) can answer; the
// conversation's own yes then finds the approval used.
func TestOpenAIApprovalAnsweredOnThePage(t *testing.T) {
	g := startGuard(t, server.Limits{}, removeCall(), final("Removed old."))
	q, _ := askApproval(t, g, false, "remove old")
	m := questionIDs.FindStringSubmatch(q)
	resp, body := g.do(t, "POST", "/v1/chat/respond", fmt.Sprintf(`{"session_id":%q,"approval_id":%q,"decision":"approve"}`, m[1], m[2]), "Authorization", "Bearer tok")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"answer":"Removed old."`) {
		t.Fatalf("respond: %d %s", resp.StatusCode, body)
	}
	got := ask(t, g.env, false, openai.UserMessage("remove old"), openai.AssistantMessage(q), openai.UserMessage("yes"))
	if !strings.Contains(got, "already answered") {
		t.Errorf("yes after the page's answer: %q", got)
	}
	if r := g.runs(t); len(r) != 1 {
		t.Errorf("runs = %v, want one", r)
	}
}

// With MMCP_PUBLIC_URL set, the question links the page there, whatever
// Host the client called mmcpd by (Open WebUI in a container calls it
// host.docker.internal, which the user's browser does not know).
func TestOpenAIApprovalLinkUsesPublicURL(t *testing.T) {
	g := startGuardWith(t, options{configure: func(_ *store.Store, _ *loop.Runner, s *server.Server) {
		s.PublicURL = "https://media.example.com/mmcpd/"
	}}, removeCall())
	q := ask(t, g.env, false, openai.UserMessage("remove old"))
	if !regexp.MustCompile(`Or answer it on mmcpd's page: https://media\.example\.com/mmcpd/#session=[0-9a-f-]{36}&approval=[0-9a-f-]{36}`).MatchString(q) {
		t.Errorf("the question does not link the page at the public URL:\n%s", q)
	}
}
