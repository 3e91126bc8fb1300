package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// countingReader is a request body that notes how much of it was read.
type countingReader struct {
	r    io.Reader
	read int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

// TestMCPBodyLimit: a POST to /mcp over MaxBodyBytes is refused with 413,
// as everywhere else in the API, without the daemon reading it whole: not
// at all when its length is declared, at most the limit when it is chunked.
func TestMCPBodyLimit(t *testing.T) {
	var api *server.Server
	startWith(t, options{configure: func(_ *store.Store, _ *loop.Runner, s *server.Server) { api = s }})
	h := api.Handler()
	t.Cleanup(api.CloseMCP)
	const size = 2 << 20
	for _, declared := range []bool{true, false} {
		body := &countingReader{r: strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"` + strings.Repeat("a", size) + `"}}`)}
		r := httptest.NewRequest(http.MethodPost, "/mcp", body)
		r.Host = "127.0.0.1"
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.ContentLength = -1
		if declared {
			r.ContentLength = int64(size + 100)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("declared %v: %d %s", declared, w.Code, w.Body)
		}
		var got server.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.Error.Code != "body_too_large" {
			t.Errorf("declared %v: not the API's error: %s", declared, w.Body)
		}
		limit := 0 // a declared length is refused before reading
		if !declared {
			limit = server.MaxBodyBytes + 64<<10 // one buffer past the limit
		}
		if body.read > limit {
			t.Errorf("declared %v: read %d bytes of the body", declared, body.read)
		}
	}
}
