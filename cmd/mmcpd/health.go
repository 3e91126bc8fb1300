package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/mmcpd/mmcpd/pkg/config"
)

// health asks a running daemon's /healthz and succeeds only on its "ok". It
// exists for container health checks: the runtime image has no shell and no
// curl, and /healthz needs neither a token nor an allowed Host.
//
// Every failure is exit 1, never the usage exit 2: Docker reads 1 as
// unhealthy and reserves 2.
func health(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "daemon address (default: MMCP_LISTEN_ADDR)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *addr == "" {
		cfg, err := config.Load()
		if err != nil {
			return fmt.Errorf("invalid configuration:\n%w", err)
		}
		*addr = cfg.ListenAddr
	}
	url := reachable("http://"+*addr) + "/healthz"
	resp, err := (&http.Client{Timeout: *timeout}).Get(url)
	if err != nil {
		return fmt.Errorf("no healthy daemon at %s: %w", *addr, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.Status != "ok" {
		return errors.New("unhealthy: " + url + " answered " + resp.Status)
	}
	_, err = fmt.Fprintln(stdout, "ok")
	return err
}
