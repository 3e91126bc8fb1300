package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The format copy. Ollama turns `format` into a grammar with llama.cpp's
// json-schema-to-grammar and refuses the whole request when that converter
// fails, so one tool it cannot read would stop every chat. The copy is
// therefore not the tool's schema trimmed but rebuilt from the few forms the
// converter reads correctly, each a superset of what the original allows:
// the grammar may let through a reply that validation then rejects (the
// model is told why and tries again), never forbid one the schema accepts.
//
// What the converter reads, and so all the copy is made of:
//   - {"type": t} or {"type": [t...]} with t one of string, number, integer,
//     boolean, null, object, array; per type: properties, required and
//     additionalProperties; items (a schema or a tuple), minItems, maxItems;
//     pattern (the subset grammarPattern accepts), format date, time,
//     date-time or uuid, minLength, maxLength; integer minimum and maximum;
//   - {"enum": [...]}, {"const": v};
//   - {"anyOf": [...]};
//   - {"$ref": "#/oneOf/<i>/..."}: every reference is resolved here and
//     pointed at a copy of its target under the branch's own $defs, by a
//     pointer of plain tokens (the converter neither percent-decodes nor
//     unescapes ~0 and ~1).
//
// Everything else (not, if/then/else, dependencies, uniqueItems, contains,
// multipleOf, annotations, ...) only narrows what the schema allows, so
// leaving it out keeps the copy a superset. A schema with no type allows
// every type; the copy says so with the list of all of them, because the
// converter reads {} as "any object" and a bare {"description": ...} as an
// error.

const (
	maxGrammarDepth  = 32        // deeper subschemas become "any value"
	maxGrammarString = 1000      // minLength/maxLength kept up to this (the thought's maxLength)
	maxGrammarItems  = 100       // minItems/maxItems kept up to this
	maxGrammarInt    = 1_000_000 // integer bounds kept within ±this: wider ranges make grammars of kilobytes
	maxGrammarTuples = 8         // a closed tuple of up to this many lengths is spelt out
	maxGrammarRepeat = 64        // pattern repetition counts kept up to this
	maxGrammarRanges = 16        // integer ranges kept per tool: each costs the grammar up to ~500 bytes
	maxGrammarBytes  = 256 << 10 // a tool whose copy is larger is refused
	maxGrammarVisits = 20000     // subschemas rebuilt per tool; anyOf beside other keywords multiplies them
	anyTypes         = `["string","number","boolean","null","object","array"]`
)

// grammarKeywords are the keywords that change what the copy allows; a
// schema without any of them allows every value.
var grammarKeywords = []string{"$ref", "type", "enum", "const", "anyOf", "oneOf", "allOf",
	"properties", "required", "additionalProperties", "patternProperties",
	"items", "prefixItems", "additionalItems", "minItems", "maxItems",
	"pattern", "format", "minLength", "maxLength",
	"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}

// grammarTool rebuilds one tool's argument schema for the converter.
type grammarTool struct {
	root   *node
	argsAt string // where the copy of root sits in the union
	defsAt string // where the branch's $defs sit
	defs   []member
	names  map[*node]string // a reference target -> its pointer in the union
	todo   []pendingDef
	ids    []string // the keywords that give a schema its URI: "id" before draft 6
	ranges int      // integer ranges kept so far
	visits int      // subschemas rebuilt so far
}

type pendingDef struct {
	at       int // index in defs
	n, scope *node
}

// forGrammar returns the copy of t's args (parsed) for branch i and the
// $defs that branch needs (nil when none).
func forGrammar(t Tool, args *node, i int) (*node, *node, error) {
	g := &grammarTool{
		root:   args,
		argsAt: fmt.Sprintf("#/oneOf/%d/properties/args", i),
		defsAt: fmt.Sprintf("#/oneOf/%d/$defs/", i),
		ids:    []string{"$id"},
	}
	var meta struct {
		Schema string `json:"$schema"`
	}
	if json.Unmarshal(t.Schema, &meta) == nil && (strings.Contains(meta.Schema, "draft-04") || strings.Contains(meta.Schema, "draft-03")) {
		g.ids = []string{"id"}
	}
	g.names = map[*node]string{args: g.argsAt}
	out := g.schema(args, args, 0)
	for len(g.todo) > 0 {
		p := g.todo[0]
		g.todo = g.todo[1:]
		g.defs[p.at].val = g.schema(p.n, p.scope, 1)
	}
	var defs *node
	if len(g.defs) > 0 {
		defs = &node{isObj: true, obj: g.defs}
	}
	size := len(out.bytes())
	if defs != nil {
		size += len(defs.bytes())
	}
	if size > maxGrammarBytes {
		return nil, nil, fmt.Errorf("its schema needs a grammar copy of %d bytes, over the limit of %d", size, maxGrammarBytes)
	}
	return out, defs, nil
}

func anyValue() *node { return obj(member{"type", lit(anyTypes)}) }

func isFalse(n *node) bool { v, ok := n.boolean(); return ok && !v }

func hasGrammarKeyword(n *node) bool {
	if !n.isObj {
		return isFalse(n)
	}
	for _, m := range n.obj {
		if slices.Contains(grammarKeywords, m.key) {
			return true
		}
	}
	return false
}

func without(n *node, keys ...string) *node {
	out := &node{isObj: true}
	for _, m := range n.obj {
		if !slices.Contains(keys, m.key) {
			out.obj = append(out.obj, m)
		}
	}
	return out
}

// schema rebuilds n; scope is the schema resource "#..." references in n are
// relative to.
func (g *grammarTool) schema(n, scope *node, depth int) *node {
	if g.visits++; g.visits > maxGrammarVisits || depth > maxGrammarDepth || !n.isObj {
		return anyValue() // true, false (see the callers), or not a schema
	}
	if n != g.root && g.resourceID(n) != "" {
		scope = n
	}
	if r := n.get("$ref"); r != nil {
		if s, ok := r.str(); ok {
			// Siblings of $ref narrow it further (2019-09 on) or are
			// ignored (before): the reference alone is a superset.
			return g.ref(s, scope)
		}
	}
	if all := n.get("allOf"); all != nil && all.isArr && len(all.arr) > 0 {
		return g.allOf(n, scope, depth)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		alts := n.get(k)
		if alts == nil || !alts.isArr || len(alts.arr) == 0 {
			continue
		}
		// Each alternative holds together with the keywords beside it.
		rest := without(n, "anyOf", "oneOf")
		if o := n.get("oneOf"); k == "anyOf" && o != nil {
			rest.obj = append(rest.obj, member{"oneOf", o}) // both must hold: kept as a conjunct
		}
		var out []*node
		for _, a := range alts.arr {
			if isFalse(a) {
				continue
			}
			if hasGrammarKeyword(rest) {
				a = obj(member{"allOf", &node{isArr: true, arr: []*node{rest, a}}})
			}
			out = append(out, g.schema(a, scope, depth+1))
		}
		switch len(out) {
		case 0:
			return anyValue()
		case 1:
			return out[0]
		}
		return obj(member{"anyOf", &node{isArr: true, arr: out}})
	}
	return g.plain(n, scope, depth)
}

// allOf rebuilds a conjunction. Object schemas are merged (their properties
// and required names together); otherwise any one conjunct is a superset of
// all of them, and the first that says something is taken.
func (g *grammarTool) allOf(n, scope *node, depth int) *node {
	var parts []*node
	if rest := without(n, "allOf"); hasGrammarKeyword(rest) {
		parts = append(parts, rest)
	}
	for _, c := range n.get("allOf").arr {
		if isFalse(c) {
			return anyValue() // nothing is valid: the grammar cannot say so
		}
		if c.isObj && hasGrammarKeyword(c) {
			parts = append(parts, c)
		}
	}
	switch {
	case len(parts) == 0:
		return anyValue()
	case len(parts) == 1:
		return g.schema(parts[0], scope, depth+1)
	}
	for _, p := range parts {
		if !plainObject(p) {
			return g.schema(parts[0], scope, depth+1)
		}
	}
	merged := obj(member{"type", lit(`"object"`)})
	props := &node{isObj: true}
	var required []*node
	var closed, extra, patterns *node
	for _, p := range parts {
		if ps := p.get("properties"); ps != nil && ps.isObj {
			for _, m := range ps.obj {
				if prev := props.get(m.key); prev != nil {
					props.del(m.key)
					m.val = obj(member{"allOf", &node{isArr: true, arr: []*node{prev, m.val}}})
				}
				props.obj = append(props.obj, m)
			}
		}
		if r := p.get("required"); r != nil && r.isArr {
			required = append(required, r.arr...)
		}
		if ap := p.get("additionalProperties"); ap != nil {
			if isFalse(ap) {
				closed = ap
			} else if extra == nil {
				extra = ap
			}
		}
		if pp := p.get("patternProperties"); pp != nil && pp.isObj {
			if patterns == nil {
				patterns = &node{isObj: true}
			}
			patterns.obj = append(patterns.obj, pp.obj...)
		}
	}
	merged.obj = append(merged.obj, member{"properties", props}, member{"required", &node{isArr: true, arr: required}})
	if closed != nil {
		extra = closed
	}
	if extra != nil {
		merged.obj = append(merged.obj, member{"additionalProperties", extra})
	}
	if patterns != nil {
		merged.obj = append(merged.obj, member{"patternProperties", patterns})
	}
	return g.plain(merged, scope, depth+1)
}

// plainObject: a conjunct allOf can merge, an object schema and no more.
func plainObject(n *node) bool {
	for _, m := range n.obj {
		switch m.key {
		case "type":
			if t, _ := m.val.str(); t != "object" {
				return false
			}
		case "properties", "required", "additionalProperties", "patternProperties":
		default:
			if slices.Contains(grammarKeywords, m.key) {
				return false
			}
		}
	}
	return true
}

// plain rebuilds a schema without $ref or combinators. Its description
// stays: the converter ignores it, and Ollama converts into a buffer four
// times the format's size, which the description helps fill honestly.
func (g *grammarTool) plain(n, scope *node, depth int) *node {
	out := g.plainBare(n, scope, depth)
	if d := n.get("description"); d != nil {
		if _, ok := d.str(); ok && out.get("anyOf") == nil {
			out.obj = append(out.obj, member{"description", d})
		}
	}
	return out
}

func (g *grammarTool) plainBare(n, scope *node, depth int) *node {
	if c := n.get("const"); c != nil && safeLiteral(c) {
		return obj(member{"const", c})
	}
	if e := n.get("enum"); e != nil && e.isArr && len(e.arr) > 0 && !slices.ContainsFunc(e.arr, func(v *node) bool { return !safeLiteral(v) }) {
		return obj(member{"enum", e})
	}
	types := typeSet(n)
	out := &node{isObj: true}
	if len(types) == 1 {
		out.obj = append(out.obj, member{"type", str(types[0])})
	} else {
		var list []*node
		for _, t := range types {
			list = append(list, str(t))
		}
		out.obj = append(out.obj, member{"type", &node{isArr: true, arr: list}})
	}
	for _, t := range types {
		switch t {
		case "object":
			g.object(n, out, scope, depth)
		case "array":
			g.array(n, out, scope, depth)
		case "string":
			stringKeywords(n, out)
		case "integer":
			// Ollama converts into a buffer four times the format's size
			// (at least 32 KiB); past a few ranges the grammar may not fit.
			if g.ranges < maxGrammarRanges && integerBounds(n, out) {
				g.ranges++
			}
		}
	}
	return out
}

// typeSet is the types n allows, in a fixed order; number covers integer.
// A type name the converter does not know (draft 3's "any", a schema in
// the list) allows anything.
func typeSet(n *node) []string {
	known := []string{"string", "number", "integer", "boolean", "null", "object", "array"}
	anything := []string{"string", "number", "boolean", "null", "object", "array"}
	t := n.get("type")
	if t == nil {
		return anything
	}
	var named []string
	if s, ok := t.str(); ok {
		named = []string{s}
	} else if t.isArr {
		for _, v := range t.arr {
			s, ok := v.str()
			if !ok {
				return anything
			}
			named = append(named, s)
		}
	}
	var out []string
	for _, k := range known {
		if slices.Contains(named, k) {
			out = append(out, k)
		}
	}
	for _, s := range named {
		if !slices.Contains(known, s) {
			return anything
		}
	}
	if len(out) == 0 {
		return anything
	}
	if slices.Contains(out, "number") {
		out = slices.DeleteFunc(out, func(s string) bool { return s == "integer" })
	}
	return out
}

func (g *grammarTool) object(n, out, scope *node, depth int) {
	props := &node{isObj: true}
	var refProp *node // a property named "$ref": see below
	put := func(key string, v *node) {
		props.del(key) // a name written twice: the last counts, as for validation
		if key == "$ref" {
			refProp = v
			return
		}
		props.obj = append(props.obj, member{key, v})
	}
	if ps := n.get("properties"); ps != nil && ps.isObj {
		for _, m := range ps.obj {
			if isFalse(m.val) {
				continue // the name cannot appear: the grammar never writes it
			}
			put(m.key, g.schema(m.val, scope, depth+1))
		}
	}
	ap := n.get("additionalProperties")
	pp := n.get("patternProperties")
	var required []*node
	if r := n.get("required"); r != nil && r.isArr {
		for _, v := range r.arr {
			name, ok := v.str()
			if !ok || slices.ContainsFunc(required, func(x *node) bool { s, _ := x.str(); return s == name }) {
				continue
			}
			if props.get(name) == nil && (name != "$ref" || refProp == nil) {
				// Required but not declared: the converter writes only
				// declared names, so declare it with what it may hold.
				var v *node
				switch {
				case pp != nil && pp.isObj && matchesAny(pp, name):
					v = anyValue()
				case ap != nil && ap.isObj:
					v = g.schema(ap, scope, depth+1)
				case isFalse(ap):
					continue // cannot be satisfied; validation says so
				default:
					v = anyValue()
				}
				put(name, v)
			}
			if name != "$ref" {
				required = append(required, str(name))
			}
		}
	}
	var extra *node // additionalProperties of the copy; nil leaves it out
	switch {
	case ap == nil:
		if pp != nil && pp.isObj && len(pp.obj) > 0 {
			// Names matching no pattern are open too; the converter would
			// close them (it reads no additionalProperties as false).
			extra = lit("true")
		}
	case ap.isObj:
		extra = g.schema(ap, scope, depth+1)
	default:
		if _, ok := ap.boolean(); ok {
			extra = ap
		}
	}
	// Names matching patternProperties are allowed beside the declared
	// ones, and so is "$ref", which no converter-readable copy can declare:
	// its resolver takes a "$ref" key of any object for a reference.
	var also []*node
	if pp != nil && pp.isObj {
		for _, m := range pp.obj {
			if !isFalse(m.val) {
				also = append(also, g.schema(m.val, scope, depth+1))
			}
		}
	}
	if refProp != nil {
		also = append(also, refProp)
	}
	if len(also) > 0 {
		if extra != nil && extra.isObj {
			also = append([]*node{extra}, also...)
		}
		if v, ok := extra.boolean(); !ok || !v {
			if len(also) == 1 {
				extra = also[0]
			} else {
				extra = obj(member{"anyOf", &node{isArr: true, arr: also}})
			}
		}
	}
	if len(props.obj) > 0 {
		out.obj = append(out.obj, member{"properties", props})
	}
	if len(required) > 0 {
		out.obj = append(out.obj, member{"required", &node{isArr: true, arr: required}})
	}
	if extra != nil {
		out.obj = append(out.obj, member{"additionalProperties", extra})
	}
}

func matchesAny(patterns *node, name string) bool {
	for _, m := range patterns.obj {
		re, err := regexp.Compile(m.key)
		if err != nil || re.MatchString(name) {
			return true
		}
	}
	return false
}

func (g *grammarTool) array(n, out, scope *node, depth int) {
	lo, hasLo := count(n.get("minItems"), maxGrammarItems)
	hi, hasHi := count(n.get("maxItems"), maxGrammarItems)
	if hasLo && hasHi && lo > hi {
		hasLo, hasHi = false, false
	}
	// A tuple: prefixItems (2020-12), or items as a list (before), with
	// what may follow it in items or additionalItems.
	var tuple []*node
	var rest *node
	if p := n.get("prefixItems"); p != nil && p.isArr {
		tuple, rest = p.arr, n.get("items")
	} else if it := n.get("items"); it != nil && it.isArr {
		tuple, rest = it.arr, n.get("additionalItems")
	} else {
		rest = it
	}
	if tuple != nil {
		var elems []*node
		for _, e := range tuple {
			if isFalse(e) {
				rest = lit("false") // nothing at this place, so nothing after it
				break
			}
			elems = append(elems, g.schema(e, scope, depth+1))
		}
		top := len(elems)
		if hasHi && hi < top {
			top = hi
		}
		if (isFalse(rest) || (hasHi && hi <= len(elems))) && lo <= top && top-lo < maxGrammarTuples {
			// Closed: every allowed length spelt out, in order. The
			// converter's tuple has exactly its items.
			var alts []*node
			for l := lo; l <= top; l++ {
				alts = append(alts, tupleOf(elems[:l]))
			}
			if len(alts) == 1 {
				out.obj = append(out.obj, alts[0].obj[1:]...)
				return
			}
			g.tupleAlts(out, alts)
			return
		}
		// Open: any element may be any of them.
		alts := elems
		switch {
		case rest == nil || !hasGrammarKeyword(rest) && !isFalse(rest):
			alts = nil // anything may follow
		case !isFalse(rest):
			alts = append(slices.Clone(alts), g.schema(rest, scope, depth+1))
		}
		switch len(alts) {
		case 0:
			rest = nil
		case 1:
			rest = alts[0]
		default:
			rest = obj(member{"anyOf", &node{isArr: true, arr: alts}})
		}
	} else if rest != nil {
		switch {
		case isFalse(rest):
			hasHi, hi = true, 0
			rest = nil
		case !rest.isObj || !hasGrammarKeyword(rest):
			rest = nil
		default:
			rest = g.schema(rest, scope, depth+1)
		}
	}
	if rest == nil && (hasLo || hasHi) {
		rest = anyValue() // the converter counts items only with an items schema
	}
	if rest != nil {
		out.obj = append(out.obj, member{"items", rest})
	}
	if hasLo && lo > 0 {
		out.obj = append(out.obj, member{"minItems", lit(strconv.Itoa(lo))})
	}
	if hasHi {
		out.obj = append(out.obj, member{"maxItems", lit(strconv.Itoa(hi))})
	}
}

// tupleOf is an array of exactly elems. The converter reads prefixItems as
// exactly its items and nothing more; the bounds say the same to a validator
// (an empty prefixItems is not a schema: no items at all is said otherwise).
func tupleOf(elems []*node) *node {
	l := lit(strconv.Itoa(len(elems)))
	if len(elems) == 0 {
		return obj(member{"type", lit(`"array"`)}, member{"items", anyValue()}, member{"maxItems", l})
	}
	return obj(member{"type", lit(`"array"`)}, member{"prefixItems", &node{isArr: true, arr: slices.Clone(elems)}}, member{"minItems", l}, member{"maxItems", l})
}

// tupleAlts turns an array branch into the alternatives of a closed tuple:
// out's type loses "array", and out becomes anyOf [out without it, tuples].
func (g *grammarTool) tupleAlts(out *node, tuples []*node) {
	typ := out.get("type")
	var others []*node
	if typ.isArr {
		for _, t := range typ.arr {
			if s, _ := t.str(); s != "array" {
				others = append(others, t)
			}
		}
	}
	alts := slices.Clone(tuples)
	if len(others) > 0 {
		rest := &node{isObj: true, obj: slices.Clone(out.obj)}
		rest.del("type")
		if len(others) == 1 {
			rest.obj = append([]member{{"type", others[0]}}, rest.obj...)
		} else {
			rest.obj = append([]member{{"type", &node{isArr: true, arr: others}}}, rest.obj...)
		}
		alts = append([]*node{rest}, alts...)
	}
	out.obj = []member{{"anyOf", &node{isArr: true, arr: alts}}}
}

// count reads a non-negative integer keyword the converter may repeat by.
func count(n *node, limit int) (int, bool) {
	f, ok := number(n)
	if !ok || f < 0 || f > float64(limit) || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

func number(n *node) (float64, bool) {
	if n == nil || len(n.lit) == 0 || n.isObj || n.isArr {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n.lit), 64)
	return f, err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
}

var grammarFormats = []string{"date", "time", "date-time", "uuid"}

func stringKeywords(n, out *node) {
	if p, ok := n.get("pattern").str(); ok && grammarPattern(p) {
		out.obj = append(out.obj, member{"pattern", str(p)})
		return // the converter reads nothing else beside a pattern
	}
	if f, ok := n.get("format").str(); ok && slices.Contains(grammarFormats, f) {
		out.obj = append(out.obj, member{"format", str(f)})
		return
	}
	lo, hasLo := count(n.get("minLength"), maxGrammarString)
	hi, hasHi := count(n.get("maxLength"), maxGrammarString)
	if hasLo && hasHi && lo > hi {
		return
	}
	if hasLo && lo > 0 {
		out.obj = append(out.obj, member{"minLength", lit(strconv.Itoa(lo))})
	}
	if hasHi {
		out.obj = append(out.obj, member{"maxLength", lit(strconv.Itoa(hi))})
	}
}

// integerBounds keeps the integer bounds, rounded inwards to integers the
// converter can spell: draft 4's boolean exclusive bounds and 6's numbers.
func integerBounds(n, out *node) bool {
	lo, hasLo := bound(n, "minimum", "exclusiveMinimum", math.Ceil, 1)
	hi, hasHi := bound(n, "maximum", "exclusiveMaximum", math.Floor, -1)
	if hasLo && hasHi && lo > hi {
		return false
	}
	if hasLo {
		out.obj = append(out.obj, member{"minimum", lit(strconv.FormatInt(lo, 10))})
	}
	if hasHi {
		out.obj = append(out.obj, member{"maximum", lit(strconv.FormatInt(hi, 10))})
	}
	return hasLo || hasHi
}

func bound(n *node, incl, excl string, round func(float64) float64, step int64) (int64, bool) {
	var v int64
	var ok bool
	tighter := func(x int64) {
		if !ok || (step > 0 && x > v) || (step < 0 && x < v) {
			v, ok = x, true
		}
	}
	if f, fine := number(n.get(incl)); fine && math.Abs(f) <= maxGrammarInt {
		x := int64(round(f))
		if b, isBool := n.get(excl).boolean(); isBool && b && float64(x) == f {
			x += step // draft 4: the bound itself is excluded
		}
		tighter(x)
	}
	if f, fine := number(n.get(excl)); fine && math.Abs(f) <= maxGrammarInt {
		x := int64(round(f))
		if float64(x) == f {
			x += step
		}
		tighter(x)
	}
	return v, ok
}

// safeLiteral: a const or enum value the converter can write. Its resolver
// walks every object, values included, and takes a "$ref" key for a
// reference; a number it cannot read fails the parse.
func safeLiteral(n *node) bool {
	switch {
	case n.isObj:
		for _, m := range n.obj {
			if m.key == "$ref" || !safeLiteral(m.val) {
				return false
			}
		}
	case n.isArr:
		for _, v := range n.arr {
			if !safeLiteral(v) {
				return false
			}
		}
	case len(n.lit) > 0 && (n.lit[0] == '-' || (n.lit[0] >= '0' && n.lit[0] <= '9')):
		_, ok := number(n)
		return ok
	}
	return true
}

// ref resolves a reference within scope and returns a reference to the copy
// of its target; what cannot be resolved here allows anything.
func (g *grammarTool) ref(r string, scope *node) *node {
	target, tscope, ok := g.resolve(r, scope)
	if !ok {
		return anyValue()
	}
	if isFalse(target) || (!target.isObj) {
		return anyValue()
	}
	name, ok := g.names[target]
	if !ok {
		name = g.defsAt + "d" + strconv.Itoa(len(g.defs))
		g.names[target] = name
		g.defs = append(g.defs, member{"d" + strconv.Itoa(len(g.defs)), nil})
		g.todo = append(g.todo, pendingDef{at: len(g.defs) - 1, n: target, scope: tscope})
	}
	return obj(member{"$ref", str(name)})
}

// resourceID is the $id (or draft 4's id) that makes n a schema resource of
// its own, "" when none; an id that is only a fragment names an anchor.
func (g *grammarTool) resourceID(n *node) string {
	for _, k := range g.ids {
		if s, ok := n.get(k).str(); ok && s != "" && !strings.HasPrefix(s, "#") {
			return s
		}
	}
	return ""
}

// resolve finds what a reference points at: "#", "#/json/pointer"
// (percent-encoded and ~-escaped as RFC 6901 writes it in a URI fragment) or
// "#anchor", within scope. Other URIs are not followed.
func (g *grammarTool) resolve(r string, scope *node) (*node, *node, bool) {
	frag, ok := strings.CutPrefix(r, "#")
	if !ok {
		return nil, nil, false
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return nil, nil, false
	}
	if frag == "" {
		return scope, scope, true
	}
	if !strings.HasPrefix(frag, "/") {
		n := g.findAnchor(scope, frag, true)
		return n, scope, n != nil
	}
	cur, cscope := scope, scope
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch {
		case cur.isObj:
			var next *node
			for _, m := range cur.obj {
				if m.key == tok {
					next = m.val // the last of a name written twice
				}
			}
			cur = next
		case cur.isArr:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur.arr) {
				return nil, nil, false
			}
			cur = cur.arr[i]
		default:
			return nil, nil, false
		}
		if cur == nil {
			return nil, nil, false
		}
		if cur.isObj && g.resourceID(cur) != "" {
			cscope = cur
		}
	}
	return cur, cscope, true
}

// findAnchor looks for the subschema that declares anchor within one
// resource (not inside resources embedded in it).
func (g *grammarTool) findAnchor(n *node, anchor string, top bool) *node {
	if n.isObj {
		if !top && g.resourceID(n) != "" {
			return nil
		}
		for _, k := range []string{"$anchor", "$dynamicAnchor"} {
			if s, ok := n.get(k).str(); ok && s == anchor {
				return n
			}
		}
		for _, k := range g.ids {
			if s, ok := n.get(k).str(); ok && s == "#"+anchor {
				return n
			}
		}
		for _, m := range n.obj {
			if m.key == "enum" || m.key == "const" || m.key == "default" || m.key == "examples" {
				continue
			}
			if f := g.findAnchor(m.val, anchor, false); f != nil {
				return f
			}
		}
	}
	for _, v := range n.arr {
		if f := g.findAnchor(v, anchor, false); f != nil {
			return f
		}
	}
	return nil
}

// grammarPattern reports whether the converter turns p into a grammar that
// matches only valid JSON string content and that llama.cpp's grammar parser
// reads: anchored ^...$, printable ASCII, no ".", no negated or escaped
// character classes, no lookaround or flags, escapes only of the regex
// metacharacters, bounded repetition. Other patterns are left out of the copy.
func grammarPattern(p string) bool {
	if len(p) < 2 || p[0] != '^' || p[len(p)-1] != '$' {
		return false
	}
	pp := &patternParser{s: p[1 : len(p)-1]}
	return pp.alt() && pp.i == len(pp.s)
}

type patternParser struct {
	s string
	i int
}

const patternMeta = `^$.[]()|{}*+?`

func (p *patternParser) alt() bool {
	for {
		if !p.seq() {
			return false
		}
		if p.i < len(p.s) && p.s[p.i] == '|' {
			p.i++
			continue
		}
		return true
	}
}

func (p *patternParser) seq() bool {
	n := 0
	for p.i < len(p.s) && p.s[p.i] != '|' && p.s[p.i] != ')' {
		escaped, ok := p.atom()
		if !ok {
			return false
		}
		n++
		if p.i < len(p.s) && strings.IndexByte("*+?{", p.s[p.i]) >= 0 {
			// The converter applies a quantifier after an escape to the
			// whole literal run before it.
			if escaped || !p.quantifier() {
				return false
			}
		}
	}
	return n > 0
}

func (p *patternParser) atom() (escaped, ok bool) {
	c := p.s[p.i]
	switch {
	case c == '(':
		p.i++
		if p.i < len(p.s) && p.s[p.i] == '?' {
			return false, false
		}
		if !p.alt() || p.i >= len(p.s) || p.s[p.i] != ')' {
			return false, false
		}
		p.i++
		return false, true
	case c == '[':
		return false, p.class()
	case c == '\\':
		if p.i+1 >= len(p.s) || strings.IndexByte(patternMeta, p.s[p.i+1]) < 0 {
			return false, false
		}
		p.i += 2
		return true, true
	case strings.IndexByte(patternMeta, c) >= 0, !plainChar(c):
		return false, false
	}
	p.i++
	return false, true
}

// plainChar: a character the grammar may write as is inside a JSON string.
func plainChar(c byte) bool { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' }

func (p *patternParser) class() bool {
	p.i++ // [
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != ']' {
		c := p.s[p.i]
		if !plainChar(c) || c == '[' || (c == '^' && p.i == start) {
			return false
		}
		if p.i+2 < len(p.s) && p.s[p.i+1] == '-' && p.s[p.i+2] != ']' {
			hi := p.s[p.i+2]
			if !plainChar(hi) || hi == '[' || hi < c || (c < '"' && hi > '"') || (c < '\\' && hi > '\\') {
				return false
			}
			p.i += 3
			continue
		}
		p.i++
	}
	if p.i >= len(p.s) || p.i == start {
		return false
	}
	p.i++ // ]
	return true
}

func (p *patternParser) quantifier() bool {
	if c := p.s[p.i]; c != '{' {
		p.i++
	} else {
		end := strings.IndexByte(p.s[p.i:], '}')
		if end < 0 {
			return false
		}
		body := p.s[p.i+1 : p.i+end]
		p.i += end + 1
		lo, hi, two := strings.Cut(body, ",")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a > maxGrammarRepeat || strings.TrimSpace(lo) != lo {
			return false
		}
		if two && hi != "" {
			b, err := strconv.Atoi(hi)
			if err != nil || b < a || b > maxGrammarRepeat || strings.TrimSpace(hi) != hi {
				return false
			}
		}
	}
	// A second quantifier (lazy "+?", or "a**") is not read as Go does.
	return p.i >= len(p.s) || strings.IndexByte("*+?{", p.s[p.i]) < 0
}
