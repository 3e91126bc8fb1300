package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mmcpd/mmcpd/pkg/mcpserver"
)

// catalog is a tool list the test changes, as plugins coming and going do.
type catalog struct {
	mu    sync.Mutex
	tools []mcpserver.Tool
}

func (c *catalog) set(tools ...mcpserver.Tool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tools = tools
}

func (c *catalog) Usable() []mcpserver.Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tools)
}

func tool(name string) mcpserver.Tool {
	return mcpserver.Tool{Name: name, Description: "the " + name + " tool",
		Schema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"additionalProperties":false}`)}
}

func names(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	slices.Sort(out)
	return out
}

// TestToolListFollowsTheDaemon: the tools listed are the usable ones as they
// are now; a listening client hears of a change without asking, and tools
// the SDK cannot serve (a schema that is not an object, the name ask) are
// left out.
func TestToolListFollowsTheDaemon(t *testing.T) {
	cat := &catalog{}
	odd := tool("odd_string")
	odd.Schema = json.RawMessage(`{"type":"string"}`)
	cat.set(tool("a_one"), odd, tool("ask"))
	h := mcpserver.New(mcpserver.Options{Tools: cat, Poll: 50 * time.Millisecond})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	t.Cleanup(h.Close)

	changed := make(chan struct{}, 10)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := names(t, cs); !slices.Equal(got, []string{"a_one", "ask"}) {
		t.Fatalf("tools = %v", got)
	}
	for len(changed) > 0 {
		<-changed
	}

	cat.set(tool("b_two"))
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/tools/list_changed within 5s of the change")
	}
	if got := names(t, cs); !slices.Equal(got, []string{"ask", "b_two"}) {
		t.Fatalf("tools after the change = %v", got)
	}
}

// TestSessionLimit: past MaxSessions open sessions a new client is refused
// with the reason; closing one makes room.
func TestSessionLimit(t *testing.T) {
	h := mcpserver.New(mcpserver.Options{MaxSessions: 2})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	t.Cleanup(h.Close)
	connect := func() (*mcp.ClientSession, error) {
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		return c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.URL, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	}
	var open []*mcp.ClientSession
	for range 2 {
		cs, err := connect()
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, cs)
	}
	if _, err := connect(); err == nil || !strings.Contains(err.Error(), "Service Unavailable") {
		t.Fatalf("a third session: %v", err)
	}
	// The open ones still work.
	if got := names(t, open[0]); !slices.Equal(got, []string{"ask"}) {
		t.Fatalf("tools = %v", got)
	}
	if err := open[0].Close(); err != nil {
		t.Fatal(err)
	}
	// The SDK forgets a closed session a moment after the DELETE.
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var cs *mcp.ClientSession
		if cs, err = connect(); err == nil {
			_ = cs.Close()
			break
		}
	}
	if err != nil {
		t.Fatalf("after closing one: %v", err)
	}
	_ = open[1].Close()
}
