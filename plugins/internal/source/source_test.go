package source

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		in, want, err string // err: a part of the error; empty: accepted as want
	}{
		{in: "  magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567&dn=x ", want: "magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567&dn=x"},
		{in: "MAGNET:?xt=urn:btmh:1220abcd", want: "MAGNET:?xt=urn:btmh:1220abcd"},
		{in: "https://example.org/a.torrent", want: "https://example.org/a.torrent"},
		{in: "magnet:?dn=no-hash", err: "without a torrent hash"},
		{in: "http:///a.torrent", err: "without a host"},
		{in: "/downloads/a.torrent", err: "not \"/downloads/a.torrent\""},
		{in: "bc://bt/abc", err: "must be a magnet: link or an http(s) URL"},
		{in: "http://a/1.torrent\nhttp://b/2.torrent", err: "on one line"},
		{in: "http://a b/%zz", err: "not a valid magnet link or URL"},
	}
	for _, tt := range tests {
		got, err := Check(tt.in)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("Check(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Check(%q) = %q, %v; want an error saying %q", tt.in, got, err, tt.err)
		}
	}
}
