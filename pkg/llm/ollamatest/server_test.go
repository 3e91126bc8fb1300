package ollamatest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

func client(t *testing.T, s *ollamatest.Server) *api.Client {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return api.NewClient(u, &http.Client{Timeout: 10 * time.Second})
}

// chat sends one request as the real client does and gathers what comes back.
func chat(t *testing.T, c *api.Client, stream bool, content string) (string, api.ChatResponse, int, error) {
	t.Helper()
	req := &api.ChatRequest{
		Model:    "m",
		Messages: []api.Message{{Role: "user", Content: content}},
		Options:  map[string]any{"num_ctx": 2048},
	}
	if !stream {
		req.Stream = new(bool)
	}
	var (
		text  strings.Builder
		last  api.ChatResponse
		lines int
	)
	err := c.Chat(context.Background(), req, func(r api.ChatResponse) error {
		lines++
		text.WriteString(r.Message.Content)
		last = r
		return nil
	})
	return text.String(), last, lines, err
}

func TestScript(t *testing.T) {
	s := ollamatest.New(t,
		ollamatest.Reply{Content: "one", PromptTokens: 3, CompletionTokens: 4, TotalDuration: time.Second},
		ollamatest.Reply{Status: http.StatusServiceUnavailable, Error: "busy"},
	)
	s.Push(ollamatest.Reply{Content: "three"}, ollamatest.Reply{NotDone: true, Content: "four"}, ollamatest.Reply{Empty: true})
	c := client(t, s)

	text, last, lines, err := chat(t, c, false, "a")
	if err != nil || text != "one" || lines != 1 || !last.Done {
		t.Fatalf("reply 1: %q %d lines done=%v err=%v", text, lines, last.Done, err)
	}
	if last.PromptEvalCount != 3 || last.EvalCount != 4 || last.TotalDuration != time.Second || last.Message.Role != "assistant" {
		t.Errorf("reply 1 figures: %+v", last)
	}

	_, _, _, err = chat(t, c, false, "b")
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusServiceUnavailable || se.ErrorMessage != "busy" {
		t.Errorf("reply 2: err = %#v, want 503 busy", err)
	}

	text, last, lines, err = chat(t, c, true, "c")
	if err != nil || text != "three" || lines != 2 || !last.Done {
		t.Errorf("reply 3 (streamed): %q %d lines done=%v err=%v", text, lines, last.Done, err)
	}
	if last.PromptEvalCount != ollamatest.DefaultPromptTokens || last.EvalCount != ollamatest.DefaultCompletionTokens ||
		last.TotalDuration != ollamatest.DefaultTotalDuration {
		t.Errorf("reply 3 default figures: %+v", last.Metrics)
	}

	text, last, _, err = chat(t, c, false, "d")
	if err != nil || text != "four" || last.Done {
		t.Errorf("reply 4: %q done=%v err=%v, want done=false", text, last.Done, err)
	}

	_, _, lines, err = chat(t, c, false, "e")
	if err != nil || lines != 0 {
		t.Errorf("reply 5: %d lines err=%v, want an empty body", lines, err)
	}

	_, _, _, err = chat(t, c, false, "f")
	if !errors.As(err, &se) || se.StatusCode != http.StatusInternalServerError || se.ErrorMessage != "ollamatest: script exhausted" {
		t.Errorf("after the script: err = %v, want 500 script exhausted", err)
	}

	reqs := s.Requests()
	if len(reqs) != 6 {
		t.Fatalf("%d requests recorded, want 6", len(reqs))
	}
	for i, want := range []string{"a", "b", "c", "d", "e", "f"} {
		if got := reqs[i].Messages[0].Content; got != want {
			t.Errorf("request %d content = %q, want %q", i, got, want)
		}
	}
	if reqs[0].Stream == nil || *reqs[0].Stream || reqs[2].Stream != nil {
		t.Errorf("stream flags not recorded as sent: %v %v", reqs[0].Stream, reqs[2].Stream)
	}
	if reqs[0].Options["num_ctx"] != float64(2048) {
		t.Errorf("options = %v", reqs[0].Options)
	}

	// Copies: changing one must not change what was recorded.
	reqs[0].Messages[0].Content = "changed"
	reqs[0].Options["num_ctx"] = 1
	if again := s.Requests(); again[0].Messages[0].Content != "a" || again[0].Options["num_ctx"] != float64(2048) {
		t.Error("Requests returned the recorded requests, not copies")
	}
}

func TestHandle(t *testing.T) {
	s := ollamatest.New(t, ollamatest.Reply{Content: "scripted"})
	s.Handle(func(req api.ChatRequest) ollamatest.Reply {
		return ollamatest.Reply{Content: "echo " + req.Messages[len(req.Messages)-1].Content}
	})
	c := client(t, s)
	for _, want := range []string{"scripted", "echo x", "echo x"} {
		if got, _, _, err := chat(t, c, false, "x"); err != nil || got != want {
			t.Errorf("got %q, %v; want %q", got, err, want)
		}
	}
}

func TestModels(t *testing.T) {
	s := ollamatest.New(t, ollamatest.Reply{Content: "ok"})
	c := client(t, s)
	ctx := context.Background()

	if _, err := c.Show(ctx, &api.ShowRequest{Model: "anything"}); err != nil {
		t.Errorf("show before Models: %v", err)
	}
	if list, err := c.List(ctx); err != nil || len(list.Models) != 0 {
		t.Errorf("tags before Models: %v, %v", list, err)
	}

	s.Models("b", "a")
	if _, err := c.Show(ctx, &api.ShowRequest{Model: "a"}); err != nil {
		t.Errorf("show a: %v", err)
	}
	_, err := c.Show(ctx, &api.ShowRequest{Model: "m"})
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || se.ErrorMessage != "model 'm' not found" {
		t.Errorf("show m: err = %v, want 404", err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list.Models) != 2 || list.Models[0].Name != "a" || list.Models[1].Name != "b" {
		t.Errorf("tags: %+v, %v", list, err)
	}
	_, _, _, err = chat(t, c, false, "x")
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || !strings.Contains(se.ErrorMessage, "try pulling it first") {
		t.Errorf("chat with a missing model: err = %v, want 404", err)
	}
}

func TestRootAndVersion(t *testing.T) {
	s := ollamatest.New(t)
	c := client(t, s)
	if err := c.Heartbeat(context.Background()); err != nil {
		t.Errorf("heartbeat: %v", err)
	}
	v, err := c.Version(context.Background())
	if err != nil || v != ollamatest.Version {
		t.Errorf("version = %q, %v", v, err)
	}
	resp, err := http.Get(s.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "Ollama is running" {
		t.Errorf("GET / = %q", body)
	}
	resp, err = http.Get(s.URL + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nope = %d", resp.StatusCode)
	}
}

func TestBadRequestBody(t *testing.T) {
	s := ollamatest.New(t)
	resp, err := http.Post(s.URL+"/api/chat", "application/json", strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status = %d, want 400", resp.StatusCode)
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests recorded, want 0", n)
	}
}

func TestDelayEndsWithTheClient(t *testing.T) {
	s := ollamatest.New(t, ollamatest.Reply{Content: "late", Delay: time.Hour})
	c := client(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Chat(ctx, &api.ChatRequest{Model: "m", Stream: new(bool)}, func(api.ChatResponse) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want a deadline", err)
	}
	// Close must not wait out the hour either.
	s.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestCloseDuringDelay(t *testing.T) {
	s := ollamatest.New(t, ollamatest.Reply{Content: "late", Delay: time.Hour})
	c := client(t, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Chat(context.Background(), &api.ChatRequest{Model: "m", Stream: new(bool)}, func(api.ChatResponse) error { return nil })
	}()
	for len(s.Requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a delayed reply")
	}
	<-done
}

func TestConcurrent(t *testing.T) {
	s := ollamatest.New(t)
	s.Handle(func(req api.ChatRequest) ollamatest.Reply {
		return ollamatest.Reply{Content: req.Messages[0].Content}
	})
	c := client(t, s)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprint(i)
			if i%2 == 0 {
				s.Push(ollamatest.Reply{Content: want})
			}
			got, _, _, err := chat(t, c, false, want)
			if err != nil || got == "" {
				t.Errorf("request %d: %q, %v", i, got, err)
			}
			_ = s.Requests()
		}()
	}
	wg.Wait()
	if n := len(s.Requests()); n != 20 {
		t.Errorf("%d requests recorded, want 20", n)
	}
}

// ended waits until the handler of request i has returned and gives what it
// sent.
func ended(t *testing.T, s *ollamatest.Server, i int) ollamatest.Response {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if rs := s.Responses(); len(rs) > i && rs[i].Ended {
			return rs[i]
		}
		if time.Now().After(deadline) {
			t.Fatalf("response %d still being written after 5s", i)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRepeatAndLine(t *testing.T) {
	s := ollamatest.New(t,
		ollamatest.Reply{Content: "ab", Repeat: 3},
		ollamatest.Reply{Line: 100_000},
	)
	c := client(t, s)

	// Lines whatever the request asked for: stream is false here.
	text, last, lines, err := chat(t, c, false, "a")
	if err != nil || text != "ababab" || lines != 4 || !last.Done {
		t.Errorf("repeat: %q %d lines done=%v err=%v, want 3 chunks and a final line", text, lines, last.Done, err)
	}
	if r := ended(t, s, 0); !r.Complete || r.Bytes == 0 {
		t.Errorf("repeat response = %+v, want complete", r)
	}

	resp, err := http.Post(s.URL+"/api/chat", "application/json", strings.NewReader(`{"model":"m","stream":false}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(body) != 100_000 || !strings.HasPrefix(string(body), `{"model":"m","created_at":"`) || strings.ContainsRune(string(body), '\n') {
		t.Errorf("line: %d bytes starting %.60q, want 100000 bytes of one unfinished line", len(body), body)
	}
	if r := ended(t, s, 1); !r.Complete || r.Bytes != 100_000 {
		t.Errorf("line response = %+v, want 100000 bytes, complete", r)
	}
}

// TestHugeReplyStopsWhenTheClientLeaves checks that the fake notices a client
// that stops reading: what it wrote is what a test compares with the size of
// the reply.
func TestHugeReplyStopsWhenTheClientLeaves(t *testing.T) {
	const total = 1 << 40 // more than could ever be written in the test
	s := ollamatest.New(t,
		ollamatest.Reply{Content: strings.Repeat("x", 1<<10), Repeat: total >> 10},
		ollamatest.Reply{Line: total},
	)
	c := client(t, s)
	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		err := c.Chat(ctx, &api.ChatRequest{Model: "m", Stream: new(bool)}, func(api.ChatResponse) error {
			cancel()
			return errors.New("enough")
		})
		cancel()
		if i == 0 && (err == nil || err.Error() != "enough") {
			t.Errorf("repeat: err = %v, want the callback's", err)
		}
		if r := ended(t, s, i); r.Complete || r.Bytes == 0 || r.Bytes >= total {
			t.Errorf("response %d = %+v, want cut short", i, r)
		}
	}
}

// TestDrip checks that a dripped reply arrives whole but slowly, headers
// first, and that the fake stops dripping once the client is gone.
func TestDrip(t *testing.T) {
	const pause = 2 * time.Millisecond
	s := ollamatest.New(t, ollamatest.Reply{Content: "slow", Drip: pause}, ollamatest.Reply{Content: "slower", Drip: time.Hour})
	c := client(t, s)
	start := time.Now()
	text, last, _, err := chat(t, c, false, "a")
	if err != nil || text != "slow" || !last.Done {
		t.Fatalf("dripped reply: %q done=%v err=%v", text, last.Done, err)
	}
	sent := ended(t, s, 0)
	if !sent.Complete || time.Since(start) < time.Duration(sent.Bytes-1)*pause {
		t.Errorf("sent %+v in %s, want every byte %s apart", sent, time.Since(start), pause)
	}

	// Headers come at once; the body never ends within the client's wait.
	resp, err := http.Post(s.URL+"/api/chat", "application/json", strings.NewReader(`{"model":"m","stream":false}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil || first[0] != '{' {
		t.Errorf("first byte %q, %v", first, err)
	}
	resp.Body.Close()
	if got := ended(t, s, 1); got.Complete {
		t.Errorf("the fake finished a reply the client left: %+v", got)
	}
}

// TestNewAt starts the fake where a client already looks, as Ollama started
// after the daemon.
func TestNewAt(t *testing.T) {
	probe := ollamatest.New(t)
	addr := strings.TrimPrefix(probe.URL, "http://")
	probe.Close()
	s := ollamatest.NewAt(t, addr, ollamatest.Reply{Content: "here"})
	if s.URL != "http://"+addr {
		t.Errorf("URL = %q, want http://%s", s.URL, addr)
	}
	if text, _, _, err := chat(t, client(t, s), false, "a"); err != nil || text != "here" {
		t.Errorf("reply: %q, %v", text, err)
	}
}
