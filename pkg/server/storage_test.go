package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
)

// fullStore opens a store whose file cannot grow: SQLite raises a page
// limit below the file's size to that size, so what fits in the pages a
// fresh database has (a session, a small turn) fits, and nothing more.
func fullStore(t *testing.T) *store.Store {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir) // the schema's pages
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = store.OpenWith(context.Background(), dir, store.Options{MaxPages: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// A turn whose answer does not fit on the disk: 507 storage_full, in JSON
// and in a stream, saying the turn ran; the turn is left failed, not
// running.
func TestStorageFull(t *testing.T) {
	huge := strings.Repeat("a film, ", 10_000)
	for _, sse := range []bool{false, true} {
		name := "json"
		if sse {
			name = "sse"
		}
		t.Run(name, func(t *testing.T) {
			var st *store.Store
			e := startWith(t, options{configure: func(_ *store.Store, _ *loop.Runner, api *server.Server) {
				st = fullStore(t)
				api.Store = st
			}}, final(huge))
			req, _ := http.NewRequest("POST", e.url+"/v1/chat", strings.NewReader(`{"message":"everything"}`))
			req.Header.Set("Content-Type", "application/json")
			if sse {
				req.Header.Set("Accept", "text/event-stream")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e2 server.ErrorBody
			if sse {
				// The stream started with 200; its last event is the error.
				i := strings.LastIndex(string(body), "event: error\ndata: ")
				if resp.StatusCode != http.StatusOK || i < 0 {
					t.Fatalf("stream: %d %s", resp.StatusCode, body)
				}
				data, _, _ := strings.Cut(string(body[i:]), "\n\n")
				_ = json.Unmarshal([]byte(strings.TrimPrefix(data, "event: error\ndata: ")), &e2)
			} else {
				if resp.StatusCode != http.StatusInsufficientStorage {
					t.Errorf("status %d, want 507: %s", resp.StatusCode, body)
				}
				_ = json.Unmarshal(body, &e2)
			}
			if e2.Error.Code != "storage_full" || e2.Error.Retryable || !strings.Contains(e2.Error.Message, "the turn ran") || !strings.Contains(e2.Error.Message, "MMCP_DATA_DIR") {
				t.Errorf("error %+v", e2.Error)
			}
			page, _, err := st.Sessions(context.Background(), "", 10)
			if err != nil || len(page) != 1 {
				t.Fatalf("sessions: %+v, %v", page, err)
			}
			turns, err := st.Turns(context.Background(), page[0].ID)
			if err != nil || len(turns) != 1 || turns[0].Status != store.TurnFailed || turns[0].Error != "the turn could not be recorded: the disk is full" {
				t.Errorf("turns: %+v, %v", turns, err)
			}
			if !strings.Contains(e.logs.String(), "storage failure") {
				t.Errorf("nothing logged:\n%s", e.logs)
			}
		})
	}
}

// The database file deleted under the server: /readyz is 503 storage_lost,
// and a chat is refused before the model is asked.
func TestStorageLost(t *testing.T) {
	e := startWith(t, options{}, ollamatest.Reply{Content: `{"thought":"t","action":"final_response","args":{"answer":"x"}}`})
	if resp, body := e.do(t, "GET", "/readyz", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz before: %d %s", resp.StatusCode, body)
	}
	if err := os.Remove(e.store.Path()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"POST", "/v1/chat", `{"message":"hi"}`},
	} {
		resp, body := e.do(t, c.method, c.path, c.body)
		var eb server.ErrorBody
		_ = json.Unmarshal(body, &eb)
		if resp.StatusCode != http.StatusServiceUnavailable || eb.Error.Code != "storage_lost" || eb.Error.Retryable || !strings.Contains(eb.Error.Message, "restart mmcpd") {
			t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode, body)
		}
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Errorf("the model was asked %d times", n)
	}
}
