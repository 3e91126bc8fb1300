package page

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestOwns(t *testing.T) {
	p := New()
	for _, c := range []struct {
		method, path string
		want         bool
	}{
		{"GET", "/", true}, {"HEAD", "/", true}, {"GET", "/page/app.js", true}, {"GET", "/page/app.css", true},
		{"POST", "/", false}, {"GET", "/page/", false}, {"GET", "/page/index.html", false}, {"GET", "/v1/chat", false},
		{"GET", "/page/../v1/tools", false}, {"DELETE", "/page/app.js", false},
	} {
		if got := p.Owns(httptest.NewRequest(c.method, c.path, nil)); got != c.want {
			t.Errorf("Owns(%s %s) = %v, want %v", c.method, c.path, got, c.want)
		}
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest("HEAD", "/page/app.js", nil))
	if w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Security-Policy") == "" {
		t.Errorf("HEAD: %d, %d bytes, %v", w.Code, w.Body.Len(), w.Header())
	}
}

// TestNoHTMLFromText holds the page's own code to its rule: text from the
// model, tools and sessions reaches the page as text nodes only. The browser
// tests show it for one answer; this keeps every later change to it.
func TestNoHTMLFromText(t *testing.T) {
	for _, name := range []string{"static/app.js", "static/index.html"} {
		b, err := files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "DOMParser", "createContextualFragment", "srcdoc"} {
			if strings.Contains(src, bad) {
				t.Errorf("%s uses %s", name, bad)
			}
		}
		// No inline handlers or scripts in the HTML: the CSP refuses them.
		if strings.HasSuffix(name, ".html") {
			if m := regexp.MustCompile(`(?i)<script>|\son[a-z]+=|style=|javascript:|https?://`).FindString(src); m != "" {
				t.Errorf("%s has %q", name, m)
			}
		}
	}
}

func TestAssetsAreServedWithTheirTypes(t *testing.T) {
	p := New()
	for path, typ := range map[string]string{"/": "text/html", "/page/app.js": "text/javascript", "/page/app.css": "text/css", "/page/icon.svg": "image/svg+xml"} {
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), typ) || w.Header().Get("ETag") == "" {
			t.Errorf("%s: %d %v", path, w.Code, w.Header())
		}
	}
}
