package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzFormatCopy: whatever schema a tool declares, either CheckTool refuses
// it or its format copy holds only what Ollama's converter reads (checked
// here in Go; TestTrickySchemasJoinTheUnion runs the converter itself).
func FuzzFormatCopy(f *testing.F) {
	for _, tc := range tricky {
		f.Add(tc.schema)
	}
	for _, tc := range refusedTricky {
		f.Add(tc.schema)
	}
	f.Add(`{"type":"object","properties":{"a":{"$ref":"#/properties/b"},"b":{"items":[{"$ref":"#"}]}}}`)
	f.Fuzz(func(t *testing.T, s string) {
		tl := Tool{Name: "fuzz", Schema: json.RawMessage(s)}
		if CheckTool(tl) != nil {
			return
		}
		u, err := NewUnion([]Tool{tl})
		if err != nil {
			t.Fatalf("CheckTool takes %s, NewUnion refuses: %v", s, err)
		}
		root, err := parseNode(u.Format())
		if err != nil {
			t.Fatalf("format is not JSON: %v", err)
		}
		for _, b := range root.get("oneOf").arr {
			var err error
			if defs := b.get("$defs"); defs != nil {
				for _, d := range defs.obj {
					if err == nil {
						err = convertible(d.val, root, 0)
					}
				}
			}
			if err == nil {
				err = convertible(without(b, "$defs"), root, 0)
			}
			if err != nil {
				t.Fatalf("%v\nschema: %s\nformat: %s", err, s, u.Format())
			}
		}
	})
}

// convertible checks a schema of the copy: each is a $ref by plain tokens
// that resolves, an anyOf, an enum, a const, or a typed schema whose
// keywords the converter reads with the types it expects.
func convertible(n, root *node, depth int) error {
	if depth > 200 {
		return fmt.Errorf("nested too deep")
	}
	if !n.isObj {
		return fmt.Errorf("a schema that is not an object: %s", n.bytes())
	}
	if r, ok := n.get("$ref").str(); ok {
		if len(n.obj) != 1 {
			return fmt.Errorf("$ref with siblings: %s", n.bytes())
		}
		return pointerResolves(r, root)
	}
	if a := n.get("anyOf"); a != nil {
		if !a.isArr || len(a.arr) == 0 {
			return fmt.Errorf("anyOf not a list: %s", n.bytes())
		}
		for _, v := range a.arr {
			if err := convertible(v, root, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if n.get("enum") != nil || n.get("const") != nil {
		if !literalSafe(n) {
			return fmt.Errorf("a literal holding a $ref key: %s", n.bytes())
		}
		return nil
	}
	t := n.get("type")
	if t == nil {
		return fmt.Errorf("no type: %s", n.bytes())
	}
	known := []string{"string", "number", "integer", "boolean", "null", "object", "array"}
	types := t.arr
	if !t.isArr {
		types = []*node{t}
	}
	for _, v := range types {
		if s, ok := v.str(); !ok || !slices.Contains(known, s) {
			return fmt.Errorf("type %s", t.bytes())
		}
	}
	for _, m := range n.obj {
		switch m.key {
		case "type":
		case "description":
			if _, ok := m.val.str(); !ok {
				return fmt.Errorf("description not a string")
			}
		case "properties":
			for _, p := range m.val.obj {
				if p.key == "$ref" {
					return fmt.Errorf("a property named $ref: %s", n.bytes())
				}
				if err := convertible(p.val, root, depth+1); err != nil {
					return err
				}
			}
		case "required":
			for _, v := range m.val.arr {
				if s, ok := v.str(); !ok || n.get("properties").get(s) == nil {
					return fmt.Errorf("required %s not declared", v.bytes())
				}
			}
		case "additionalProperties":
			if _, ok := m.val.boolean(); !ok {
				if err := convertible(m.val, root, depth+1); err != nil {
					return err
				}
			}
		case "items":
			if err := convertible(m.val, root, depth+1); err != nil {
				return err
			}
		case "prefixItems":
			for _, v := range m.val.arr {
				if err := convertible(v, root, depth+1); err != nil {
					return err
				}
			}
		case "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum":
			if _, err := strconv.ParseInt(string(m.val.lit), 10, 64); err != nil {
				return fmt.Errorf("%s not an integer: %s", m.key, m.val.bytes())
			}
		case "pattern":
			if p, _ := m.val.str(); !grammarPattern(p) {
				return fmt.Errorf("pattern %q", p)
			}
		case "format":
			if f, _ := m.val.str(); !slices.Contains(grammarFormats, f) {
				return fmt.Errorf("format %s", m.val.bytes())
			}
		default:
			return fmt.Errorf("keyword %q in %s", m.key, n.bytes())
		}
	}
	return nil
}

func literalSafe(n *node) bool {
	for _, k := range []string{"enum", "const"} {
		if v := n.get(k); v != nil && !safeLiteral(v) {
			return false
		}
	}
	return true
}

// pointerResolves follows r as the converter does: plain tokens split at
// "/", no unescaping.
func pointerResolves(r string, root *node) error {
	p, ok := strings.CutPrefix(r, "#/")
	if !ok {
		return fmt.Errorf("reference %q is not #/...", r)
	}
	cur := root
	for _, tok := range strings.Split(p, "/") {
		switch {
		case cur.isArr:
			i, err := strconv.Atoi(tok)
			if err != nil || i >= len(cur.arr) {
				return fmt.Errorf("reference %q: no %s", r, tok)
			}
			cur = cur.arr[i]
		case cur.isObj:
			if cur = cur.get(tok); cur == nil {
				return fmt.Errorf("reference %q: no %s", r, tok)
			}
		default:
			return fmt.Errorf("reference %q: %s in a value", r, tok)
		}
	}
	if !cur.isObj {
		return fmt.Errorf("reference %q to a non-schema", r)
	}
	return nil
}
