package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// The cost benchmarks measure what a turn costs on a slow local model: the
// real daemon (built as it ships) talks to the fake Ollama with its cost
// model on (ollamatest.SetCost), which charges each call the prompt its
// cache does not hold and the reply at the hardware's pace. Each iteration
// starts a fresh model and daemon, so the figures do not depend on what ran
// before.
//
//	go test -run='^$' -bench='PrefixReuse|FirstAnswerByte|SessionTime' -benchtime=1x ./cmd/mmcpd

// BenchmarkPrefixReuse runs a 10-turn session, two tool calls per turn, with
// the default budget and a system prompt as long as a real daemon's (the
// catalogue plugin's 25 tools), and reports the share of each model call's
// prompt that the previous call already had (Ollama's cache holds it and
// does not read it again): the average over the calls, and the lowest after
// the first, in percent. A call's new messages count against its share, so even
// a perfect cache stays below 100: ceiling_avg_% and ceiling_min_% are the
// shares it would reach (all but the added content reused), and
// reuse_of_ideal_% how much of that the daemon's prompts let Ollama keep.
// The first call reuses nothing and weighs a thirtieth of reuse_avg_%;
// reuse_avg_after_first_% is the average over the calls after it.
func BenchmarkPrefixReuse(b *testing.B) {
	fast := ollamatest.GPU
	fast.Speedup = 100 // the shares do not depend on time
	for b.Loop() {
		costs := runCostSession(b, fast, 1)
		var reused, reusable int
		shares, ceiling := make([]float64, len(costs)), make([]float64, len(costs))
		for i, c := range costs {
			reused += c.ReusedChars
			reusable += c.PromptChars - c.AddedChars
			shares[i] = c.Reused()
			ceiling[i] = float64(c.PromptChars-c.AddedChars) / float64(c.PromptChars)
		}
		b.ReportMetric(0, "ns/op") // an op is one session: the figures below say how it went
		b.ReportMetric(100*avg(shares), "reuse_avg_%")
		b.ReportMetric(100*slices.Min(shares[1:]), "reuse_min_%")
		b.ReportMetric(100*avg(shares[1:]), "reuse_avg_after_first_%")
		b.ReportMetric(100*avg(ceiling), "ceiling_avg_%")
		b.ReportMetric(100*slices.Min(ceiling[1:]), "ceiling_min_%")
		b.ReportMetric(100*float64(reused)/float64(reusable), "reuse_of_ideal_%")
		b.ReportMetric(float64(slices.MaxFunc(costs, byPrompt).PromptChars), "prompt_max_chars")
		b.Logf("%d model calls; %% of each prompt reused: %s", len(costs), percents(shares))
		b.Logf("a perfect cache's %%: %s", percents(ceiling))
		b.Logf("prompt characters: %s", chars(costs))
	}
}

// BenchmarkPrefixReuseLong runs the evening three times over in one session
// (30 turns, 90 model calls), long enough that the window must cut the
// history's front, and reports what the cuts cost: how many calls came after
// a cut (the prompt shrank), the share those calls reused (about the system
// prompt over what the window kept), the average over the calls after the
// first, and the characters the cuts made Ollama read again.
func BenchmarkPrefixReuseLong(b *testing.B) {
	fast := ollamatest.GPU
	fast.Speedup = 100
	for b.Loop() {
		costs := runCostSession(b, fast, 3)
		var shares, atCuts []float64
		reread := 0
		for i, c := range costs[1:] {
			shares = append(shares, c.Reused())
			if c.PromptChars < costs[i].PromptChars {
				atCuts = append(atCuts, c.Reused())
				reread += c.PromptChars - c.AddedChars - c.ReusedChars
			}
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(len(atCuts)), "cuts")
		b.ReportMetric(100*avg(shares), "reuse_avg_after_first_%")
		if len(atCuts) > 0 {
			b.ReportMetric(100*avg(atCuts), "reuse_at_cut_%")
		}
		b.ReportMetric(float64(reread), "cut_reread_chars")
		b.Logf("%d model calls; %% of each prompt reused: %s", len(costs), percents(shares))
		b.Logf("prompt characters: %s", chars(costs))
	}
}

func avg(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func chars(costs []ollamatest.CallCost) string {
	out := make([]string, len(costs))
	for i, c := range costs {
		out[i] = fmt.Sprint(c.PromptChars)
	}
	return strings.Join(out, " ")
}

func percents(xs []float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.0f", 100*x)
	}
	return strings.Join(out, " ")
}

// BenchmarkSessionTime runs the same session under the CPU profile and
// reports its simulated model time against the ideal, where every call pays
// only for its reply and for what was added since the previous call: new
// messages, and of a message changed in place (the clock line in the system
// prompt) the part that changed. x_ideal is the ratio; sim_s and ideal_s the
// totals in simulated seconds, sim_prompt_s the part spent reading prompts.
func BenchmarkSessionTime(b *testing.B) {
	cpu := ollamatest.CPU
	cpu.Speedup = 200 // 30 calls of seconds to minutes each, in seconds
	for b.Loop() {
		var sim, ideal, prompt float64
		for _, c := range runCostSession(b, cpu, 1) {
			sim += c.Seconds()
			ideal += c.IdealSeconds
			prompt += c.PromptSeconds
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(sim/ideal, "x_ideal")
		b.ReportMetric(sim, "sim_s")
		b.ReportMetric(ideal, "ideal_s")
		b.ReportMetric(prompt, "sim_prompt_s")
	}
}

// BenchmarkFirstAnswerByte asks one question over Server-Sent Events of a
// model that answers at once, writing 1 token per 50 ms, and reports how
// long after the model wrote the first token of the answer its first byte
// reached the client. A daemon that passes the answer on as the model writes
// it keeps this near zero; one that waits for the whole reply adds the
// reply's length.
func BenchmarkFirstAnswerByte(b *testing.B) {
	model := ollamatest.Cost{PromptRate: ollamatest.GPU.PromptRate, GenRate: 20, CharsPerToken: 4}
	for b.Loop() {
		fake := ollamatest.New(b)
		fake.SetCost(model)
		reply := envelope(firstAnswer.thought, "final_response", map[string]string{"answer": firstAnswer.answer})
		fake.Push(ollamatest.Reply{Content: reply})
		d := startCostDaemon(b, fake)

		arrived, err := sseFirstAnswer(d.addr, firstAnswer.question, firstAnswer.answer)
		if err != nil {
			b.Fatalf("%v\n%s", err, d.logs)
		}
		d.stop(b)
		fake.Close()
		costs := fake.Costs()
		if len(costs) != 1 {
			b.Fatalf("%d model calls, want 1", len(costs))
		}
		at := strings.Index(reply, firstAnswer.answer)
		first, last := costs[0].ProducedAt(at), costs[0].ProducedAt(len(reply)-1)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(ms(arrived.Sub(first)), "lag_ms")
		b.ReportMetric(ms(last.Sub(first)), "answer_gen_ms")
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func byPrompt(a, b ollamatest.CallCost) int { return a.PromptChars - b.PromptChars }

// costTurn is one turn of the session: the user's question, the model's two
// calls of the bundled plugins' tools (played by the catalogue test plugin,
// which answers with canned results like the real ones) and its answer.
type costTurn struct {
	question string
	calls    [2]costCall
	thought  string // of the answer
	answer   string
}

// costCall is one tool call: the model's thought, the tool and its arguments.
type costCall struct {
	thought, action string
	args            map[string]any
}

// costSession is a plausible evening with the assistant. Replies are
// written as a 7B model writes them: a thought of a sentence or two, the
// action, its arguments; an answer of a few sentences.
var costSession = []costTurn{
	{"What arrived in my film library this week?",
		[2]costCall{{"The user wants recent additions, so I ask Jellyfin for the newest items.", "jellyfin_latest", map[string]any{"limit": 10}},
			{"I have the new titles; I also check Radarr's queue so I can say what arrives soon.", "radarr_queue", map[string]any{}}},
		"I know what arrived and what is on its way, so I can answer.",
		"Three films arrived this week: Past Lives (2023), Dune: Part Two (2024) and Arrival (2016), plus a new Severance episode and Massive Attack's Blue Lines. Two more films are downloading: Perfect Days is at 64% and should be done in about twenty minutes, and The Zone of Interest has just started."},
	{"What's downloading right now?",
		[2]costCall{{"The user asks about downloads; Transmission lists the active torrents.", "transmission_list", map[string]any{"filter": "downloading"}},
			{"One torrent looks like an episode; I check Sonarr's queue to name it properly.", "sonarr_queue", map[string]any{}}},
		"Transmission and Sonarr together give the full picture.",
		"Three downloads are running: Perfect Days (1080p, 71%, about 17 minutes left), The Bear S03E01 (40%, about 9 minutes) and The Zone of Interest (4%, almost two hours). Together they pull about 7.6 MB/s, so everything should be in your library before midnight."},
	{"Anything new coming from the shows I follow?",
		[2]costCall{{"The user follows shows in Sonarr; I ask for the episodes airing in the coming week.", "sonarr_calendar", map[string]any{"days": 7}},
			{"Slow Horses is among them; I check whether last week's episode is in the library.", "jellyfin_search", map[string]any{"query": "Slow Horses", "type": "episode"}}},
		"I have the coming episodes and the state of Slow Horses.",
		"This week brings Slow Horses S04E04 on Tuesday, Severance S02E06 on Thursday and the first episode of Shogun's second season on Friday. Sonarr will fetch each as it airs. Note that last week's Slow Horses episode, S04E03, is still missing from your library."},
	{"Why is that Slow Horses episode missing?",
		[2]costCall{{"A missing episode usually means no acceptable release; I check the indexers' health first.", "prowlarr_indexers", map[string]any{}},
			{"Now I look at which releases exist for that episode.", "prowlarr_search", map[string]any{"query": "Slow Horses S04E03", "type": "tvsearch"}}},
		"The indexer states and the releases explain the delay.",
		"Two releases of Slow Horses S04E03 exist: a 720p one, below your profile's 1080p minimum, and a 1080p one with only two seeders, too few for Sonarr. TorrentLeech is also failing and disabled until 21:40. A well-seeded 1080p release usually appears within a day, and Sonarr will take it then."},
	{"Is Dune in my library? And which one?",
		[2]costCall{{"The user asks about their own library, so I search Jellyfin for the title.", "jellyfin_search", map[string]any{"query": "Dune", "type": "movie"}},
			{"There are several films called Dune; TMDB tells them apart.", "tmdb_search", map[string]any{"query": "Dune"}}},
		"I know which Dune films exist and which the user has.",
		"You have both of Denis Villeneuve's films: Dune (2021), which you watched on 2 October, and Dune: Part Two (2024), added this week and not watched yet. David Lynch's Dune (1984) is not in your library; say the word if you want it."},
	{"What's trending this week that I don't have?",
		[2]costCall{{"I ask TMDB for this week's trending films.", "tmdb_trending", map[string]any{"media_type": "movie", "window": "week"}},
			{"Anora tops the list; I check on Jellyseerr whether it was requested or is available.", "seerr_search", map[string]any{"query": "Anora"}}},
		"I know what is trending and that the top film is not requested.",
		"This week's trending films are Anora, The Substance, The Wild Robot, Gladiator II and Wicked. None of them is in your library, and Anora, at the top, has not been requested yet. The Wild Robot has the best rating of the five (8.4) if you want something for the whole family."},
	{"Tell me more about Anora.",
		[2]costCall{{"TMDB has the details of the film by its id.", "tmdb_details", map[string]any{"id": 1064213, "media_type": "movie"}},
			{"I check Radarr too, so I can say whether it can be added.", "radarr_lookup", map[string]any{"term": "Anora"}}},
		"I have the film's details and Radarr knows it.",
		"Anora (2024) is Sean Baker's comedy-drama about a young dancer from Brooklyn who marries the son of a Russian oligarch, with Mikey Madison in the lead. It runs 139 minutes and came out digitally in December 2024. It is not in Radarr yet; I can add it if you like, after your approval."},
	{"Any films coming out soon that we're waiting for?",
		[2]costCall{{"Radarr's calendar shows the monitored films coming out soon.", "radarr_calendar", map[string]any{"days": 14}},
			{"The household's requests on Jellyseerr may name more.", "seerr_requests", map[string]any{"filter": "unavailable"}}},
		"The calendar and the requests agree on what is coming.",
		"Nosferatu comes out digitally on Wednesday, and Radarr will grab it that day; Sam requested it on 2 November. The Brutalist follows on disc on 2 December. Alex's request for Shogun's second season is being processed, and its first episode airs on Friday."},
	{"Is anyone watching something right now?",
		[2]costCall{{"Jellyfin knows who is playing what.", "jellyfin_now_playing", map[string]any{}},
			{"Seeding torrents can make streaming stutter; I check what Transmission uploads.", "transmission_list", map[string]any{"filter": "seeding"}}},
		"One person is watching and two torrents are seeding.",
		"Sam is watching Paddington 2 on the living room TV, 41 minutes in. Two torrents are seeding at the same time, Oppenheimer and Dune (2021), uploading about 5 MB/s together; if the film stutters, pausing them would help."},
	{"Pause those two torrents for tonight.",
		[2]costCall{{"I confirm the ids of the seeding torrents before pausing them.", "transmission_list", map[string]any{"filter": "seeding"}},
			{"The ids are 3 and 7; pausing needs no approval.", "transmission_pause", map[string]any{"ids": []int{3, 7}}}},
		"Both torrents are paused.",
		"Done: Oppenheimer and Dune (2021) are paused, so the upload no longer competes with Sam's film. Their ratios are 1.4 and 0.8; tell me tomorrow and I will resume them, or I can leave Dune paused until it is worth seeding again."},
}

// firstAnswer is the one turn of BenchmarkFirstAnswerByte. The answer's
// first word appears nowhere else in what the daemon sends.
var firstAnswer = costTurn{
	question: "What should I watch tonight? Something thoughtful, under two hours.",
	thought:  "The user asks for taste, not for the state of a service, so I answer from what I know.",
	answer: "Tonight I would pick Past Lives (2023): a quiet, warm drama about two childhood friends who meet again twenty years later, " +
		"in 106 minutes. It is in your library and you have not watched it yet. If you want something lighter, Paddington 2 runs 103 minutes " +
		"and is pure comfort; for something stranger, Arrival (2016) is thoughtful science fiction at just under two hours.",
}

// envelope is a model reply: thought, action and args, in that order.
func envelope(thought, action string, args any) string {
	b, err := json.Marshal(struct {
		Thought string `json:"thought"`
		Action  string `json:"action"`
		Args    any    `json:"args"`
	}{thought, action, args})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// sessionReply answers a step of costSession: the turn is the newest
// question in the prompt, the step how many decisions follow it.
func sessionReply(req api.ChatRequest) ollamatest.Reply {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		t := slices.IndexFunc(costSession, func(t costTurn) bool { return t.question == m.Content })
		if m.Role != "user" || t < 0 {
			continue
		}
		turn := costSession[t]
		step := 0
		for _, later := range req.Messages[i+1:] {
			if later.Role == "assistant" {
				step++
			}
		}
		if step < len(turn.calls) {
			c := turn.calls[step]
			return ollamatest.Reply{Content: envelope(c.thought, c.action, c.args)}
		}
		return ollamatest.Reply{Content: envelope(turn.thought, "final_response", map[string]string{"answer": turn.answer})}
	}
	return ollamatest.Reply{Status: http.StatusInternalServerError, Error: "cost session: no scripted question in the prompt"}
}

// runCostSession runs costSession, rounds times over in one session, through
// a fresh daemon against a fake model with cost c and returns what each
// model call cost.
func runCostSession(b *testing.B, c ollamatest.Cost, rounds int) []ollamatest.CallCost {
	b.Helper()
	fake := ollamatest.New(b)
	fake.SetCost(c)
	fake.Handle(sessionReply)
	d := startCostDaemon(b, fake)
	client := &http.Client{Timeout: 5 * time.Minute}
	session := ""
	for i, t := range slices.Repeat(costSession, rounds) {
		cr, err := costTurnOnce(client, d.addr, session, t.question)
		if err != nil {
			b.Fatalf("turn %d: %v\n%s", i+1, err, d.logs)
		}
		if cr.Answer != t.answer || len(cr.Steps) != len(t.calls)+1 {
			b.Fatalf("turn %d: answer %q after %d steps, want the scripted one after %d", i+1, cr.Answer, len(cr.Steps), len(t.calls)+1)
		}
		session = cr.SessionID
	}
	d.stop(b)
	fake.Close()
	costs := fake.Costs()
	if want := rounds * len(costSession) * 3; len(costs) != want {
		b.Fatalf("%d model calls, want %d", len(costs), want)
	}
	return costs
}

// costTurnOnce sends one message and returns the daemon's answer.
func costTurnOnce(client *http.Client, addr, session, message string) (*server.ChatResponse, error) {
	body, _ := json.Marshal(server.ChatRequest{Message: message, SessionID: session})
	resp, err := client.Post("http://"+addr+"/v1/chat", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(raw))
	}
	var cr server.ChatResponse
	return &cr, json.Unmarshal(raw, &cr)
}

// sseFirstAnswer sends message asking for Server-Sent Events and returns when
// the first piece of answer reached the client. It reads the stream to its
// end and fails unless the turn ends with that answer.
func sseFirstAnswer(addr, message, answer string) (time.Time, error) {
	body, _ := json.Marshal(server.ChatRequest{Message: message})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		return time.Time{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, raw)
	}
	var first time.Time
	event := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		now := time.Now()
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			return time.Time{}, fmt.Errorf("event %s: %v: %s", event, err, data)
		}
		if first.IsZero() && carriesAnswer(v, answer) {
			first = now
		}
		switch event {
		case "done":
			var cr server.ChatResponse
			if err := json.Unmarshal([]byte(data), &cr); err != nil || cr.Answer != answer {
				return time.Time{}, fmt.Errorf("the turn ended with %s", data)
			}
			if first.IsZero() {
				return time.Time{}, fmt.Errorf("the answer never came before done")
			}
			return first, nil
		case "error":
			return time.Time{}, fmt.Errorf("the turn failed: %s", data)
		}
	}
	return time.Time{}, fmt.Errorf("the stream ended without done: %v", sc.Err())
}

// carriesAnswer reports whether an event's data holds a piece of the
// answer's start: a string, at any depth, that is a beginning of the answer
// (a delta, or the whole answer) or holds its first words. The answer
// starts with a word nothing else in the stream begins with, so nothing
// else matches.
func carriesAnswer(v any, answer string) bool {
	switch v := v.(type) {
	case string:
		return v != "" && (strings.HasPrefix(answer, v) || strings.Contains(v, answer[:16]))
	case []any:
		return slices.ContainsFunc(v, func(e any) bool { return carriesAnswer(e, answer) })
	case map[string]any:
		for _, e := range v {
			if carriesAnswer(e, answer) {
				return true
			}
		}
	}
	return false
}

// costPlugins is the plugins folder of the cost benchmarks, built once,
// readable by the plugin user the daemon runs plugins as under root:
// "catalogue", the bundled plugins' 25 tools of a home with Jellyfin,
// Radarr, Sonarr, Prowlarr, Transmission, TMDB and Jellyseerr (their names,
// descriptions and argument schemas, with canned results), so the system
// prompt is as long as a real daemon's, and "clock", the system plugin's
// "now" line on a simulated clock that moves on a few minutes every turn, as
// in a real session.
var costPlugins struct {
	once   sync.Once
	dir    string
	err    error
	output []byte
}

func costPluginsDir(b *testing.B) string {
	b.Helper()
	costPlugins.once.Do(func() {
		costPlugins.dir = filepath.Join(filepath.Dir(binary), "cost-plugins") // its parent is 0755 (TestMain)
		if costPlugins.err = os.MkdirAll(costPlugins.dir, 0o755); costPlugins.err != nil {
			return
		}
		for name, pkg := range map[string]string{"catalogue": "./testdata/catalogue", "clock": "./testdata/clock"} {
			out := filepath.Join(costPlugins.dir, plugins.FilePrefix+name)
			if costPlugins.output, costPlugins.err = exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); costPlugins.err != nil {
				return
			}
		}
	})
	if costPlugins.err != nil {
		b.Fatalf("building the test plugin: %v\n%s", costPlugins.err, costPlugins.output)
	}
	return costPlugins.dir
}

// costDaemon is a daemon started for one iteration.
type costDaemon struct{ *loadDaemon }

// startCostDaemon starts the shipped daemon against fake with the cost
// plugins and default settings (env adds to them), and waits until it is ready (plugins started,
// model there).
func startCostDaemon(b *testing.B, fake *ollamatest.Server, env ...string) costDaemon {
	b.Helper()
	d := startLoadDaemon(b, loadBinary(b), append([]string{
		"MMCP_OLLAMA_HOST=" + fake.URL,
		"MMCP_PLUGINS_DIR=" + costPluginsDir(b),
		"MMCP_DATA_DIR=" + b.TempDir(),
		"MMCP_LOG_LEVEL=warn",
	}, env...))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + d.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return costDaemon{d}
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("daemon not ready:\n%s", d.logs)
		}
	}
}

// stop ends the daemon as a person would, so that its plugins go with it
// before the next iteration starts another.
func (d costDaemon) stop(b *testing.B) {
	b.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
		b.Errorf("the daemon did not stop within 30s of SIGTERM:\n%s", d.logs)
	}
}
