// Command mcpserver is a small MCP server over stdio for mmcpd's tests: the
// cases the npm servers cannot show on demand (a crash mid-call, a call that
// hangs, a tool list that changes, an image).
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type textArgs struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

type empty struct{}

type sizeArgs struct {
	Bytes int `json:"bytes" jsonschema:"how many bytes of text to return"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func main() {
	server := mcp.NewServer(&mcp.Implementation{Name: "mmcp-test-server", Version: "1.2.3"}, nil)
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}

	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Echo the text back", Annotations: readOnly},
		func(_ context.Context, _ *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
			return text("echo: " + in.Text), nil, nil
		})
	// Not read-only: needs approval unless trusted.
	mcp.AddTool(server, &mcp.Tool{Name: "write-note", Description: "Write a note"},
		func(_ context.Context, _ *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
			return text("noted: " + in.Text), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "env", Description: "The server's environment, one variable a line", Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			env := os.Environ()
			sort.Strings(env)
			return text(strings.Join(env, "\n")), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "crash", Description: "Exit in the middle of the call", Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	var mu sync.Mutex
	cancelled := "none"
	mcp.AddTool(server, &mcp.Tool{Name: "hang", Description: "Never answer; note whether the call was cancelled", Annotations: readOnly},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			cancelled = "waiting"
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			cancelled = "cancelled: " + ctx.Err().Error()
			mu.Unlock()
			return nil, nil, ctx.Err()
		})
	mcp.AddTool(server, &mcp.Tool{Name: "last-cancel", Description: "What became of the last hang call", Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			return text(cancelled), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "picture", Description: "An image, structured content and a failure flag", Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{
				Content: []mcp.Content{
					&mcp.TextContent{Text: "a red dot"},
					&mcp.ImageContent{MIMEType: "image/png", Data: []byte("0123456789")},
				},
				StructuredContent: map[string]any{"width": 1, "height": 1},
			}, nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "fail", Description: "A tool error", Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			r := text("the thing is not there")
			r.IsError = true
			return r, nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "grow", Description: "Add the tool late_tool (the list changes)", Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(server, &mcp.Tool{Name: "late_tool", Description: "Added by grow", Annotations: readOnly},
				func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
					return text("late and here"), nil, nil
				})
			return text("grown"), nil, nil
		})
	// A result of any size, to show a large one cut and an oversized one
	// refused.
	mcp.AddTool(server, &mcp.Tool{Name: "big", Description: "A text result of the given size", Annotations: readOnly},
		func(_ context.Context, _ *mcp.CallToolRequest, in sizeArgs) (*mcp.CallToolResult, any, error) {
			return text(strings.Repeat("x", in.Bytes)), nil, nil
		})
	// A message that never ends: what a hostile server can write on stdout.
	mcp.AddTool(server, &mcp.Tool{Name: "endless", Description: "Write one JSON-RPC message that never ends", Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			chunk := []byte(strings.Repeat("y", 64<<10))
			if _, err := os.Stdout.WriteString(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"`); err != nil {
				os.Exit(4)
			}
			for {
				if _, err := os.Stdout.Write(chunk); err != nil {
					os.Exit(4) // the client stopped reading
				}
			}
		})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcpserver:", err)
		os.Exit(1)
	}
}
