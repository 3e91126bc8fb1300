package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/mmcpd/mmcpd/internal/needs"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// The built-in page, driven in headless Chromium against the real daemon,
// the real tmdb and radarr plugins (TMDB, Radarr and Ollama are the fakes
// of media_test.go), sonarr left without its key (standby) and transmission
// pointed at a closed port (unreachable).

// screenshotVar, set to 1, makes TestPageInBrowser write docs/page.png.
const screenshotVar = "MMCP_UPDATE_SCREENSHOT"

// pageStack is startMediaStack with two more plugins whose status the page
// must show.
func startPageStack(t *testing.T) *mediaStack {
	t.Helper()
	closed := freeAddr(t) // nothing listens there: Transmission is down
	return startMediaDaemon(t, mediaPluginsFolder(t, "tmdb", "radarr", "sonarr", "transmission"),
		"MMCP_PLUGIN_SONARR_URL=http://127.0.0.1:1",
		"MMCP_PLUGIN_TRANSMISSION_URL=http://"+closed+"/transmission/rpc",
	)
}

// browser is one headless Chromium tab, and what its console reported that
// a test must not see: uncaught exceptions and Content-Security-Policy
// violations.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	bad  []string
	logs *syncBuffer
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := needs.Program(t, "chromium", "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root, in a container
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser, under no timeout of its own (it
	// would end the browser with it).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	b := &browser{ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				b.mu.Lock()
				b.bad = append(b.bad, m.String())
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, m := range b.bad {
			t.Errorf("the page's console: %s", m)
		}
	})
	return b
}

// do runs actions with a time limit.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitJS waits until a JavaScript expression is truthy.
func (b *browser) waitJS(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		html := eval[string](t, b, `document.body.innerText`)
		t.Fatalf("waiting for %s (%s): %v\nthe page reads:\n%s", what, expr, err, html)
	}
}

// screenshot writes docs/page.png: the page at a laptop's size with an
// action request waiting and the status open beside it.
func (b *browser) screenshot(t *testing.T) {
	t.Helper()
	b.do(t, "sizing the screen", chromedp.EmulateViewport(1280, 900))
	b.do(t, "opening the status", chromedp.Click(chromedp.ID("status-btn")))
	b.waitJS(t, "the plugins", `document.querySelectorAll('#plugins-status .plugin').length === 4`)
	eval[chromedp.Void](t, b, `document.getElementById('messages').scrollTop = 1e6`)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("taking the screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join("..", "..", "docs", "page.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote docs/page.png (%d bytes)", len(shot))
	b.do(t, "closing the status", chromedp.Click(chromedp.ID("status-close")))
}

// lastTurn is the JavaScript for the newest turn of the conversation.
// It is an empty element while there is none, so that a wait can read it.
const lastTurn = `([...document.querySelectorAll('#messages .turn')].pop() || document.createElement('div'))`

// answerSample is what the page shows of the newest turn at one moment.
type answerSample struct {
	Answer    string `json:"answer"`
	Streaming bool   `json:"streaming"`
	ToolDone  bool   `json:"toolDone"`
}

// sampleTurn records the newest turn until its answer is final, so that a
// test sees what a person saw while the turn ran.
func (b *browser) sampleTurn(t *testing.T, tool string) []answerSample {
	t.Helper()
	expr := fmt.Sprintf(`(() => { const t = %s; const a = t.querySelector('.bubble.answer');
		if (!a) return {answer: '', streaming: false, toolDone: false};
		const step = t.querySelector('.step[data-action=%q] pre.result:not([hidden])');
		return {answer: a.hidden ? '' : a.querySelector('.text').textContent, streaming: a.classList.contains('streaming') || document.body.classList.contains('busy'), toolDone: !!step}; })()`, lastTurn, tool)
	var out []answerSample
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(15 * time.Millisecond) {
		s := eval[answerSample](t, b, expr)
		out = append(out, s)
		if s.Answer != "" && !s.Streaming {
			return out
		}
	}
	t.Fatalf("the answer never finished; last seen %+v", out[len(out)-1])
	return nil
}

// send types a message and presses Enter, as a person would.
func (b *browser) send(t *testing.T, text string) {
	t.Helper()
	b.waitJS(t, "the composer to be free", `!document.body.classList.contains('busy')`)
	b.do(t, "typing "+text, chromedp.SendKeys(chromedp.ID("message"), text+kb.Enter))
}

func sessionTitles(t *testing.T, addr string) map[string]string {
	t.Helper()
	code, body := apiGet(t, addr, "/v1/sessions")
	var list server.SessionList
	if code != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("GET /v1/sessions: %d %s", code, body)
	}
	out := map[string]string{}
	for _, s := range list.Sessions {
		out[s.ID] = s.Title
	}
	return out
}

func TestPageInBrowser(t *testing.T) {
	b := newBrowser(t)
	s := startPageStack(t)
	// The model writes at 40 tokens a second, token by token: slow enough
	// to see an answer grow.
	s.ollama.SetCost(ollamatest.Cost{GenRate: 40, CharsPerToken: 4})
	url := "http://" + s.addr + "/"

	// The token is asked once, then kept.
	b.do(t, "opening the page", chromedp.Navigate(url))
	b.waitJS(t, "the token prompt", `document.getElementById('token-dialog').open`)
	b.do(t, "giving the token", chromedp.SendKeys(chromedp.ID("token"), canary+kb.Enter))
	b.waitJS(t, "the model's readiness", `document.getElementById('model-state').dataset.state === 'ready'`)
	if got := eval[string](t, b, `localStorage.getItem('mmcpd.token')`); got != canary {
		t.Errorf("stored token %q", got)
	}

	// A tool step, then the answer, streamed.
	answerText := "Dune (2021) is Denis Villeneuve's film of Frank Herbert's novel, with Timothée Chalamet as Paul Atreides; it runs 155 minutes and is rated PG-13. Its second part came out in 2024."
	s.ollama.Push(
		decision("tmdb_search", `{"query":"Dune","media_type":"movie","year":2021}`),
		answer(answerText),
	)
	b.send(t, "Tell me about Dune (2021)")
	samples := b.sampleTurn(t, "tmdb_search")
	final := samples[len(samples)-1]
	if final.Answer != answerText {
		t.Errorf("answer shown %q, want %q", final.Answer, answerText)
	}
	partial, toolFirst := false, true
	for _, smp := range samples {
		if smp.Answer != "" && len(smp.Answer) < len(answerText) && strings.HasPrefix(answerText, smp.Answer) && smp.Streaming {
			partial = true
		}
		if smp.Answer != "" && !smp.ToolDone {
			toolFirst = false
		}
	}
	if !partial {
		t.Errorf("never saw the answer while it was written (%d samples)", len(samples))
	}
	if !toolFirst {
		t.Error("the answer showed before the tool step's result")
	}
	step := eval[string](t, b, lastTurn+`.querySelector('.step[data-action=tmdb_search]').textContent`)
	for _, want := range []string{"Step 1", "tmdb_search", `"query": "Dune"`, "Thought", "testing", "Result", "438631"} {
		if !strings.Contains(step, want) {
			t.Errorf("the tmdb_search step lacks %q:\n%s", want, step)
		}
	}
	if n := len(s.tmdb.lines()); n != 1 {
		t.Errorf("TMDB got %d requests, want 1: %q", n, s.tmdb.lines())
	}

	// An action request in the same session, approved with the keyboard:
	// Radarr gets the film, the model answers.
	s.ollama.Push(ollamatest.Reply{Content: `{"thought":"Dune is TMDB id 438631; I add it to Radarr.","action":"radarr_add","args":{"tmdb_id":438631}}`})
	b.send(t, "Add it to my films")
	b.waitJS(t, "the action request", lastTurn+`.querySelector('.approval button.approve')`)
	card := eval[string](t, b, lastTurn+`.querySelector('.approval').innerText`)
	for _, want := range []string{"radarr_add", `"tmdb_id": 438631`, "I add it to Radarr", "Approve", "Deny"} {
		if !strings.Contains(card, want) {
			t.Errorf("the action request lacks %q:\n%s", want, card)
		}
	}
	if n := len(s.radarr.lines()); n != 0 {
		t.Fatalf("Radarr was called %d times before the approval: %q", n, s.radarr.lines())
	}
	if os.Getenv(screenshotVar) == "1" {
		b.screenshot(t)
	}
	s.ollama.Push(answer("Added Dune (2021) to Radarr."))
	b.do(t, "approving", chromedp.SendKeys(chromedp.CSS(".turn:last-child .approval button.approve"), kb.Enter))
	b.waitJS(t, "the answer after the approval", lastTurn+`.querySelector('.bubble.answer:not(.streaming)')?.innerText.includes('Added Dune (2021) to Radarr.') && !document.body.classList.contains('busy')`)
	posts := 0
	for _, l := range s.radarr.lines() {
		if strings.HasPrefix(l, "POST /api/v3/movie") {
			posts++
		}
	}
	if posts != 1 {
		t.Errorf("Radarr got %d POSTs, want 1: %q", posts, s.radarr.lines())
	}
	// The waiting step is the one that ran: one step, with Radarr's answer.
	if n := eval[int](t, b, lastTurn+`.querySelectorAll('.step[data-action=radarr_add]').length`); n != 1 {
		t.Errorf("%d radarr_add steps shown, want 1", n)
	}
	if got := eval[string](t, b, lastTurn+`.querySelector('.step[data-action=radarr_add]')?.textContent || ''`); !strings.Contains(got, "Result") || !strings.Contains(got, "Dune") {
		t.Errorf("the radarr_add step shows no result:\n%s", got)
	}
	approved := strings.TrimPrefix(eval[string](t, b, `location.hash`), "#/session/")

	// A new chat whose action request is denied: nothing runs.
	b.do(t, "a new chat", chromedp.Click(chromedp.ID("new-chat")))
	before := len(s.radarr.lines())
	s.ollama.Push(ollamatest.Reply{Content: `{"thought":"I add Dune to Radarr again.","action":"radarr_add","args":{"tmdb_id":438631}}`})
	b.send(t, "Add Dune once more")
	b.waitJS(t, "the second action request", lastTurn+`.querySelector('.approval button.deny')`)
	// The approval's link, as the OpenAI route words it, opens the session
	// with the request to answer, from the stored session alone.
	link := fmt.Sprintf("%s#session=%s&approval=%s", url,
		strings.TrimPrefix(eval[string](t, b, `location.hash`), "#/session/"),
		eval[string](t, b, lastTurn+`.querySelector('.approval').dataset.approval`))
	eval[chromedp.Void](t, b, `Object.keys(localStorage).filter(k => k.startsWith('mmcpd.approval.')).forEach(k => localStorage.removeItem(k))`)
	eval[chromedp.Void](t, b, fmt.Sprintf(`history.replaceState(null, '', %q)`, link))
	b.do(t, "opening the approval's link", chromedp.Reload())
	b.waitJS(t, "the action request from the link", lastTurn+`.querySelector('.approval button.deny')`)
	if got := eval[string](t, b, lastTurn+`.querySelector('.approval').innerText`); !strings.Contains(got, "radarr_add") || !strings.Contains(got, `"tmdb_id": 438631`) {
		t.Errorf("the action request from the link:\n%s", got)
	}
	s.ollama.Push(answer("Fine, nothing was added."))
	b.do(t, "denying", chromedp.Click(chromedp.CSS(".turn:last-child .approval button.deny")))
	b.waitJS(t, "the answer after the denial", lastTurn+`.querySelector('.bubble.answer')?.innerText.includes('nothing was added') && !document.body.classList.contains('busy')`)
	if after := len(s.radarr.lines()); after != before {
		t.Errorf("Radarr got %d requests after a denial: %q", after-before, s.radarr.lines()[before:])
	}
	reqs := s.ollama.Requests()
	if obs := lastUserMessage(reqs[len(reqs)-1]); !strings.Contains(obs, "radarr_add was not run: the user declined") {
		t.Errorf("the model was told %q after the denial", obs)
	}
	denied := strings.TrimPrefix(eval[string](t, b, `location.hash`), "#/session/")

	// Markup in a question and in an answer is shown as text; nothing runs.
	b.do(t, "a new chat", chromedp.Click(chromedp.ID("new-chat")))
	evil := `Try <script>window.__xss = 1</script> and <img src=x onerror="window.__xss = 2"> and <b>bold</b>`
	s.ollama.Push(answer(evil))
	b.send(t, `<img src=x onerror="window.__xss = 3"> what is this?`)
	b.waitJS(t, "the markup answer", lastTurn+`.querySelector('.bubble.answer:not(.streaming)')?.textContent.includes('</script>') && !document.body.classList.contains('busy')`)
	if got := eval[string](t, b, lastTurn+`.querySelector('.bubble.answer .text').textContent`); got != evil {
		t.Errorf("the answer reads %q, want the text %q", got, evil)
	}
	b.waitJS(t, "the new session in the sidebar", `[...document.querySelectorAll('#sessions .title')].some(e => e.textContent.startsWith('<img src=x'))`)
	if n := eval[int](t, b, `document.querySelectorAll('#messages img, #messages script, #messages b, #sessions img').length`); n != 0 {
		t.Errorf("%d elements were made from model or user text", n)
	}
	if got := eval[string](t, b, `String(window.__xss)`); got != "undefined" {
		t.Errorf("a script of the answer ran: window.__xss = %s", got)
	}

	// The sidebar: rename the first session, delete the denied one.
	b.do(t, "renaming", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#sessions li[data-id=%q] .rename`, approved))))
	b.waitJS(t, "the title field", `document.querySelector('#sessions .rename-input')`)
	eval[chromedp.Void](t, b, `document.querySelector('#sessions .rename-input').value = ''`)
	b.do(t, "typing the title", chromedp.SendKeys(chromedp.CSS(`#sessions .rename-input`), "Dune night"+kb.Enter))
	b.waitJS(t, "the new title", fmt.Sprintf(`document.querySelector('#sessions li[data-id=%q] .title')?.textContent === 'Dune night'`, approved))
	del := chromedp.CSS(fmt.Sprintf(`#sessions li[data-id=%q] .delete`, denied))
	b.do(t, "deleting", chromedp.Click(del), chromedp.Click(del))
	b.waitJS(t, "the session gone", fmt.Sprintf(`!document.querySelector('#sessions li[data-id=%q]')`, denied))
	titles := sessionTitles(t, s.addr)
	if titles[approved] != "Dune night" || len(titles) != 2 {
		t.Errorf("sessions after rename and delete: %v", titles)
	}
	if _, ok := titles[denied]; ok {
		t.Error("the deleted session is still listed by the API")
	}

	// A reload asks for no token, lists the sessions, and opens one with its
	// steps and answers.
	b.do(t, "reloading", chromedp.Reload())
	b.waitJS(t, "the sessions after the reload", fmt.Sprintf(`document.querySelector('#sessions li[data-id=%q]')`, approved))
	if eval[bool](t, b, `document.getElementById('token-dialog').open`) {
		t.Error("the token was asked again after a reload")
	}
	b.do(t, "opening the first session", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#sessions li[data-id=%q] .open`, approved))))
	b.waitJS(t, "the session's turns", `document.querySelectorAll('#messages .turn').length === 2`)
	convo := eval[string](t, b, `document.getElementById('messages').innerText`)
	for _, want := range []string{"Tell me about Dune (2021)", "tmdb_search", "Added Dune (2021) to Radarr.", "radarr_add", "Timothée Chalamet"} {
		if !strings.Contains(convo, want) {
			t.Errorf("the reopened session lacks %q:\n%s", want, convo)
		}
	}

	// The status: the model, and each plugin as it is.
	b.do(t, "opening the status", chromedp.Click(chromedp.ID("status-btn")))
	b.waitJS(t, "the plugins", `document.querySelectorAll('#plugins-status .plugin').length === 4`)
	for plugin, want := range map[string][]string{
		"tmdb":         {"ready", "tmdb_search"},
		"radarr":       {"ready", "radarr_add", "asks first"},
		"sonarr":       {"standby", "MMCP_PLUGIN_SONARR_API_KEY"},
		"transmission": {"unreachable", "Transmission is unreachable"},
	} {
		got := eval[string](t, b, fmt.Sprintf(`document.querySelector('#plugins-status .plugin[data-plugin=%q]')?.innerText || ''`, plugin))
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("the status of %s lacks %q:\n%s", plugin, w, got)
			}
		}
	}
	if got := eval[string](t, b, `document.getElementById('model-status').innerText`); !strings.Contains(got, "ready") || !strings.Contains(got, "qwen2.5:7b-instruct") {
		t.Errorf("the model's status:\n%s", got)
	}

	// On a phone: nothing wider than the screen, the sessions in a drawer.
	b.do(t, "a phone's screen", chromedp.EmulateViewport(360, 740))
	b.do(t, "closing the status", chromedp.Click(chromedp.ID("status-close")))
	if w := eval[int](t, b, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("the page is %d px wide on a 360 px screen", w)
	}
	b.do(t, "opening the drawer", chromedp.Click(chromedp.ID("menu")))
	b.waitJS(t, "the drawer", `getComputedStyle(document.getElementById('sidebar')).display !== 'none'`)
	b.do(t, "closing the drawer", chromedp.SendKeys(chromedp.ID("sidebar-close"), kb.Enter))
	b.waitJS(t, "the drawer closed", `getComputedStyle(document.getElementById('sidebar')).display === 'none'`)
	if w := eval[int](t, b, `Math.max(document.documentElement.scrollWidth, document.getElementById('messages').scrollWidth)`); w > 360 {
		t.Errorf("with the drawer open the page is %d px wide", w)
	}

	// The page made no request the API did not answer as expected, and
	// fetched nothing from model text (an <img src=x> would ask for /x).
	if strings.Contains(s.logs.String(), `"path":"/x"`) {
		t.Error("the browser fetched /x: an image of the answer was rendered")
	}
}
