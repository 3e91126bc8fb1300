package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Union is the compiled reply schema for one set of tools. It is immutable and
// safe for concurrent use.
type Union struct {
	tools   []Tool // sorted by name; FinalResponse is not among them
	names   []string
	args    map[string]*jsonschema.Schema
	full    []byte // the union with every keyword, as plugins wrote them
	format  []byte // the copy for Ollama's grammar converter
	docs    string // the tool list for the system prompt
	listing string // "a, b, final_response": for error messages

	batch *batchSpec // nil: no batch branch (see batch.go)
}

// NewUnion builds and compiles the union of FinalResponse and tools. A tool
// with a bad name or schema is an error naming the tool.
func NewUnion(tools []Tool) (*Union, error) {
	tools = slices.Clone(tools)
	slices.SortFunc(tools, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	u := &Union{tools: tools, args: make(map[string]*jsonschema.Schema, len(tools)+1)}

	all := append(slices.Clone(tools), Tool{
		Name:        FinalAction,
		Description: "Answer the user and end the turn. Use it when you have what you need, or when no tool can help.",
		Schema:      finalSchema,
	})
	full := &node{isObj: true}
	format := &node{isObj: true}
	var fullBranches, formatBranches []*node
	for i, t := range all {
		if i > 0 && all[i-1].Name == t.Name {
			return nil, fmt.Errorf("tool %q: declared twice", t.Name)
		}
		if i < len(tools) { // a caller's tool, even one named final_response
			if err := CheckName(t.Name); err != nil {
				return nil, err
			}
		}
		args, err := argsNode(t)
		if err != nil {
			return nil, err
		}
		gargs, gdefs, err := forGrammar(t, args.clone(), i)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		compiled, err := compileArgs(t)
		if err != nil {
			return nil, err
		}
		u.args[t.Name] = compiled
		u.names = append(u.names, t.Name)

		rebase(args, fmt.Sprintf("#/oneOf/%d/properties/args", i))
		fullBranches = append(fullBranches, branch(t, args, nil, true))
		formatBranches = append(formatBranches, branch(t, gargs, gdefs, true))
	}
	full.obj = []member{{"oneOf", &node{isArr: true, arr: fullBranches}}}
	format.obj = []member{{"oneOf", &node{isArr: true, arr: formatBranches}}}
	u.full = full.bytes()
	u.format = format.bytes()
	u.docs = renderDocs(all)
	u.listing = strings.Join(u.names, ", ")
	return u, nil
}

// CheckTool reports whether t could join a union: its name and schema.
func CheckTool(t Tool) error {
	if err := CheckName(t.Name); err != nil {
		return err
	}
	args, err := argsNode(t)
	if err != nil {
		return err
	}
	if _, _, err := forGrammar(t, args, 0); err != nil {
		return fmt.Errorf("tool %q: %w", t.Name, err)
	}
	_, err = compileArgs(t)
	return err
}

// Tools returns the union's tools, sorted by name, without FinalResponse.
func (u *Union) Tools() []Tool { return u.tools }

// Actions returns every valid action, final_response last.
func (u *Union) Actions() []string { return u.names }

// Schema returns the full union, every keyword included. Replies are held to
// it (branch by branch, see Decode).
func (u *Union) Schema() json.RawMessage { return u.full }

// Format returns the union as sent to Ollama in `format`: the same branches
// with what its grammar converter rejects removed (see forOllama).
func (u *Union) Format() json.RawMessage { return u.format }

// Docs returns the tool list for the system prompt: each action, what it does,
// and its arguments.
func (u *Union) Docs() string { return u.docs }

// branch is one tool's branch of the union; the format copy's holds the
// $defs its references point at. Descriptions stay in both: the converter
// reads none, but Ollama converts into a buffer four times the format's
// size, and a grammar is several times a bare schema's.
func branch(t Tool, args, defs *node, described bool) *node {
	thought := obj(member{"type", lit(`"string"`)}, member{"maxLength", lit(strconv.Itoa(maxThought))})
	if described {
		thought.obj = append(thought.obj, member{"description", str("Why this step: one or two sentences.")})
	}
	props := &node{isObj: true, obj: []member{
		{"thought", thought},
		{"action", obj(member{"const", str(t.Name)})},
		{"args", args},
	}}
	b := obj(member{"type", lit(`"object"`)})
	if described && t.Description != "" {
		b.obj = append(b.obj, member{"description", str(t.Description)})
	}
	b.obj = append(b.obj,
		member{"properties", props},
		member{"required", &node{isArr: true, arr: []*node{str("thought"), str("action"), str("args")}}},
		member{"additionalProperties", lit(`false`)},
	)
	if defs != nil {
		b.obj = append(b.obj, member{"$defs", defs})
	}
	return b
}

func obj(m ...member) *node { return &node{isObj: true, obj: m} }
func lit(s string) *node    { return &node{lit: json.RawMessage(s)} }
func str(s string) *node    { b, _ := json.Marshal(s); return &node{lit: b} }

// argsNode parses a tool's argument schema and checks it describes an object.
func argsNode(t Tool) (*node, error) {
	n, err := parseNode(t.Schema)
	if err != nil {
		return nil, fmt.Errorf("tool %q: schema is not valid JSON: %w", t.Name, err)
	}
	if typ, _ := n.get("type").str(); !n.isObj || typ != "object" {
		return nil, fmt.Errorf(`tool %q: schema must be an object schema ("type": "object")`, t.Name)
	}
	if k, ok := n.duplicateKey(); ok {
		// Which of the two a reader takes differs from reader to reader:
		// the grammar and the validation could disagree.
		return nil, fmt.Errorf("tool %q: schema has the key %q twice in one object", t.Name, k)
	}
	// A root-level $schema or $id means nothing once nested in the union.
	n.del("$schema")
	n.del("$id")
	return n, nil
}

// refuseLoader refuses every URL: plugin schemas are untrusted input, and the
// library would otherwise read file:// references from disk.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %s: external references are not allowed", url)
}

func compileArgs(t Tool) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Schema))
	if err != nil {
		return nil, fmt.Errorf("tool %q: schema is not valid JSON: %w", t.Name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refuseLoader{})
	url := "https://mmcpd.invalid/tools/" + t.Name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("tool %q: %w", t.Name, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("tool %q: schema does not compile: %w", t.Name, err)
	}
	return s, nil
}

// rebase points local references ("#" and "#/...") of a tool schema at the
// place the schema now has inside the union. Anchor references ("#name") are
// left alone: an anchor names a subschema wherever it is.
func rebase(n *node, prefix string) {
	for i := range n.obj {
		if s, ok := n.obj[i].val.str(); ok {
			// A string is a reference only under $ref; an object there is a
			// property named "$ref" and is walked like any other.
			if n.obj[i].key == "$ref" && (s == "#" || strings.HasPrefix(s, "#/")) {
				n.obj[i].val = str(prefix + s[1:])
			}
			continue
		}
		rebase(n.obj[i].val, prefix)
	}
	for _, v := range n.arr {
		rebase(v, prefix)
	}
}

// Cache keeps compiled unions by tool set, so a union is built once per set
// however many steps ask for it. Safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	seed    maphash.Seed
	entries map[uint64]cached
}

type cached struct {
	tools []Tool
	batch string // Batch.key
	u     *Union
	err   error
}

// maxCached bounds the cache; sets change only when plugins come and go.
const maxCached = 64

// Union returns the compiled union for tools, building it on first use.
func (c *Cache) Union(tools []Tool) (*Union, error) { return c.BatchUnion(tools, Batch{}) }

// BatchUnion returns the compiled union for tools with the batch branch b
// describes (see NewBatchUnion), building it on first use.
func (c *Cache) BatchUnion(tools []Tool, b Batch) (*Union, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.seed = maphash.MakeSeed()
		c.entries = make(map[uint64]cached)
	}
	var h maphash.Hash
	h.SetSeed(c.seed)
	for _, t := range tools {
		h.WriteString(t.Name)
		h.WriteByte(0)
		h.WriteString(t.Description)
		h.WriteByte(0)
		h.Write(t.Schema)
		h.WriteByte(0)
	}
	bk := b.key()
	h.WriteString(bk)
	key := h.Sum64()
	if e, ok := c.entries[key]; ok && sameTools(e.tools, tools) && e.batch == bk {
		return e.u, e.err
	}
	u, err := NewBatchUnion(tools, b)
	if len(c.entries) >= maxCached {
		clear(c.entries)
	}
	c.entries[key] = cached{tools: slices.Clone(tools), batch: bk, u: u, err: err}
	return u, err
}

func sameTools(a, b []Tool) bool {
	return slices.EqualFunc(a, b, func(x, y Tool) bool {
		return x.Name == y.Name && x.Description == y.Description && bytes.Equal(x.Schema, y.Schema)
	})
}

// ArgsSchema is one tool's compiled argument schema, for checking arguments
// that arrive on their own (a plugin checking its input again) exactly as
// Decode checks them inside a reply.
type ArgsSchema struct{ s *jsonschema.Schema }

// CompileArgs compiles t's argument schema the way a union does: draft
// 2020-12, formats asserted, no external references.
func CompileArgs(t Tool) (*ArgsSchema, error) {
	s, err := compileArgs(t)
	if err != nil {
		return nil, err
	}
	return &ArgsSchema{s: s}, nil
}

// Check returns what is wrong with args, one sorted problem per field in the
// form Decode uses (args.year: expected integer, got string "2010"), or nil.
func (a *ArgsSchema) Check(args []byte) []string {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return []string{"args: invalid JSON: " + err.Error()}
	}
	if err := a.s.Validate(inst); err != nil {
		probs := explain(err, inst)
		slices.Sort(probs)
		return slices.Compact(probs)
	}
	return nil
}
