package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// maxThought bounds the thought, in characters, as the union's maxLength says.
const maxThought = 1000

// MaxReplyBytes bounds a reply Decode will look at. A model that produces more
// is rambling, and scanning it costs time for nothing.
const MaxReplyBytes = 256 << 10

// Decision is a valid reply: the model's reasoning, the action it chose, and
// that action's arguments (valid against its schema); or, for a batch reply,
// the calls it asks for at once (Action and Args empty, see batch.go).
type Decision struct {
	Thought string          `json:"thought"`
	Action  string          `json:"action,omitempty"`
	Args    json.RawMessage `json:"args,omitempty"`
	Calls   []Call          `json:"calls,omitempty"`
}

// Final reports whether the decision ends the turn.
func (d Decision) Final() bool { return d.Action == FinalAction }

// Answer returns the answer of a final decision.
func (d Decision) Answer() string {
	var f FinalResponse
	_ = json.Unmarshal(d.Args, &f) // validated already
	return f.Answer
}

// ReplyError says why a reply is invalid: one problem per line, each naming
// the part of the reply it is about, sorted, in words a model can act on.
type ReplyError struct {
	Problems []string
}

func (e *ReplyError) Error() string {
	return "invalid reply: " + strings.Join(e.Problems, "; ")
}

func problem(format string, a ...any) *ReplyError {
	return &ReplyError{Problems: []string{fmt.Sprintf(format, a...)}}
}

// Decode reads one reply against the union. It tolerates what models put
// around a JSON object (a Markdown fence, a sentence before or after) but never
// guesses at content: anything else is a *ReplyError.
func (u *Union) Decode(reply string) (Decision, error) {
	raw, rerr := extract(reply)
	if rerr != nil {
		return Decision{}, rerr
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(raw, &env); err != nil {
		return Decision{}, problem("reply: invalid JSON: %v", err)
	}
	if _, batch := env["calls"]; batch && u.batch != nil {
		return u.decodeBatch(env)
	}

	var probs []string
	add := func(format string, a ...any) { probs = append(probs, fmt.Sprintf(format, a...)) }
	for k := range env {
		if k != "thought" && k != "action" && k != "args" {
			add("%s: unknown field; the reply has exactly thought, action and args", path("", k))
		}
	}
	var d Decision
	var ok bool
	d.Thought = checkThought(env, add)
	var argSchema *jsonschema.Schema
	if a, found := env["action"]; !found {
		add("action: missing required field; one of: %s", u.listing)
	} else if d.Action, ok = jsonString(a); !ok {
		add("action: expected string, got %s; one of: %s", describe(a), u.listing)
	} else if argSchema = u.args[d.Action]; argSchema == nil {
		add("action: unknown action %q; valid actions: %s", clip(d.Action, 80), u.listing)
	}
	args, found := env["args"]
	d.Args, probs = checkArgs(args, found, argSchema, "", true, probs)
	if len(probs) > 0 {
		return Decision{}, replyError(probs)
	}
	return d, nil
}

// checkThought reads the reply's thought, adding what is wrong with it: the
// same rule for a single call and for calls.
func checkThought(env map[string]json.RawMessage, add func(format string, a ...any)) string {
	t, found := env["thought"]
	if !found {
		add("thought: missing required field")
		return ""
	}
	thought, ok := jsonString(t)
	if !ok {
		add("thought: expected string, got %s", describe(t))
	} else if n := utf8.RuneCountInString(thought); n > maxThought {
		add("thought: too long (%d characters, at most %d); one or two sentences", n, maxThought)
	}
	return thought
}

// checkArgs validates one call's args (found: whether the call has them)
// against its action's schema, when the action is known, and returns the
// args once they are an object worth keeping, with probs and its own
// problems. Paths start at at, "" for the reply itself, "calls[1]" for an
// item of calls; stringHint points out an object sent as a string.
func checkArgs(args json.RawMessage, found bool, argSchema *jsonschema.Schema, at string, stringHint bool, probs []string) (json.RawMessage, []string) {
	prefix := ""
	if at != "" {
		prefix = at + "."
	}
	switch {
	case !found:
		probs = append(probs, prefix+"args: missing required field")
	case args[0] != '{':
		hint := ""
		var s string
		if stringHint && json.Unmarshal(args, &s) == nil && strings.HasPrefix(strings.TrimSpace(s), "{") && json.Valid([]byte(s)) {
			hint = "; put the object itself there, not a string containing it"
		}
		probs = append(probs, fmt.Sprintf("%sargs: expected object, got %s%s", prefix, describe(args), hint))
	case argSchema != nil:
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
		if err != nil {
			probs = append(probs, fmt.Sprintf("%sargs: invalid JSON: %v", prefix, err))
			break
		}
		if err := argSchema.Validate(inst); err != nil {
			for _, p := range explain(err, inst) {
				probs = append(probs, prefix+p) // explain's paths start at args
			}
		}
		return args, probs
	}
	return nil, probs
}

// replyError is the error of a reply with problems, each said once, in a
// stable order.
func replyError(probs []string) *ReplyError {
	slices.Sort(probs)
	return &ReplyError{Problems: slices.Compact(probs)}
}

// jsonString decodes raw if it is a JSON string; null is not one.
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// extract finds the one JSON object in a reply.
func extract(reply string) ([]byte, *ReplyError) {
	if len(reply) > MaxReplyBytes {
		return nil, problem("reply: too long (%d bytes, at most %d); send only the JSON object", len(reply), MaxReplyBytes)
	}
	if !utf8.ValidString(reply) {
		return nil, problem("reply: not valid UTF-8 text")
	}
	s := strings.TrimSpace(reply)
	if s == "" {
		return nil, problem("reply: empty; send one JSON object")
	}
	// The common case: the whole reply is one JSON value. Judge it as such, so
	// that an array holding an object is an array, not an object to dig out.
	if json.Valid([]byte(s)) {
		if s[0] != '{' {
			return nil, problem("reply: expected a JSON object, got %s", describe(json.RawMessage(s)))
		}
		return []byte(s), nil
	}
	spans, open := objectSpans(s)
	var objs [][]byte
	var firstErr error
	inArray := false
	for _, sp := range spans {
		b := []byte(s[sp[0]:sp[1]])
		if err := json.Unmarshal(b, new(any)); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		objs = append(objs, b)
		// As above: an object that opens an array (in a fence, after a
		// sentence) is an array's element, not the reply.
		inArray = inArray || strings.HasSuffix(strings.TrimRightFunc(s[:sp[0]], unicode.IsSpace), "[")
	}
	switch {
	case len(objs) == 1 && open < 0 && inArray:
		return nil, problem("reply: expected a JSON object, got array")
	case len(objs) == 1 && open < 0:
		return objs[0], nil
	case len(objs) > 1:
		return nil, problem("reply: holds %d JSON objects; send exactly one", len(objs))
	case open >= 0:
		lead := len(reply) - len(strings.TrimLeftFunc(reply, unicode.IsSpace)) // offsets are the reply's
		return nil, problem("reply: the JSON object starting at byte %d is incomplete (cut off?); send the whole object", lead+open)
	case firstErr != nil:
		return nil, problem("reply: invalid JSON: %v", firstErr)
	case len(objs) == 1:
		return objs[0], nil
	}
	return nil, problem("reply: no JSON object found; send one JSON object and nothing else")
}

// objectSpans finds the top-level {...} spans of s in one pass, skipping braces
// inside JSON strings, and the start of an object left open at the end (-1 if
// none). It does not judge whether a span is valid JSON.
func objectSpans(s string) (spans [][2]int, open int) {
	depth, start := 0, -1
	inStr, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if depth == 0 {
			if c == '{' {
				depth, start = 1, i
			}
			continue
		}
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				spans = append(spans, [2]int{start, i + 1})
			}
		}
	}
	if depth > 0 {
		return spans, start
	}
	return spans, -1
}

var printer = message.NewPrinter(language.English)

// explain turns a validation error of the args into one line per failing
// field, each starting with the field's path inside the reply.
func explain(err error, inst any) []string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{"args: " + err.Error()}
	}
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		at := locate(inst, e.InstanceLocation)
		val, _ := valueAt(inst, e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, m := range k.Missing {
				out = append(out, path(at, m)+": missing required field")
			}
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				out = append(out, path(at, p)+": unknown field; remove it")
			}
		case *kind.Type:
			out = append(out, fmt.Sprintf("%s: expected %s, got %s", at, strings.Join(k.Want, " or "), describeValue(val)))
		case *kind.Enum:
			want := make([]string, len(k.Want))
			for i, w := range k.Want {
				want[i] = compact(w)
			}
			out = append(out, fmt.Sprintf("%s: expected one of %s, got %s", at, strings.Join(want, ", "), compact(val)))
		case *kind.Pattern:
			out = append(out, fmt.Sprintf("%s: must match the pattern %s, got %s", at, k.Want, compact(val)))
		case *kind.MinLength:
			out = append(out, fmt.Sprintf("%s: must have at least %d %s, got %s", at, k.Want, plural(k.Want, "character"), compact(val)))
		case *kind.MaxLength:
			out = append(out, fmt.Sprintf("%s: must have at most %d %s, got %d", at, k.Want, plural(k.Want, "character"), k.Got))
		case *kind.Const:
			out = append(out, fmt.Sprintf("%s: must be %s, got %s", at, compact(k.Want), compact(val)))
		default:
			out = append(out, fmt.Sprintf("%s: %s (got %s)", at, k.LocalizedString(printer), compact(val)))
		}
	}
	walk(ve)
	return out
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// locate renders an instance location inside args as args.a.b[0].
func locate(inst any, loc []string) string {
	p := "args"
	cur := inst
	for _, tok := range loc {
		switch v := cur.(type) {
		case []any:
			p += "[" + tok + "]"
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(v) {
				cur = v[i]
			}
		case map[string]any:
			p = path(p, tok)
			cur = v[tok]
		default:
			p = path(p, tok)
		}
	}
	return p
}

func valueAt(inst any, loc []string) (any, bool) {
	cur := inst
	for _, tok := range loc {
		switch v := cur.(type) {
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			cur = v[i]
		case map[string]any:
			var ok bool
			if cur, ok = v[tok]; !ok {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return cur, true
}

// path appends a field name to a path, quoting names that are not plain.
func path(p, field string) string {
	plain := field != ""
	for _, r := range field {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			plain = false
			break
		}
	}
	if !plain {
		return p + "[" + strconv.Quote(clip(field, 40)) + "]"
	}
	if p == "" {
		return field
	}
	return p + "." + field
}

// describe names the JSON type of raw and shows it, shortened.
func describe(raw json.RawMessage) string {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return "invalid JSON"
	}
	return describeValue(v)
}

func describeValue(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean " + compact(v)
	case json.Number, float64, int:
		return "number " + compact(v)
	case string:
		return "string " + compact(v)
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// compact renders a value as short JSON.
func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return clip(string(b), 60)
}

// clip shortens s to at most n bytes without splitting a character.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
