package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mmcpd/mmcpd/pkg/mcpserver"
)

// mcpStdio serves MCP on stdin and stdout for clients that start their
// servers as programs (Claude Desktop): it relays to the running daemon's
// /mcp, found and authenticated as mmcpd chat does, so the daemon's one
// plugin host, sessions and approvals serve every client.
func mcpStdio(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "daemon address (default: MMCP_LISTEN_ADDR)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() != 0 {
		return usageError{errors.New("mmcpd mcp takes no arguments: it speaks MCP on stdin and stdout")}
	}
	var steps bool
	var timeout time.Duration // unused: the bridge's client has no overall limit
	c, err := clientFlags{steps: &steps, addr: addr, timeout: &timeout}.client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// stdout carries the protocol: every word for a person goes to stderr.
	b := &mcpserver.Bridge{Endpoint: c.base + "/mcp", Token: c.token,
		HTTP: &http.Client{}, // no overall limit: a turn or a listening stream may run long
		Log:  slog.New(slog.NewTextHandler(stderr, nil))}
	return b.Run(ctx, stdin, stdout)
}
