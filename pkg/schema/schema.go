// Package schema owns the reply union: FinalResponse plus every tool's
// arguments as one JSON Schema, and the decoding, validation and explanation
// of what the model replies against it.
package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"

	"github.com/invopop/jsonschema"
)

// FinalAction is the action of the branch that ends a turn with an answer.
const FinalAction = "final_response"

// FinalResponse is what the model fills in when it has the answer.
type FinalResponse struct {
	Answer string `json:"answer" jsonschema:"minLength=1,pattern=\\S,description=The complete answer for the user in plain language"`
}

// Tool is one action the model may choose: its name, what it does, and the
// JSON Schema of its arguments (an object schema).
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
}

var toolName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// CheckName reports whether name may be used for a tool.
func CheckName(name string) error {
	if name == FinalAction {
		return fmt.Errorf("tool name %q is reserved", name)
	}
	if !toolName.MatchString(name) {
		return fmt.Errorf("tool name %q must match %s", name, toolName)
	}
	return nil
}

// Reflect returns the JSON Schema of a Go argument struct, inline (no $ref)
// and closed (additionalProperties false), as the union expects. Recursive
// types are refused because inlining them never ends.
func Reflect(v any) (json.RawMessage, error) {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("reflect schema: %v is not a struct", t)
	}
	if recursive(t, map[reflect.Type]bool{}) {
		return nil, fmt.Errorf("reflect schema: %v is recursive", t)
	}
	r := jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true, Anonymous: true}
	s := r.ReflectFromType(t)
	s.Version = "" // the union embeds it; a nested $schema means nothing there
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("reflect schema of %v: %w", t, err)
	}
	return b, nil
}

func recursive(t reflect.Type, seen map[reflect.Type]bool) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return recursive(t.Elem(), seen)
	case reflect.Struct:
		if seen[t] {
			return true
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			if recursive(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

// finalSchema is FinalResponse's argument schema, reflected once.
var finalSchema = func() json.RawMessage {
	b, err := Reflect(FinalResponse{})
	if err != nil {
		panic(err) // a programming error in FinalResponse itself
	}
	return b
}()
