// Package redact masks the credentials a URL can carry, so that the URL can
// be shown, logged or put in a message the model reads.
package redact

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Mask stands for each credential taken out of a URL. It is valid both in a
// userinfo and in a query, so a masked URL still parses, and masking it again
// changes nothing.
const Mask = "***"

// secretNames mark a query parameter as a credential when its name, unescaped
// and lower-cased, contains one of them: key (apikey, api_key, X-Api-Key),
// token, secret, pass (password, passwd), auth, sig (signature,
// X-Amz-Signature), credential, session. Substrings catch the many spellings
// services use; the cost, masking a harmless ?keyword=, is only cosmetic.
var secretNames = []string{"key", "token", "secret", "pass", "auth", "sig", "credential", "session"}

// URL returns s with its credentials replaced by Mask:
//   - the password of its userinfo; the user name is kept, since it tells
//     which account is used (http://user:***@host);
//   - a user name given without a password, which is how tokens are often
//     passed (https://***@host);
//   - the value of every query parameter whose name looks secret (see
//     secretNames); parameters are split at & and at ;, as some servers do.
//
// Everything else is kept as written, and a string with nothing to mask comes
// back unchanged. It reads the text the way net/url does (fragment, then
// query, then authority) without requiring it to parse, so a URL with a bad
// port or a bad escape is masked too. Text without "//" has no userinfo to
// mask: a bare user:pass@host is not taken for a URL.
func URL(s string) string {
	return walk(s, func(string) string { return Mask })
}

// Secrets returns the parts of s that URL masks, each as written and, where
// it differs, unescaped: messages may quote either form.
func Secrets(s string) []string {
	var out []string
	walk(s, func(part string) string {
		out = append(out, part)
		// A query unescapes + to a space, a userinfo does not.
		for _, unescape := range []func(string) (string, error){url.QueryUnescape, url.PathUnescape} {
			if u, err := unescape(part); err == nil && !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
		return part
	})
	return out
}

// Error returns err with the URL quoted by a *url.Error in its chain masked
// (its message is `Op "URL": Err`, the whole URL with its query). err still
// matches errors.Is and errors.As as before. It returns err itself when there
// is nothing to mask.
func Error(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	masked := URL(ue.URL)
	if masked == ue.URL {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), strconv.Quote(ue.URL), strconv.Quote(masked))
	return &maskedError{msg: msg, err: err}
}

// maskedError is an error shown with a masked message; it unwraps to the
// original, so errors.Is and errors.As see through it.
type maskedError struct {
	msg string
	err error
}

func (e *maskedError) Error() string { return e.msg }
func (e *maskedError) Unwrap() error { return e.err }

// walk calls replace with each credential of s and puts what it returns in
// the credential's place.
func walk(s string, replace func(string) string) string {
	rest, frag, hasFrag := strings.Cut(s, "#")
	head, query, hasQuery := strings.Cut(rest, "?")
	var b strings.Builder
	b.WriteString(userinfo(head, replace))
	if hasQuery {
		b.WriteByte('?')
		b.WriteString(params(query, replace))
	}
	if hasFrag {
		b.WriteByte('#')
		b.WriteString(frag)
	}
	return b.String()
}

// userinfo handles the part before the query: an authority follows "//" at
// the start or right after a scheme, and ends at the next '/'; its userinfo
// ends at its last '@'.
func userinfo(head string, replace func(string) string) string {
	i := strings.Index(head, "//")
	if i < 0 || (i > 0 && (head[i-1] != ':' || !isScheme(head[:i-1]))) {
		return head
	}
	start := i + 2
	end := len(head)
	if j := strings.IndexByte(head[start:], '/'); j >= 0 {
		end = start + j
	}
	at := strings.LastIndexByte(head[start:end], '@')
	if at < 0 {
		return head
	}
	user, pass, hasPass := strings.Cut(head[start:start+at], ":")
	var masked string
	switch {
	case hasPass && pass != "":
		masked = user + ":" + replace(pass)
	case !hasPass && user != "":
		masked = replace(user)
	default:
		return head // an empty password or user hides nothing
	}
	return head[:start] + masked + head[start+at:]
}

// isScheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, +, - or .).
func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// params handles a query: the value of each name=value pair whose name looks
// secret is replaced.
func params(query string, replace func(string) string) string {
	var b strings.Builder
	for query != "" {
		var pair string
		if i := strings.IndexAny(query, "&;"); i >= 0 {
			pair, query = query[:i+1], query[i+1:] // the separator stays with its pair
		} else {
			pair, query = query, ""
		}
		sep := ""
		if last := pair[len(pair)-1]; last == '&' || last == ';' {
			pair, sep = pair[:len(pair)-1], string(last)
		}
		if name, value, ok := strings.Cut(pair, "="); ok && value != "" && secretName(name) {
			pair = name + "=" + replace(value)
		}
		b.WriteString(pair)
		b.WriteString(sep)
	}
	return b.String()
}

// secretName reports whether a query parameter's name looks like a
// credential's.
func secretName(name string) bool {
	if u, err := url.QueryUnescape(name); err == nil {
		name = u
	}
	name = strings.ToLower(name)
	for _, s := range secretNames {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}
