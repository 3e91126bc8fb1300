package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// node is a JSON value that keeps object members in their written order.
// Schemas must: Ollama emits required properties in `properties` order, and
// the envelope's order (thought, action, args) is what makes a constrained
// model reason before it commits to an action.
type node struct {
	obj          []member        // set for objects (possibly empty, see isObj)
	arr          []*node         // set for arrays (possibly empty, see isArr)
	lit          json.RawMessage // strings, numbers, booleans, null
	isObj, isArr bool
}

type member struct {
	key string
	val *node
}

func parseNode(b []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, err := readNode(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return n, nil
}

func readNode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &node{isObj: true}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := readNode(dec)
				if err != nil {
					return nil, err
				}
				n.obj = append(n.obj, member{kt.(string), v})
			}
			_, err := dec.Token()
			return n, err
		case '[':
			n := &node{isArr: true}
			for dec.More() {
				v, err := readNode(dec)
				if err != nil {
					return nil, err
				}
				n.arr = append(n.arr, v)
			}
			_, err := dec.Token()
			return n, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		b, err := json.Marshal(t)
		return &node{lit: b}, err
	}
}

func (n *node) get(key string) *node {
	if n == nil {
		return nil
	}
	for _, m := range n.obj {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

func (n *node) clone() *node {
	c := &node{lit: n.lit, isObj: n.isObj, isArr: n.isArr}
	for _, m := range n.obj {
		c.obj = append(c.obj, member{m.key, m.val.clone()})
	}
	for _, v := range n.arr {
		c.arr = append(c.arr, v.clone())
	}
	return c
}

// duplicateKey returns a key some object in n holds twice.
func (n *node) duplicateKey() (string, bool) {
	seen := make(map[string]bool, len(n.obj))
	for _, m := range n.obj {
		if seen[m.key] {
			return m.key, true
		}
		seen[m.key] = true
		if k, ok := m.val.duplicateKey(); ok {
			return k, true
		}
	}
	for _, v := range n.arr {
		if k, ok := v.duplicateKey(); ok {
			return k, true
		}
	}
	return "", false
}

func (n *node) del(key string) {
	for i, m := range n.obj {
		if m.key == key {
			n.obj = append(n.obj[:i], n.obj[i+1:]...)
			return
		}
	}
}

// str returns the node's value if it is a JSON string.
func (n *node) str() (string, bool) {
	if n == nil || len(n.lit) == 0 || n.lit[0] != '"' {
		return "", false
	}
	var s string
	err := json.Unmarshal(n.lit, &s)
	return s, err == nil
}

func (n *node) boolean() (v, ok bool) {
	if n == nil {
		return false, false
	}
	switch string(n.lit) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

func (n *node) write(buf *bytes.Buffer) {
	switch {
	case n.isObj:
		buf.WriteByte('{')
		for i, m := range n.obj {
			if i > 0 {
				buf.WriteByte(',')
			}
			k, _ := json.Marshal(m.key)
			buf.Write(k)
			buf.WriteByte(':')
			m.val.write(buf)
		}
		buf.WriteByte('}')
	case n.isArr:
		buf.WriteByte('[')
		for i, v := range n.arr {
			if i > 0 {
				buf.WriteByte(',')
			}
			v.write(buf)
		}
		buf.WriteByte(']')
	default:
		buf.Write(n.lit)
	}
}

func (n *node) bytes() []byte {
	var buf bytes.Buffer
	n.write(&buf)
	return buf.Bytes()
}

// Keywords whose value is a schema, a map of schemas, or a list of schemas.
var (
	schemaKeywords    = []string{"items", "contains", "not", "if", "then", "else", "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems"}
	schemaMapKeywords = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
	schemaListKeyword = []string{"prefixItems", "oneOf", "anyOf", "allOf"}
)

// eachSubschema calls f with a pointer to every direct subschema slot of n, so
// f can replace boolean schemas.
func (n *node) eachSubschema(f func(slot **node)) {
	for _, k := range schemaKeywords {
		for i := range n.obj {
			if n.obj[i].key == k {
				f(&n.obj[i].val)
			}
		}
	}
	for _, k := range schemaMapKeywords {
		if m := n.get(k); m != nil && m.isObj {
			for i := range m.obj {
				f(&m.obj[i].val)
			}
		}
	}
	for _, k := range schemaListKeyword {
		if l := n.get(k); l != nil && l.isArr {
			for i := range l.arr {
				f(&l.arr[i])
			}
		}
	}
}
