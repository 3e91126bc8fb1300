package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestErrorsMaskURLCredentials: the credentials a URL carries (a redirect's
// signed link, a user's password) are masked in the errors the model reads.
func TestErrorsMaskURLCredentials(t *testing.T) {
	const token = "signed-7e21a9"
	mux := http.NewServeMux()
	mux.HandleFunc("/to-signed", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://192.168.1.1/file?X-Amz-Signature="+token, http.StatusFound)
	})
	mux.HandleFunc("/gone", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "gone", http.StatusGone) })
	s := newSite(t, mux)
	srv := server(t, s.hooks(), nil)
	withUser := strings.Replace(s.url("/gone"), "https://", "https://bob:"+token+"@", 1)

	tests := []struct{ name, url, want string }{
		{"redirect", s.url("/to-signed"), "web_fetch refuses https://192.168.1.1/file?X-Amz-Signature=***, the redirect from " + s.url("/to-signed")},
		{"status", s.url("/gone") + "?access_token=" + token, s.url("/gone") + "?access_token=*** answered 410 Gone"},
		{"password", withUser, strings.Replace(s.url("/gone"), "https://", "https://bob:***@", 1) + " answered 410 Gone"},
		{"not a URL", "https://h:bad/?token=" + token, `"https://h:bad/?token=***" is not a URL: parse "https://h:bad/?token=***": invalid port`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, e := call(t, srv, fetchArgsFor(tc.url))
			if strings.Contains(e, token) || !strings.HasPrefix(e, tc.want) {
				t.Errorf("%q\nwant it to start with %q, without the credential", e, tc.want)
			}
		})
	}
}
