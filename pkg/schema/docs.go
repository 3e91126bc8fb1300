package schema

import (
	"encoding/json"
	"slices"
	"strings"
)

// renderDocs writes the tool list for the system prompt. Small models follow a
// short line per argument better than a raw schema; the exact schema still
// reaches Ollama as `format`.
func renderDocs(tools []Tool) string {
	var b strings.Builder
	for _, t := range tools {
		n, err := argsNode(t)
		if err != nil {
			continue // NewUnion has already refused it
		}
		b.WriteString("- ")
		b.WriteString(t.Name)
		if t.Description != "" {
			b.WriteString(": ")
			b.WriteString(oneLine(t.Description))
		}
		b.WriteByte('\n')
		var required []string
		if r := n.get("required"); r != nil {
			for _, v := range r.arr {
				if s, ok := v.str(); ok {
					required = append(required, s)
				}
			}
		}
		props := n.get("properties")
		if props == nil || len(props.obj) == 0 {
			b.WriteString("  args: {} (none)\n")
			continue
		}
		for _, m := range props.obj {
			b.WriteString("  - args.")
			b.WriteString(m.key)
			b.WriteString(" (")
			b.WriteString(typeOf(m.val))
			if slices.Contains(required, m.key) {
				b.WriteString(", required")
			}
			if d := m.val.get("default"); d != nil {
				b.WriteString(", default ")
				b.Write(d.bytes())
			}
			b.WriteString(")")
			if d, ok := m.val.get("description").str(); ok && d != "" {
				b.WriteString(": ")
				b.WriteString(oneLine(d))
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// typeOf describes a property schema in a few words.
func typeOf(n *node) string {
	if n == nil || !n.isObj {
		return "any"
	}
	if c := n.get("const"); c != nil {
		return "exactly " + string(c.bytes())
	}
	if e := n.get("enum"); e != nil && e.isArr {
		vals := make([]string, len(e.arr))
		for i, v := range e.arr {
			vals[i] = string(v.bytes())
		}
		return "one of " + strings.Join(vals, ", ")
	}
	var typ string
	switch t := n.get("type"); {
	case t == nil:
		typ = "any"
	case t.isArr:
		var ts []string
		for _, v := range t.arr {
			s, _ := v.str()
			ts = append(ts, s)
		}
		typ = strings.Join(ts, " or ")
	default:
		typ, _ = t.str()
	}
	switch typ {
	case "array":
		return "array of " + typeOf(n.get("items"))
	case "object":
		if p := n.get("properties"); p != nil && len(p.obj) > 0 {
			keys := make([]string, len(p.obj))
			for i, m := range p.obj {
				keys[i] = m.key
			}
			return "object with " + strings.Join(keys, ", ")
		}
	case "integer", "number":
		var bounds []string
		if v := n.get("minimum"); v != nil {
			bounds = append(bounds, ">= "+string(v.bytes()))
		}
		if v := n.get("maximum"); v != nil {
			bounds = append(bounds, "<= "+string(v.bytes()))
		}
		if len(bounds) > 0 {
			return typ + " " + strings.Join(bounds, ", ")
		}
	}
	return typ
}

func oneLine(s string) string {
	return clip(strings.Join(strings.Fields(s), " "), 300)
}

// Example returns a one-line example reply for the system prompt.
func Example(action string, args any) string {
	b, _ := json.Marshal(struct {
		Thought string `json:"thought"`
		Action  string `json:"action"`
		Args    any    `json:"args"`
	}{"...", action, args})
	return string(b)
}
