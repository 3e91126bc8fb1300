package redact

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		// Nothing to mask: unchanged, byte for byte.
		{"", ""},
		{"http://127.0.0.1:9091/transmission/rpc", "http://127.0.0.1:9091/transmission/rpc"},
		{"https://api.themoviedb.org/3?language=fr-FR&page=2", "https://api.themoviedb.org/3?language=fr-FR&page=2"},
		{"Europe/Paris", "Europe/Paris"},
		{"bob@example.com", "bob@example.com"},             // not a URL
		{"user:pass@nas:9091", "user:pass@nas:9091"},       // no "//": not taken for a URL
		{"http://@host/", "http://@host/"},                 // empty userinfo
		{"http://user:@host/", "http://user:@host/"},       // empty password
		{"http://h/?apikey=&x=1", "http://h/?apikey=&x=1"}, // empty value
		{"http://h/?apikey", "http://h/?apikey"},
		{"http://h/a@b", "http://h/a@b"}, // an @ in the path is no userinfo
		{"1http://u:p@h/", "1http://u:p@h/"},

		// Userinfo.
		{"http://user:pass@host:9091/transmission/rpc", "http://user:***@host:9091/transmission/rpc"},
		{"http://user:p%40ss@host/", "http://user:***@host/"},
		{"http://u:p@ss@host/", "http://u:***@host/"}, // the userinfo ends at the last @
		{"https://ghp_token@github.com/x", "https://***@github.com/x"},
		{"//u:pw@host/", "//u:***@host/"},
		{"HTTP://u:pw@host", "HTTP://u:***@host"},
		{"http://u:pw@host:bad/", "http://u:***@host:bad/"}, // does not parse, masked all the same
		{"http://u:pw@h/%zz", "http://u:***@h/%zz"},
		{"http://u:pw@h?x=1", "http://u:***@h?x=1"},
		{"http://u:pw@h#frag", "http://u:***@h#frag"},

		// Query.
		{"http://radarr:7878/?apikey=SECRET", "http://radarr:7878/?apikey=***"},
		{"http://h/?x=1&api_key=S&y=2", "http://h/?x=1&api_key=***&y=2"},
		{"http://h/?X-Api-Key=S", "http://h/?X-Api-Key=***"},
		{"http://h/?api%4Bey=S", "http://h/?api%4Bey=***"}, // the name unescaped
		{"http://h/?a=1;token=S", "http://h/?a=1;token=***"},
		{"http://h/?access_token=S&refresh_token=T", "http://h/?access_token=***&refresh_token=***"},
		{"http://h/?PASSWORD=S&passwd=T&user=bob", "http://h/?PASSWORD=***&passwd=***&user=bob"},
		{"http://h/?X-Amz-Signature=S&X-Amz-Credential=C&sig=G", "http://h/?X-Amz-Signature=***&X-Amz-Credential=***&sig=***"},
		{"http://h/?auth=S&session=T&secret=U", "http://h/?auth=***&session=***&secret=***"},
		{"http://h/?key=a=b", "http://h/?key=***"},
		{"http://h/?key=S#key=F", "http://h/?key=***#key=F"}, // the fragment is kept
		{"http://h/?&&key=S&", "http://h/?&&key=***&"},
		{"http://u:pw@h/?apikey=SECRET", "http://u:***@h/?apikey=***"},
	}
	for _, tc := range tests {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := URL(tc.want); got != tc.want {
			t.Errorf("URL(%q) = %q, want it unchanged (idempotent)", tc.want, got)
		}
	}
}

func TestSecrets(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"http://h/", nil},
		{"http://u:pw@h/?apikey=SECRET&x=1", []string{"pw", "SECRET"}},
		{"http://u:p%40ss@h/", []string{"p%40ss", "p@ss"}},
		{"http://h/?token=a+b%2Bc", []string{"a+b%2Bc", "a b+c", "a+b+c"}},
		{"https://tok@h/", []string{"tok"}},
	}
	for _, tc := range tests {
		if got := Secrets(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Secrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestError(t *testing.T) {
	_, parseErr := url.Parse("http://h:bad/?apikey=SECRET")
	dialErr := &url.Error{Op: "Get", URL: "http://u:pw@h/?token=SECRET", Err: &net.OpError{Op: "dial", Err: errors.New("refused")}}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"parse", parseErr, `parse "http://h:bad/?apikey=***": invalid port ":bad" after host`},
		{"wrapped", errors.Join(errors.New("Radarr"), dialErr), "Radarr\nGet \"http://u:***@h/?token=***\": dial: refused"},
		{"nothing to mask", &url.Error{Op: "Get", URL: "http://h/", Err: http.ErrHandlerTimeout}, `Get "http://h/": http: Handler timeout`},
		{"no url.Error", errors.New("plain"), "plain"},
	}
	for _, tc := range tests {
		got := Error(tc.err)
		if got.Error() != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		var ue *url.Error
		if !errors.Is(got, tc.err) || (errors.As(tc.err, &ue) && !errors.As(got, &ue)) {
			t.Errorf("%s: the masked error lost its chain", tc.name)
		}
	}
	if Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
}

// FuzzURL: URL never panics, is idempotent, and leaves no credential in what
// net/url reads from its result, while keeping the host, path and fragment.
func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"http://user:pass@host:9091/transmission/rpc",
		"http://radarr:7878/?apikey=SECRET",
		"https://tok@h/?a=1;token=x&sig=%zz#key=f",
		"//u:p@h@i/x?pass",
		"http://u:pw@host:bad/",
		"mailto:bob@example.com",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := URL(in)
		if again := URL(out); again != out {
			t.Fatalf("URL(%q) = %q, but URL of that = %q", in, out, again)
		}
		if len(Secrets(in)) == 0 && out != in {
			t.Fatalf("URL(%q) = %q, yet Secrets found nothing to mask", in, out)
		}
		u, err := url.Parse(in)
		if err != nil {
			return
		}
		m, err := url.Parse(out)
		if err != nil {
			t.Fatalf("URL(%q) = %q, which no longer parses: %v", in, out, err)
		}
		if m.Scheme != u.Scheme || m.Host != u.Host || m.Path != u.Path || m.Opaque != u.Opaque || m.Fragment != u.Fragment {
			t.Fatalf("URL(%q) = %q changed more than credentials", in, out)
		}
		if u.User != nil {
			if p, ok := u.User.Password(); ok && p != "" {
				if mp, _ := m.User.Password(); mp != Mask || m.User.Username() != u.User.Username() {
					t.Fatalf("URL(%q) = %q: userinfo %q", in, out, m.User)
				}
			} else if !ok && u.User.Username() != "" && m.User.Username() != Mask {
				t.Fatalf("URL(%q) = %q: user %q", in, out, m.User.Username())
			}
		}
		q, _ := url.ParseQuery(m.RawQuery) // keeps what parses
		for name, values := range q {
			for _, v := range values {
				// name is unescaped already: secretName would unescape it twice.
				if secretName(url.QueryEscape(name)) && v != "" && v != Mask {
					t.Fatalf("URL(%q) = %q: %s=%q", in, out, name, v)
				}
			}
		}
		if len(Secrets(in)) > 0 && !strings.Contains(out, Mask) {
			t.Fatalf("URL(%q) = %q: no mask for %q", in, out, Secrets(in))
		}
	})
}
