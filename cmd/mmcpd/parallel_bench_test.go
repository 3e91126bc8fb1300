package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
)

// parallelTurn is a question whose tool calls do not depend on each other:
// a model asks for them one step at a time, or all in one reply.
type parallelTurn struct {
	question string
	calls    []costCall
	batch    string // the thought of the reply that asks for all at once
	answer   string
}

// parallelSession is a set of such questions, asked in one session; its
// calls are costSession's (valid arguments of the catalogue plugin's tools).
var parallelSession = []parallelTurn{
	{"What arrived in my film library this week, and what is still on its way?",
		[]costCall{costSession[0].calls[0], costSession[0].calls[1]},
		"Jellyfin has the new items and Radarr the films still coming; I ask both at once.",
		"Three films arrived this week: Past Lives, Dune: Part Two and Arrival. Perfect Days is at 64% and The Zone of Interest has just started."},
	{"What's downloading right now, and what does Sonarr have queued?",
		[]costCall{costSession[1].calls[0], costSession[1].calls[1]},
		"Transmission lists the torrents and Sonarr its queue; they do not depend on each other.",
		"Three downloads are running: Perfect Days (71%), The Bear S03E01 (40%) and The Zone of Interest (4%); Sonarr is waiting for The Bear."},
	{"Is anyone watching something, and is anything seeding that could slow it down?",
		[]costCall{costSession[8].calls[0], costSession[8].calls[1]},
		"Jellyfin knows who plays what, Transmission what seeds.",
		"Sam is watching Paddington 2 in the living room while Oppenheimer and Dune seed at about 5 MB/s together."},
	{"What comes out in the next weeks, films and shows, and what have we asked for?",
		[]costCall{costSession[2].calls[0], costSession[7].calls[0], costSession[7].calls[1]},
		"Sonarr's and Radarr's calendars and Jellyseerr's requests together say what comes.",
		"Slow Horses S04E04 airs Tuesday and Severance S02E06 Thursday; Nosferatu comes out digitally on Wednesday, and Alex's request for Shogun is being processed."},
	{"Is Dune in my library? Which Dune films are there?",
		[]costCall{costSession[4].calls[0], costSession[4].calls[1]},
		"Jellyfin says which Dune films the user has, TMDB which exist.",
		"You have Dune (2021) and Dune: Part Two (2024); David Lynch's Dune (1984) is not in your library."},
	{"What's trending this week, and what have we requested already?",
		[]costCall{costSession[5].calls[0], costSession[7].calls[1]},
		"TMDB's trending list and the household's requests, both at once.",
		"Anora, The Substance, The Wild Robot, Gladiator II and Wicked are trending; none of them is requested yet."},
}

// parallelReply answers a step of parallelSession: one call per step, or,
// when the daemon offers calls at once (the format has the batch branch),
// every call of the question in the first reply.
func parallelReply(req api.ChatRequest) ollamatest.Reply {
	batch := strings.Contains(string(req.Format), `"calls"`)
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		t := slices.IndexFunc(parallelSession, func(t parallelTurn) bool { return t.question == m.Content })
		if m.Role != "user" || t < 0 {
			continue
		}
		turn := parallelSession[t]
		step := 0
		for _, later := range req.Messages[i+1:] {
			if later.Role == "assistant" {
				step++
			}
		}
		switch {
		case batch && step == 0:
			type item struct {
				Action string `json:"action"`
				Args   any    `json:"args"`
			}
			var items []item
			for _, c := range turn.calls {
				items = append(items, item{c.action, c.args})
			}
			b, _ := json.Marshal(struct {
				Thought string `json:"thought"`
				Calls   []item `json:"calls"`
			}{turn.batch, items})
			return ollamatest.Reply{Content: string(b)}
		case !batch && step < len(turn.calls):
			c := turn.calls[step]
			return ollamatest.Reply{Content: envelope(c.thought, c.action, c.args)}
		}
		return ollamatest.Reply{Content: envelope("I have what I need.", "final_response", map[string]string{"answer": turn.answer})}
	}
	return ollamatest.Reply{Status: http.StatusInternalServerError, Error: "parallel session: no scripted question in the prompt"}
}

// parallelRun is what one pass over parallelSession cost.
type parallelRun struct {
	calls                int     // model calls
	sim                  float64 // simulated model seconds
	systemChars, fmtSize int     // of the first request
}

func runParallelSession(b *testing.B, c ollamatest.Cost, parallel string) parallelRun {
	b.Helper()
	fake := ollamatest.New(b)
	fake.SetCost(c)
	fake.Handle(parallelReply)
	d := startCostDaemon(b, fake, "MMCP_PARALLEL_CALLS="+parallel)
	client := &http.Client{Timeout: 5 * time.Minute}
	session := ""
	for i, t := range parallelSession {
		cr, err := costTurnOnce(client, d.addr, session, t.question)
		if err != nil {
			b.Fatalf("turn %d: %v\n%s", i+1, err, d.logs)
		}
		if cr.Answer != t.answer || len(cr.Steps) != len(t.calls)+1 {
			b.Fatalf("turn %d (MMCP_PARALLEL_CALLS=%s): answer %q after %d steps, want the scripted one after %d", i+1, parallel, cr.Answer, len(cr.Steps), len(t.calls)+1)
		}
		for _, st := range cr.Steps[:len(t.calls)] {
			if st.Error != "" {
				b.Fatalf("turn %d: %s failed: %s", i+1, st.Action, st.Error)
			}
		}
		session = cr.SessionID
	}
	d.stop(b)
	fake.Close()
	var run parallelRun
	for _, cc := range fake.Costs() {
		run.calls++
		run.sim += cc.Seconds()
	}
	first := fake.Requests()[0]
	run.systemChars = len([]rune(first.Messages[0].Content))
	run.fmtSize = len(first.Format)
	return run
}

// BenchmarkParallelCalls asks parallelSession's questions (each needing 2 or
// 3 tools that do not depend on each other) of the daemon with one call per
// reply (MMCP_PARALLEL_CALLS=1) and with calls at once (the default, 3), on
// the CPU profile, and reports both runs' model calls and simulated model
// seconds, their ratios, and what the batch costs the prompt: the system
// prompt's characters and the format's bytes in both runs.
//
//	go test -run='^$' -bench=ParallelCalls -benchtime=1x ./cmd/mmcpd
func BenchmarkParallelCalls(b *testing.B) {
	cpu := ollamatest.CPU
	cpu.Speedup = 200
	for b.Loop() {
		one := runParallelSession(b, cpu, "1")
		many := runParallelSession(b, cpu, "3")
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(one.calls), "calls_one")
		b.ReportMetric(float64(many.calls), "calls_parallel")
		b.ReportMetric(float64(many.calls)/float64(one.calls), "calls_ratio")
		b.ReportMetric(one.sim, "sim_s_one")
		b.ReportMetric(many.sim, "sim_s_parallel")
		b.ReportMetric(many.sim/one.sim, "sim_ratio")
		b.ReportMetric(float64(one.systemChars), "system_chars_one")
		b.ReportMetric(float64(many.systemChars), "system_chars_parallel")
		b.ReportMetric(float64(one.fmtSize), "format_bytes_one")
		b.ReportMetric(float64(many.fmtSize), "format_bytes_parallel")
	}
}
