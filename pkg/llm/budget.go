package llm

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"unicode/utf8"

	convo "github.com/mmcpd/mmcpd/pkg/context"
)

// DefaultReplyReserve is how many tokens of num_ctx are kept for the reply
// when Options.ReplyReserve is 0 (a quarter of num_ctx if that is less). A
// reply is one envelope, a few hundred tokens; the rest is slack for what
// the ratio gets wrong.
const DefaultReplyReserve = 1024

// The characters-per-token ratio. The window counts characters; num_ctx
// counts tokens, and how many characters make a token depends on the model's
// tokenizer and on the text (English prose about 4, JSON and IDs fewer, CJK
// about 1).
const (
	startRatio = 3.0 // until a call has taught one: pessimistic for prose
	minRatio   = 2.0
	maxRatio   = 6.0
	// minSample is the fewest new characters a call must carry to teach
	// the ratio: each message adds template tokens its characters do not
	// show, which a large sample makes small.
	minSample = 1000
	// ratioStep is how far the learned ratio must move before the budget
	// follows: a budget that changed with every call would move where the
	// window cuts, and Ollama's cache with it.
	ratioStep = 0.2
	// recentPrompts is how many prompts are remembered to tell what
	// Ollama's cache may hold of the next one: one per session in flight,
	// about.
	recentPrompts = 8
)

// ratio learns how many characters of prompt make a token for one model. A
// reply's prompt_eval_count counts the tokens Ollama evaluated, which leaves
// out the prefix its cache held: so the sample is the characters the cache
// could not have held (what no recent prompt shares) over that count. Where
// the client cannot know what the cache holds (prompts of another process or
// client), it takes the cache as holding less than it did: the sample errs
// low, and a low ratio only makes the window smaller. Safe for concurrent use.
type ratio struct {
	mu      sync.Mutex
	recent  [][]convo.Message // the last prompts sent, oldest first
	chars   int               // new characters of every sample taken
	tokens  int               // tokens Ollama evaluated for them
	ceiling float64           // a refused prompt's characters per num_ctx; 0 means none
	value   float64           // what the budget uses
}

func newRatio() *ratio { return &ratio{value: startRatio} }

// sent records a prompt about to be sent, and returns its size and how much
// of it is new: not held by the cache after any recent prompt.
func (r *ratio) sent(msgs []convo.Message) (total, fresh int) {
	for _, m := range msgs {
		total += utf8.RuneCountInString(m.Content)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	held := 0
	for _, p := range r.recent {
		held = max(held, cached(p, msgs))
	}
	if len(r.recent) == recentPrompts {
		r.recent = slices.Delete(r.recent, 0, 1)
	}
	r.recent = append(r.recent, slices.Clone(msgs))
	return total, total - held
}

// cached is how many characters at the start of next Ollama may still hold
// after prev: the messages they share, the shared start of the first that
// differs, and, when next holds all of prev, the assistant message after it,
// which may be the reply the model wrote to prev, still in the cache.
func cached(prev, next []convo.Message) int {
	n := 0
	for i, m := range next {
		if i == len(prev) {
			if m.Role == convo.Assistant {
				n += utf8.RuneCountInString(m.Content)
			}
			break
		}
		if prev[i].Role != m.Role {
			break
		}
		if prev[i].Content != m.Content {
			n += sharedRunes(prev[i].Content, m.Content)
			break
		}
		n += utf8.RuneCountInString(m.Content)
	}
	return n
}

// sharedRunes counts the characters b starts with that a starts with too.
func sharedRunes(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	for i > 0 && i < len(b) && !utf8.RuneStart(b[i]) {
		i-- // back to a character both hold whole
	}
	return utf8.RuneCountInString(b[:i])
}

// learn takes a call's sample: fresh new characters, evaluated tokens.
func (r *ratio) learn(fresh, evaluated int) {
	if fresh < minSample || evaluated <= 0 {
		return
	}
	if float64(fresh)/float64(evaluated) > maxRatio {
		// Fewer tokens than any tokenizer makes of that many
		// characters: the cache held what the client took as new.
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chars += fresh
	r.tokens += evaluated
	est := float64(r.chars) / float64(r.tokens)
	if r.ceiling > 0 {
		est = min(est, r.ceiling)
	}
	if est = bound(est); math.Abs(est-r.value) >= ratioStep-1e-9 {
		r.value = est
	}
}

// refused notes a prompt of total characters that Ollama found longer than
// numCtx tokens: the ratio is below total/numCtx, from now on.
func (r *ratio) refused(total, numCtx int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := float64(total) / float64(numCtx)
	if r.ceiling == 0 || c < r.ceiling {
		r.ceiling = c
	}
	r.value = min(r.value, bound(r.ceiling))
}

func (r *ratio) current() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value
}

// bound rounds a ratio down to a tenth, within minRatio..maxRatio.
func bound(x float64) float64 {
	return min(max(math.Floor(x*10)/10, minRatio), maxRatio)
}

// PromptBudget is how many characters of prompt fit num_ctx with the reply's
// reserve kept free, at the characters-per-token ratio learned so far, and
// the words that say so (for an error that names the setting to change).
// One server has one budget, whatever the turn: ctx matters to a Pool only.
func (c *Client) PromptBudget(context.Context) (chars int, why string) {
	r := c.ratio.current()
	chars = max(int(float64(c.numCtx-c.replyReserve)*r), 0)
	return chars, fmt.Sprintf("the %d characters that fit MMCP_OLLAMA_NUM_CTX=%d with %d tokens kept for the reply, at %.1f characters per token",
		chars, c.numCtx, c.replyReserve, r)
}
