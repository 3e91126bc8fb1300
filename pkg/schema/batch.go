package schema

// The batch branch: one reply may ask for several independent tool calls at
// once, {"thought": ..., "calls": [{"action": ..., "args": {...}}, ...]}, so
// that a question needing two tools costs one model call instead of two. It
// is an addition to the union of union.go: the single-call branches are
// built, numbered and normalised as before, and the batch branch comes after
// final_response, its items pointing at their args by $ref, so the format
// grows by a line per tool instead of a second copy of every schema.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Call is one item of a batch: a tool and its arguments, valid against its
// schema.
type Call struct {
	Action string          `json:"action"`
	Args   json.RawMessage `json:"args"`
}

// Batch says whether and how a union offers several calls in one reply.
type Batch struct {
	// Max is the most calls one reply may hold; below 2 the union has no
	// batch branch.
	Max int
	// Solo lists tools that may only be called alone: those that ask the
	// user first, since a batch runs without stopping.
	Solo []string
}

func (b Batch) on() bool { return b.Max > 1 }

// key identifies b in the union cache.
func (b Batch) key() string {
	if !b.on() {
		return ""
	}
	solo := slices.Clone(b.Solo)
	slices.Sort(solo)
	return strconv.Itoa(b.Max) + ":" + strings.Join(solo, ",")
}

// batchSpec is what a Union keeps of its Batch to decode batch replies.
type batchSpec struct {
	max  int
	solo map[string]bool
}

// NewBatchUnion is NewUnion with the batch branch b describes: a last branch
// {"thought", "calls"} whose calls (1 to b.Max) are any of the tools not in
// b.Solo. Without such a tool, or with b.Max below 2, it is NewUnion.
func NewBatchUnion(tools []Tool, b Batch) (*Union, error) {
	u, err := NewUnion(tools)
	if err != nil || !b.on() {
		return u, err
	}
	spec := &batchSpec{max: b.Max, solo: map[string]bool{}}
	for _, name := range b.Solo {
		spec.solo[name] = true
	}
	var batched []int // the branch of u.tools[i] is oneOf[i]
	for i, t := range u.tools {
		if !spec.solo[t.Name] {
			batched = append(batched, i)
		}
	}
	if len(batched) == 0 {
		return u, nil
	}
	full := batchBranch(u.tools, batched, b.Max, inlineArgs)
	if u.full, err = appendBranch(u.full, full); err != nil {
		return nil, err
	}
	var shared map[int]string
	if u.format, shared, err = shareArgs(u.format, batched); err != nil {
		return nil, err
	}
	format := batchBranch(u.tools, batched, b.Max, func(i int) string { return shared[i] })
	if u.format, err = appendBranch(u.format, format); err != nil {
		return nil, err
	}
	u.batch = spec
	return u, nil
}

// inlineArgs is where a batch item of the full union points: at its tool's
// branch's args as they stand. The format copy's point where shareArgs put
// them.
func inlineArgs(i int) string { return fmt.Sprintf("#/oneOf/%d/properties/args", i) }

// batchBranch is the batch branch: thought, and 1 to max calls, each one of
// the tools batched (indices into tools, which are the union's branches),
// its args pointed at by ref.
func batchBranch(tools []Tool, batched []int, max int, ref func(int) string) *node {
	var items []*node
	for _, i := range batched {
		items = append(items, obj(
			member{"type", lit(`"object"`)},
			member{"properties", obj(
				member{"action", obj(member{"const", str(tools[i].Name)})},
				member{"args", obj(member{"$ref", str(ref(i))})},
			)},
			member{"required", &node{isArr: true, arr: []*node{str("action"), str("args")}}},
			member{"additionalProperties", lit(`false`)},
		))
	}
	desc := fmt.Sprintf("Run up to %d independent tool calls at once; each result comes back as its own message. Actions that ask the user first must be called alone.", max)
	return obj(
		member{"type", lit(`"object"`)},
		member{"description", str(desc)},
		member{"properties", obj(
			member{"thought", obj(member{"type", lit(`"string"`)}, member{"maxLength", lit(strconv.Itoa(maxThought))}, member{"description", str("Why these calls: one or two sentences.")})},
			member{"calls", obj(
				member{"type", lit(`"array"`)},
				member{"minItems", lit("1")},
				member{"maxItems", lit(strconv.Itoa(max))},
				member{"items", obj(member{"oneOf", &node{isArr: true, arr: items}})},
			)},
		)},
		member{"required", &node{isArr: true, arr: []*node{str("thought"), str("calls")}}},
		member{"additionalProperties", lit(`false`)},
	)
}

// shareArgs moves the args of each batched branch of a format copy into
// that branch's $defs (as "args", or "args_" and so on where a tool's own
// definitions hold that name), points the branch's args at them, and returns
// where each went. The converter writes one grammar rule per distinct $ref:
// pointing the batch items at the args where they stand would give every
// tool's arguments a second rule, and a grammar that may outgrow the buffer
// Ollama converts into (four times the format's size). References into the
// args follow them.
func shareArgs(format []byte, batched []int) ([]byte, map[int]string, error) {
	n, err := parseNode(format)
	if err != nil {
		return nil, nil, fmt.Errorf("adding the batch branch: %w", err)
	}
	one := n.get("oneOf")
	if one == nil || !one.isArr {
		return nil, nil, fmt.Errorf("adding the batch branch: the union has no oneOf")
	}
	refs := make(map[int]string, len(batched))
	for _, i := range batched {
		br := one.arr[i]
		props := br.get("properties")
		var args *node
		if props != nil {
			args = props.get("args")
		}
		if args == nil {
			return nil, nil, fmt.Errorf("adding the batch branch: branch %d has no args", i)
		}
		defs := br.get("$defs")
		if defs == nil {
			defs = &node{isObj: true}
			br.obj = append(br.obj, member{"$defs", defs})
		}
		name := "args"
		for defs.get(name) != nil {
			name += "_"
		}
		refs[i] = fmt.Sprintf("#/oneOf/%d/$defs/%s", i, name)
		repoint(br, inlineArgs(i), refs[i])
		defs.obj = append(defs.obj, member{name, args})
		for j := range props.obj {
			if props.obj[j].key == "args" {
				props.obj[j].val = obj(member{"$ref", str(refs[i])})
			}
		}
	}
	return n.bytes(), refs, nil
}

// repoint rewrites every $ref under n that starts with from (the whole
// pointer or a pointer below it) to start with to instead.
func repoint(n *node, from, to string) {
	for i := range n.obj {
		if s, ok := n.obj[i].val.str(); ok {
			if n.obj[i].key == "$ref" && (s == from || strings.HasPrefix(s, from+"/")) {
				n.obj[i].val = str(to + s[len(from):])
			}
			continue
		}
		repoint(n.obj[i].val, from, to)
	}
	for _, v := range n.arr {
		repoint(v, from, to)
	}
}

// appendBranch adds branch at the end of the oneOf of a serialised union.
func appendBranch(union []byte, branch *node) ([]byte, error) {
	n, err := parseNode(union)
	if err != nil {
		return nil, fmt.Errorf("adding the batch branch: %w", err)
	}
	one := n.get("oneOf")
	if one == nil || !one.isArr {
		return nil, fmt.Errorf("adding the batch branch: the union has no oneOf")
	}
	one.arr = append(one.arr, branch)
	return n.bytes(), nil
}

// BatchMax is the most calls a reply may hold; 0 when the union has no batch
// branch.
func (u *Union) BatchMax() int {
	if u.batch == nil {
		return 0
	}
	return u.batch.max
}

// decodeBatch reads a reply holding "calls". Each item is held to exactly
// what a single call is, and every problem names the item it is about:
// calls[1].args.year: expected integer, got string "2010".
func (u *Union) decodeBatch(env map[string]json.RawMessage) (Decision, error) {
	var probs []string
	add := func(format string, a ...any) { probs = append(probs, fmt.Sprintf(format, a...)) }
	for k := range env {
		switch k {
		case "thought", "calls":
		case "action", "args":
			add("%s: a reply with calls has no %s; send either calls or one action with its args", k, k)
		default:
			add("%s: unknown field; a reply with calls has exactly thought and calls", path("", k))
		}
	}
	var d Decision
	d.Thought = checkThought(env, add)
	var items []json.RawMessage
	raw := env["calls"]
	switch {
	case raw[0] != '[':
		add("calls: expected array of {\"action\", \"args\"} objects, got %s", describe(raw))
	case json.Unmarshal(raw, &items) != nil:
		add("calls: invalid JSON")
	case len(items) == 0:
		add("calls: empty; list 1 to %d calls, or answer with final_response", u.batch.max)
	case len(items) > u.batch.max:
		add("calls: %d calls, at most %d at once; ask for the others in a later step", len(items), u.batch.max)
	}
	for i, item := range items {
		c, p := u.checkCall(item, fmt.Sprintf("calls[%d]", i))
		probs = append(probs, p...)
		d.Calls = append(d.Calls, c)
	}
	if len(probs) > 0 {
		return Decision{}, replyError(probs)
	}
	return d, nil
}

// checkCall validates one item of calls, at, as Decode validates a single
// call's action and args.
func (u *Union) checkCall(raw json.RawMessage, at string) (Call, []string) {
	var probs []string
	add := func(format string, a ...any) { probs = append(probs, fmt.Sprintf(format, a...)) }
	var item map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &item) != nil {
		add("%s: expected object {\"action\", \"args\"}, got %s", at, describe(raw))
		return Call{}, probs
	}
	for k := range item {
		if k != "action" && k != "args" {
			add("%s: unknown field; a call has exactly action and args", path(at, k))
		}
	}
	var c Call
	var ok bool
	var argSchema *jsonschema.Schema
	listing := u.batchListing()
	if a, found := item["action"]; !found {
		add("%s.action: missing required field; one of: %s", at, listing)
	} else if c.Action, ok = jsonString(a); !ok {
		add("%s.action: expected string, got %s; one of: %s", at, describe(a), listing)
	} else if c.Action == FinalAction {
		add("%s.action: final_response cannot be one of calls; answer on its own once the results are in", at)
	} else if u.batch.solo[c.Action] {
		add("%s.action: %s asks the user first, so it cannot be one of calls; call it alone: {\"thought\": ..., \"action\": %q, \"args\": {...}}", at, c.Action, c.Action)
	} else if argSchema = u.args[c.Action]; argSchema == nil {
		add("%s.action: unknown action %q; valid actions: %s", at, clip(c.Action, 80), listing)
	}
	args, found := item["args"]
	c.Args, probs = checkArgs(args, found, argSchema, at, false, probs)
	return c, probs
}

// batchListing names the actions an item of calls may take.
func (u *Union) batchListing() string {
	var names []string
	for _, t := range u.tools {
		if !u.batch.solo[t.Name] {
			names = append(names, t.Name)
		}
	}
	return strings.Join(names, ", ")
}
