// Package page is the built-in web page: static files embedded in the binary that talk to the daemon's own JSON and SSE API.
package page

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var files embed.FS

// ContentSecurityPolicy is sent with every file of the page. Scripts and
// styles come only from the daemon's own files (no inline script, no
// eval), and the page may connect only to its own origin: even text that
// slipped into the page as HTML could neither run nor send anything away.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Prefix is where the page's files other than index.html are served.
const Prefix = "/page/"

type asset struct {
	body []byte
	typ  string
	etag string
}

// Page serves the embedded files.
type Page struct {
	assets map[string]asset // by URL path
}

// New reads the embedded files once.
func New() *Page {
	p := &Page{assets: map[string]asset{}}
	err := fs.WalkDir(files, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		a := asset{body: body, typ: contentType(name), etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		base := path.Base(name)
		if base == "index.html" {
			p.assets["/"] = a
			return nil
		}
		p.assets[Prefix+base] = a
		return nil
	})
	if err != nil {
		// The files are compiled in: failing to read them is a broken build.
		panic("page: reading the embedded files: " + err.Error())
	}
	return p
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".webmanifest":
		return "application/manifest+json"
	}
	return "application/octet-stream"
}

// Owns reports whether the request is for one of the page's files: a GET or
// HEAD of / or of a file under Prefix. Every other request is the API's.
func (p *Page) Owns(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	_, ok := p.assets[r.URL.Path]
	return ok
}

// ServeHTTP answers a request Owns accepted, with the page's security
// headers and an ETag, so a reload asks again but downloads nothing new.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a, ok := p.assets[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.typ)
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	// The files change with the binary: always ask, let the ETag answer.
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, strings.TrimPrefix(r.URL.Path, Prefix), time.Time{}, bytes.NewReader(a.body))
}
