package config

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

const mask = "**********"

// Secret is a credential. Every way of printing, logging or encoding it shows
// a fixed mask, so a Secret can sit in a struct that gets logged or returned
// without leaking; only Reveal gives the value back. The mask has a fixed
// length so that it does not even tell the secret's length. An empty Secret
// prints as "" so that "not set" stays visible.
//
// Two cases are beyond any method's reach, so avoid them: fmt prints
// unexported struct fields without calling their methods, and encoding/json
// writes map keys of string kind verbatim.
//
// envconfig decodes it like any string kind, so no Set or UnmarshalText is
// needed (and adding one would change how envconfig treats the type).
type Secret string

// Reveal returns the secret value. Call it only where the value is sent to
// the service that needs it.
func (s Secret) Reveal() string { return string(s) }

// String returns the mask, or "" when the secret is empty.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return mask
}

// GoString quotes the mask, the way %#v shows any other string.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// Format masks every verb. String and GoString alone are not enough: fmt
// falls back to printing the raw string kind for verbs such as %d, which
// would print the value inside the %!d(...) error text.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'q' || (verb == 'v' && f.Flag('#')) {
		_, _ = io.WriteString(f, s.GoString())
		return
	}
	_, _ = io.WriteString(f, s.String())
}

// LogValue masks the secret when it is logged as an attribute on its own.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON masks the secret in encoding/json, including slog's JSON handler.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.String())), nil }

// MarshalText masks the secret for text encoders (map keys, YAML, TOML, ...).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
