package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
)

// Input rules on top of encoding/json, which is lenient where this API must
// not be: it matches keys case-insensitively ({"MESSAGE": ...} fills
// Message), keeps the last of duplicate keys (a proxy reading the first would
// see another request), and turns a lone UTF-16 surrogate escape ("\ud800")
// into U+FFFD without a word.

// checkObject holds a JSON object body to the exact field names of v, a
// pointer to the struct it was decoded into: each key once, spelt as the
// struct's json tag, no lone surrogate escape in any value, and no control
// characters in any string field.
func checkObject(body []byte, v any) error {
	fields := jsonFields(reflect.TypeOf(v).Elem())
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("request body must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("reading a key: %w", err)
		}
		key, _ := tok.(string) // an object's keys are strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("reading %q: %w", key, err)
		}
		if _, ok := fields[key]; !ok {
			return unknownField(key, fields)
		}
		if seen[key] {
			return fmt.Errorf("field %q appears more than once", key)
		}
		seen[key] = true
		if esc, ok := loneSurrogate(raw); ok {
			return fmt.Errorf("%s holds a lone UTF-16 surrogate escape (%s); JSON text must be valid Unicode", key, esc)
		}
	}
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		name, ok := jsonName(rv.Type().Field(i))
		if f := rv.Field(i); ok && f.Kind() == reflect.String {
			if err := plainText(name, f.String()); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonFields maps each json name of a struct's fields to the field's index.
func jsonFields(t reflect.Type) map[string]int {
	fields := map[string]int{}
	for i := range t.NumField() {
		if name, ok := jsonName(t.Field(i)); ok {
			fields[name] = i
		}
	}
	return fields
}

// jsonName is the key encoding/json writes for f; false for fields it skips.
func jsonName(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch {
	case name == "-" || !f.IsExported():
		return "", false
	case name == "":
		return f.Name, true
	}
	return name, true
}

func unknownField(key string, fields map[string]int) error {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Errorf("unknown field %q (field names are case-sensitive: did you mean %q?)", key, name)
		}
	}
	return fmt.Errorf("unknown field %q", key)
}

// loneSurrogate finds a \uXXXX escape in raw JSON that is half of a UTF-16
// pair without its other half. Backslashes occur only inside strings in
// valid JSON, so the bytes can be scanned without parsing.
func loneSurrogate(raw []byte) (string, bool) {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character: \\ and \" must not start another escape
		r, ok := hexEscape(raw, i-1)
		if !ok {
			continue
		}
		i += 4
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if lo, ok := hexEscape(raw, i+1); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 6 // a pair: one character
				continue
			}
			return string(raw[i-5 : i+1]), true
		case r >= 0xDC00 && r <= 0xDFFF:
			return string(raw[i-5 : i+1]), true
		}
	}
	return "", false
}

// hexEscape reads the \uXXXX escape at raw[at:], if there is one.
func hexEscape(raw []byte, at int) (rune, bool) {
	if at+6 > len(raw) || raw[at] != '\\' || raw[at+1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[at+2:at+6]), 16, 16)
	return rune(n), err == nil
}

// plainText refuses control characters other than tab, newline and carriage
// return (NUL, escape sequences, C1 codes): none belongs in a message, an id
// or a title, and they reach logs, terminals and the session store.
func plainText(field, s string) error {
	i := strings.IndexFunc(s, func(r rune) bool {
		return unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r'
	})
	if i < 0 {
		return nil
	}
	r := []rune(s[i:])[0]
	return fmt.Errorf("%s must not contain control characters other than tab, newline and carriage return (found %U)", field, r)
}

// blank reports whether s shows nothing: only white space and invisible
// format characters (zero-width space and joiners, word joiner, BOM, ...).
func blank(s string) bool {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.Is(unicode.Cf, r)
	}) == ""
}
