package ollamatest

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ollama/ollama/api"
)

// Cost is the speed of the hardware a simulated model runs on. With a cost
// model set (SetCost) the fake charges each call what Ollama would: the part
// of the prompt its cache does not hold, read at PromptRate, then the reply,
// written at GenRate, streamed token by token when the client asks for a
// stream. That is what makes a turn slow on a home machine, so it is what the
// cost benchmarks measure.
type Cost struct {
	PromptRate    float64 // prompt tokens evaluated per second; 0: no time at all
	GenRate       float64 // reply tokens generated per second; 0: no time at all
	CharsPerToken int     // characters per token, prompt and reply alike; 0 means 4
	// Speedup divides every sleep, so that a test pays a fraction of the
	// simulated time; the figures recorded and reported stay unscaled. 0
	// means 1 (real time).
	Speedup float64
}

// Profiles measured on the hardware mmcpd is meant for, with a 7B model.
var (
	// CPU is a home server without a GPU: Ollama reads about 60 prompt
	// tokens per second and writes about 8.
	CPU = Cost{PromptRate: 60, GenRate: 8, CharsPerToken: 4}
	// GPU is a consumer graphics card.
	GPU = Cost{PromptRate: 3000, GenRate: 80, CharsPerToken: 4}
)

// CallCost is what one /api/chat call cost under the cost model. Characters
// are runes of the rendered prompt (see render); seconds are simulated, before
// any Speedup.
type CallCost struct {
	Model  string
	Stream bool // the reply went out token by token
	// PromptChars is the whole prompt; ReusedChars the prefix it shares with
	// the previous prompt to the same model (Ollama's cache holds it);
	// NewChars the rest, which the model evaluated.
	PromptChars, ReusedChars, NewChars int
	// AddedChars is what a perfect cache would evaluate: the messages the
	// previous prompt to the model did not hold, wherever they stand, and of
	// a message that replaced one in place (a system prompt whose clock line
	// moved on), only the part that differs.
	AddedChars    int
	PromptTokens  int     // tokens of NewChars: the prompt_eval_count reported
	OutputTokens  int     // tokens of the reply: the eval_count reported
	PromptSeconds float64 // PromptTokens at PromptRate
	OutputSeconds float64 // OutputTokens at GenRate
	IdealSeconds  float64 // AddedChars' tokens at PromptRate, plus OutputSeconds
	Start         time.Time
	produced      []produced // one per token generated, in order
}

// produced marks when a token was generated, and where it ends in the reply.
type produced struct {
	end int // byte offset in the reply content just past the token
	at  time.Time
}

// Seconds is the call's simulated time: the new prompt, then the reply.
func (c CallCost) Seconds() float64 { return c.PromptSeconds + c.OutputSeconds }

// Reused is the share of the prompt the previous call to the model already
// had, 0 to 1.
func (c CallCost) Reused() float64 {
	if c.PromptChars == 0 {
		return 0
	}
	return float64(c.ReusedChars) / float64(c.PromptChars)
}

// ProducedAt is when the model generated the reply's byte at offset, streamed
// or not: a non-streamed reply is generated at the same pace and sent whole
// at the end. It is zero for an offset past what was generated, and is known
// once the call has ended.
func (c CallCost) ProducedAt(offset int) time.Time {
	i, _ := slices.BinarySearchFunc(c.produced, offset, func(p produced, off int) int {
		if p.end <= off {
			return -1
		}
		return 1
	})
	if i == len(c.produced) {
		return time.Time{}
	}
	return c.produced[i].at
}

// SetCost turns the cost model on, with c's speeds, for the calls that come
// after. Replies that misbehave on purpose (Status, Empty, Line, Repeat,
// Drip) are sent as before and cost nothing. A Reply's non-zero
// PromptTokens, CompletionTokens or TotalDuration still win over the
// figures the model computes.
func (s *Server) SetCost(c Cost) {
	if c.CharsPerToken <= 0 {
		c.CharsPerToken = 4
	}
	if c.Speedup <= 0 {
		c.Speedup = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cost = &c
	if s.prompts == nil {
		s.prompts = map[string][]string{}
	}
}

// Costs returns what each call under the cost model cost, in the order the
// calls came.
func (s *Server) Costs() []CallCost {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.costs)
	for i := range out {
		out[i].produced = slices.Clone(out[i].produced)
	}
	return out
}

// costModel returns the cost model, if one is set.
func (s *Server) costModel() (Cost, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cost == nil {
		return Cost{}, false
	}
	return *s.cost, true
}

// render is the prompt as the fake counts it, one string per message: the
// role, a newline, the content. Ollama renders the messages through the
// model's chat template, which wraps each in a few marker tokens, and turns
// `format` into a grammar that steers sampling rather than into prompt text;
// so this differs from Ollama's prompt by a few tokens per message, the same
// for every call, and the prefixes and shares come out as Ollama's would.
func render(msgs []api.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Role + "\n" + m.Content + "\n"
	}
	return out
}

// account charges req's prompt against the previous prompt to the same
// model, as Ollama's cache would, and records the call. The caller holds
// s.mu.
func (s *Server) account(req api.ChatRequest, c Cost, reply string) int {
	msgs := render(req.Messages)
	prompt := strings.Join(msgs, "")
	prev := s.prompts[req.Model]
	s.prompts[req.Model] = msgs

	total := utf8.RuneCountInString(prompt)
	reused := utf8.RuneCountInString(prompt[:commonPrefix(strings.Join(prev, ""), prompt)])
	cc := CallCost{
		Model:        req.Model,
		Stream:       req.Stream == nil || *req.Stream,
		PromptChars:  total,
		ReusedChars:  reused,
		NewChars:     total - reused,
		AddedChars:   added(prev, msgs),
		PromptTokens: tokens(total-reused, c.CharsPerToken),
		OutputTokens: len(split(reply, c.CharsPerToken)),
	}
	cc.PromptSeconds = rate(cc.PromptTokens, c.PromptRate)
	cc.OutputSeconds = rate(cc.OutputTokens, c.GenRate)
	cc.IdealSeconds = rate(tokens(cc.AddedChars, c.CharsPerToken), c.PromptRate) + cc.OutputSeconds
	s.costs = append(s.costs, cc)
	return len(s.costs) - 1
}

// commonPrefix is the length in bytes of the longest common prefix of a and
// b, ending on a character boundary.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	for i > 0 && i < len(b) && !utf8.RuneStart(b[i]) {
		i--
	}
	return i
}

// added counts the characters of the messages of cur that prev did not hold
// (each message of prev matches at most one of cur). A message standing
// where prev had one that is gone from cur replaced it: only what lies
// between their common prefix and suffix counts.
func added(prev, cur []string) int {
	held, kept := count(prev), count(cur)
	n := 0
	for i, m := range cur {
		switch {
		case held[m] > 0:
			held[m]--
		case i < len(prev) && kept[prev[i]] == 0:
			p := commonPrefix(prev[i], m)
			q := commonSuffix(prev[i][p:], m[p:])
			n += utf8.RuneCountInString(m[p : len(m)-q])
		default:
			n += utf8.RuneCountInString(m)
		}
	}
	return n
}

func count(msgs []string) map[string]int {
	n := make(map[string]int, len(msgs))
	for _, m := range msgs {
		n[m]++
	}
	return n
}

// commonSuffix is the length in bytes of the longest common suffix of a and
// b, starting on a character boundary.
func commonSuffix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	for i > 0 && !utf8.RuneStart(b[len(b)-i]) {
		i--
	}
	return i
}

// tokens is how many tokens chars characters make, a part counting whole.
func tokens(chars, per int) int { return (chars + per - 1) / per }

// rate is the seconds n tokens take at perSecond; no time when the rate is 0.
func rate(n int, perSecond float64) float64 {
	if perSecond <= 0 {
		return 0
	}
	return float64(n) / perSecond
}

// split cuts s into tokens of per characters, the last one shorter.
func split(s string, per int) []string {
	var out []string
	for len(s) > 0 {
		end, n := 0, 0
		for end < len(s) && n < per {
			_, size := utf8.DecodeRuneInString(s[end:])
			end += size
			n++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// serveCost answers with final's content as the model on c's hardware
// would: nothing until the new part of the prompt is read, then a token every
// 1/GenRate seconds, each its own done=false line when streaming, the whole
// reply at the end otherwise. It reports whether everything was written.
func (s *Server) serveCost(w *countingWriter, r *http.Request, req api.ChatRequest, reply Reply, final api.ChatResponse, c Cost) bool {
	s.mu.Lock()
	slot := s.account(req, c, reply.Content)
	cc := s.costs[slot]
	s.mu.Unlock()

	start := time.Now()
	var marks []produced
	defer func() {
		s.mu.Lock()
		s.costs[slot].Start = start
		s.costs[slot].produced = marks
		s.mu.Unlock()
	}()

	// Ollama reports what it spent, not what the test waited.
	if reply.PromptTokens == 0 {
		final.PromptEvalCount = cc.PromptTokens
	}
	if reply.CompletionTokens == 0 {
		final.EvalCount = cc.OutputTokens
	}
	if reply.TotalDuration == 0 {
		final.TotalDuration = seconds(cc.Seconds())
	}
	final.PromptEvalDuration = seconds(cc.PromptSeconds)
	final.EvalDuration = seconds(cc.OutputSeconds)

	// Every wait runs to a deadline from start, so the sleeps' own overshoot
	// does not add up over a long reply.
	at := func(sim float64) time.Time { return start.Add(seconds(sim / c.Speedup)) }
	if !s.wait(r, time.Until(at(cc.PromptSeconds))) {
		return false
	}
	if cc.Stream {
		w.Header().Set("Content-Type", "application/x-ndjson")
	} else {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
	}
	end := 0
	for i, tok := range split(reply.Content, c.CharsPerToken) {
		if !s.wait(r, time.Until(at(cc.PromptSeconds+rate(i+1, c.GenRate)))) {
			return false
		}
		end += len(tok)
		marks = append(marks, produced{end: end, at: time.Now()})
		if !cc.Stream {
			continue
		}
		line, err := json.Marshal(api.ChatResponse{
			Model:     req.Model,
			CreatedAt: time.Now().UTC(),
			Message:   api.Message{Role: "assistant", Content: tok},
		})
		if err != nil || w.send(append(line, '\n')) != nil {
			return false
		}
	}
	if cc.Stream {
		final.Message.Content = ""
	}
	return writeLines(w, final)
}

// seconds converts simulated seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
