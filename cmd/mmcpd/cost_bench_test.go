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
// the default budget, and reports the share of each model call's prompt
// that the previous call already had (Ollama's cache holds it and does not
// read it again): the average over the calls, and the lowest after the
// first, in percent. A call's new messages count against its share, so even
// a perfect cache stays below 100: ceiling_avg_% and ceiling_min_% are the
// shares it would reach (all but the added content reused), and
// reuse_of_ideal_% how much of that the daemon's prompts let Ollama keep.
func BenchmarkPrefixReuse(b *testing.B) {
	fast := ollamatest.GPU
	fast.Speedup = 100 // the shares do not depend on time
	for b.Loop() {
		costs := runCostSession(b, fast)
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
		b.ReportMetric(100*avg(ceiling), "ceiling_avg_%")
		b.ReportMetric(100*slices.Min(ceiling[1:]), "ceiling_min_%")
		b.ReportMetric(100*float64(reused)/float64(reusable), "reuse_of_ideal_%")
		b.ReportMetric(float64(slices.MaxFunc(costs, byPrompt).PromptChars), "prompt_max_chars")
		b.Logf("%d model calls; %% of each prompt reused: %s", len(costs), percents(shares))
	}
}

func avg(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
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
		for _, c := range runCostSession(b, cpu) {
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
// tool calls (works_echo stands for a media service: the observation is the
// request echoed back) and its answer.
type costTurn struct {
	question string
	calls    [2]costCall
	thought  string // of the answer
	answer   string
}

type costCall struct{ thought, text string }

// costSession is a plausible evening with the assistant. Replies are
// written as a 7B model writes them: a thought of a sentence or two, the
// action, its arguments; an answer of a few sentences.
var costSession = []costTurn{
	{"What arrived in my film library this week?",
		[2]costCall{{"The user wants recent additions, so I ask the library for films added in the last seven days.", "library.recent type=movie days=7 sort=added_desc limit=20"},
			{"I have the new titles; I also check the download queue so I can say what arrives soon.", "downloads.active category=movies fields=name,progress,eta"}},
		"I know what arrived and what is on its way, so I can answer.",
		"Three films arrived this week: Arrival (2016), Dune: Part Two (2024) and Past Lives (2023). Two more are downloading: Perfect Days is at 64% and should be done in about twenty minutes, and The Zone of Interest has just started. Everything new is already in Jellyfin under Recently Added."},
	{"Is Perfect Days going to be in 4K?",
		[2]costCall{{"The user asks about the quality of a download in progress; I look at the torrent's file list.", "downloads.files name=\"Perfect Days\" fields=path,size,resolution"},
			{"The files show the resolution; I check the Radarr profile to see whether an upgrade is planned.", "radarr.movie title=\"Perfect Days\" year=2023 fields=qualityProfile,cutoffMet"}},
		"The download and the profile together answer the question.",
		"No, the copy downloading now is 1080p (a 9.8 GB Blu-ray encode). Radarr's profile for it is HD-1080p, so it will not look for a 4K upgrade. If you want 4K, switch the film to the Ultra-HD profile in Radarr and it will search again once this download finishes."},
	{"Switch it to Ultra-HD then, but only after this one finishes.",
		[2]costCall{{"Before changing anything I confirm which profiles exist and what Ultra-HD is called exactly.", "radarr.profiles fields=id,name,cutoff"},
			{"I need the download's progress to tell the user when the change will take effect.", "downloads.status name=\"Perfect Days\" fields=progress,eta,state"}},
		"Changing the profile needs the user's confirmation through the approval flow, so I explain what will happen.",
		"The Ultra-HD profile (id 5) exists and would make Radarr look for a 2160p copy. The current download is at 81% with about eight minutes left. Changing a profile is something I ask you to confirm first: say yes and I will switch Perfect Days to Ultra-HD as soon as the 1080p copy is imported, so nothing is lost if no 4K release turns up."},
	{"Not yet. Anything new from the shows I follow?",
		[2]costCall{{"The user follows shows in Sonarr; I ask for episodes that aired in the last few days.", "sonarr.calendar past_days=7 future_days=0 fields=series,episode,title,hasFile"},
			{"Some episodes may be missing files; I check the queue for those.", "sonarr.queue fields=series,episode,progress,status"}},
		"I have the aired episodes and their download state.",
		"Four new episodes aired this week. Severance S02E05 and Shogun S01E10 are in your library. The Bear S03E01 is downloading (40%, about ten minutes). Slow Horses S04E03 has not been found yet; Sonarr will keep searching every fifteen minutes and usually finds it within a day."},
	{"Why can't it find Slow Horses?",
		[2]costCall{{"Sonarr keeps a history of its searches; I look at the last attempts for that episode.", "sonarr.history series=\"Slow Horses\" episode=S04E03 limit=5"},
			{"The history mentions rejected releases; I check which indexers answered.", "prowlarr.indexers fields=name,status,disabledTill"}},
		"The history and the indexer states explain the delay.",
		"Sonarr found two releases of Slow Horses S04E03 but rejected both: one was 720p, below your profile's 1080p minimum, and the other had too few seeders. One of your three indexers is also failing and disabled until 21:40. Nothing is wrong on your side; a proper 1080p release usually appears within a day."},
	{"Fine. Recommend me a film for tonight from what I already have.",
		[2]costCall{{"A recommendation from the user's own library starts with the films they have not watched.", "library.unwatched type=movie fields=title,year,runtime,genres limit=30"},
			{"I look at what the user watched recently to match their taste.", "library.history type=movie days=30 fields=title,rating"}},
		"I can pick one unwatched film that fits the recent viewing.",
		"Try Past Lives (2023): you have not watched it, it runs 106 minutes, and it is a quiet, warm drama, close to Aftersun, which you rated five stars last week. If you would rather have something lighter, Paddington 2 is also unwatched and is 103 minutes of pure comfort."},
	{"How much space is left on the media disk?",
		[2]costCall{{"Disk space is reported by Radarr's system status; I ask for the root folders.", "radarr.rootfolders fields=path,freeSpace,totalSpace"},
			{"I check the downloads folder too, because it lives on the same disk.", "downloads.session fields=downloadDir,freeSpace"}},
		"Both figures come from the same disk, so I answer with one number.",
		"The media disk has 412 GB free out of 4 TB (about 10%). The downloads folder is on the same disk, so a 4K film (40 to 60 GB) still fits several times over, but at the current pace you will want to clean up or add a disk within a few months."},
	{"What are the biggest films I've already watched?",
		[2]costCall{{"I list watched films with their file sizes, largest first.", "library.watched type=movie sort=size_desc fields=title,year,size limit=10"},
			{"I check which of them are still seeding, because removing those would stop the torrents.", "downloads.list filter=seeding fields=name,ratio,size"}},
		"I have the largest watched films and whether they still seed.",
		"Your five biggest watched films are Oppenheimer (78 GB, 4K), Dune (2021) (64 GB, 4K), Interstellar (58 GB, 4K), Blade Runner 2049 (52 GB) and The Batman (49 GB). Only Oppenheimer is still seeding, at a ratio of 1.4. Removing the other four would free about 223 GB."},
	{"Remove Interstellar and The Batman.",
		[2]costCall{{"Removing files is destructive; first I find the exact library entries for both films.", "radarr.movie title=\"Interstellar\" year=2014 fields=id,path,sizeOnDisk"},
			{"Now the second film, so both removals can be confirmed at once.", "radarr.movie title=\"The Batman\" year=2022 fields=id,path,sizeOnDisk"}},
		"Both entries are found; deleting them needs the user's confirmation.",
		"I found both: Interstellar (2014, 58 GB) and The Batman (2022, 49 GB). Deleting them frees 107 GB and cannot be undone, so each removal asks for your confirmation. Radarr will also stop monitoring them, so they will not download again unless you add them back."},
	{"Thanks. Anything else I should know about tonight?",
		[2]costCall{{"I look for anything unusual: failed downloads or stalled torrents.", "downloads.list filter=error,stalled fields=name,error,eta"},
			{"I also check for health warnings from Sonarr and Radarr.", "radarr.health fields=source,type,message"}},
		"Nothing urgent turned up beyond what we discussed.",
		"All quiet: no failed or stalled downloads, and Radarr and Sonarr report no health problems apart from the indexer that is disabled until 21:40. Perfect Days will be imported in a few minutes, and The Bear S03E01 right after. Enjoy Past Lives!"},
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
			return ollamatest.Reply{Content: envelope(c.thought, "works_echo", map[string]string{"text": c.text})}
		}
		return ollamatest.Reply{Content: envelope(turn.thought, "final_response", map[string]string{"answer": turn.answer})}
	}
	return ollamatest.Reply{Status: http.StatusInternalServerError, Error: "cost session: no scripted question in the prompt"}
}

// runCostSession runs costSession through a fresh daemon against a fake
// model with cost c and returns what each model call cost.
func runCostSession(b *testing.B, c ollamatest.Cost) []ollamatest.CallCost {
	b.Helper()
	fake := ollamatest.New(b)
	fake.SetCost(c)
	fake.Handle(sessionReply)
	d := startCostDaemon(b, fake)
	client := &http.Client{Timeout: 5 * time.Minute}
	session := ""
	for i, t := range costSession {
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
	if want := len(costSession) * 3; len(costs) != want {
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
// readable by the plugin user the daemon runs plugins as under root: the test
// plugin as "works" (its works_echo stands for the media services) and
// "clock", the system plugin's "now" line on a simulated clock that moves
// on a few minutes every turn, as in a real session.
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
		for name, pkg := range map[string]string{"works": "../../pkg/plugins/testdata/testplugin", "clock": "./testdata/clock"} {
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

// startCostDaemon starts the shipped daemon against fake with the works
// plugin and default settings, and waits until it is ready (plugins started,
// model there).
func startCostDaemon(b *testing.B, fake *ollamatest.Server) costDaemon {
	b.Helper()
	d := startLoadDaemon(b, loadBinary(b), []string{
		"MMCP_OLLAMA_HOST=" + fake.URL,
		"MMCP_PLUGINS_DIR=" + costPluginsDir(b),
		"MMCP_DATA_DIR=" + b.TempDir(),
		"MMCP_LOG_LEVEL=warn",
	})
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
