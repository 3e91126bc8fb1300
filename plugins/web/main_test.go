package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// site is an https test server on loopback, which the production guard
// refuses: hooks() lets a fetcher reach exactly this server's address.
type site struct {
	*httptest.Server
	conns atomic.Int64 // TCP connections accepted
	addr  netip.AddrPort
}

func newSite(t *testing.T, h http.Handler) *site {
	t.Helper()
	s := &site{Server: httptest.NewUnstartedServer(h)}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	// A refused or untrusted client makes the server log handshake errors.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	t.Cleanup(s.Close)
	s.addr = netip.MustParseAddrPort(s.Listener.Addr().String())
	return s
}

// hooks reach this site and resolve the test names, nothing else.
func (s *site) hooks() hooks {
	h := s.guardless()
	h.allow = []netip.AddrPort{s.addr}
	return h
}

// guardless trusts the site's certificate and resolves the test names, with
// the production guard: no address is allowed.
func (s *site) guardless() hooks {
	return hooks{
		roots:  s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs,
		lookup: fakeDNS,
	}
}

// url is the site's URL for path.
func (s *site) url(path string) string { return s.URL + path }

// fakeDNS stands for the resolver: tests never reach real DNS.
func fakeDNS(_ context.Context, host string) ([]netip.Addr, error) {
	names := map[string][]string{
		"example.com":   {"127.0.0.1"}, // the name in httptest's certificate
		"evil.test":     {"127.0.0.1"},
		"evil6.test":    {"::1"},
		"mapped.test":   {"::ffff:127.0.0.1"},
		"nat64.test":    {"64:ff9b::7f00:1"},
		"private.test":  {"192.168.1.1"},
		"metadata.test": {"169.254.169.254"},
		"twofaced.test": {"10.0.0.1", "127.0.0.1"},
	}
	var addrs []netip.Addr
	for _, a := range names[host] {
		addrs = append(addrs, netip.MustParseAddr(a))
	}
	if len(addrs) == 0 {
		return nil, errors.New("no such host")
	}
	return addrs, nil
}

// server is the plugin with env as its settings (unset when absent).
func server(t *testing.T, h hooks, env map[string]string) pluginpb.PluginServer {
	t.Helper()
	for _, k := range []string{"MAX_BYTES", "TIMEOUT", "MAX_CHARS"} {
		key := envPrefix + k
		t.Setenv(key, env[k])
		if _, ok := env[k]; !ok {
			os.Unsetenv(key)
		}
	}
	return newPlugin(h).Server()
}

func call(t *testing.T, s pluginpb.PluginServer, args string) (fetchResult, string) {
	t.Helper()
	r, err := s.Call(context.Background(), &pluginpb.CallRequest{Tool: "web_fetch", Args: []byte(args)})
	if err != nil {
		t.Fatalf("%s: %v", args, err)
	}
	var res fetchResult
	if r.Error == "" {
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatalf("%s: result %s: %v", args, r.Result, err)
		}
	}
	return res, r.Error
}

func fetchArgsFor(u string) string { return fmt.Sprintf(`{"url":%q}`, u) }

func TestDescribe(t *testing.T) {
	d, err := server(t, hooks{}, nil).Describe(context.Background(), &pluginpb.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "web" || d.Version != "1.0.0" || len(d.SettingProblems) != 0 || len(d.Contexts) != 0 {
		t.Errorf("describe: %v", d)
	}
	if len(d.Tools) != 1 || d.Tools[0].Name != "web_fetch" || d.Tools[0].NeedsApproval {
		t.Fatalf("tools: %v", d.Tools)
	}
	var schema struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Type    string `json:"type"`
			Default any    `json:"default"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(d.Tools[0].ArgsSchema, &schema); err != nil ||
		!reflect.DeepEqual(schema.Required, []string{"url"}) ||
		schema.Properties["extract"].Type != "boolean" || schema.Properties["extract"].Default != true {
		t.Errorf("schema: %s", d.Tools[0].ArgsSchema)
	}
	type setting struct {
		Key, Default     string
		Required, Secret bool
	}
	var got []setting
	for _, s := range d.Settings {
		got = append(got, setting{s.Key, s.Default, s.Required, s.Secret})
	}
	want := []setting{{"MAX_BYTES", "1048576", false, false}, {"TIMEOUT", "15s", false, false}, {"MAX_CHARS", "20000", false, false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("settings %+v, want %+v", got, want)
	}
}

func TestBadSettings(t *testing.T) {
	s := server(t, hooks{}, map[string]string{"MAX_BYTES": "0"})
	if _, e := call(t, s, fetchArgsFor("https://example.org/")); !strings.Contains(e, "MMCP_PLUGIN_WEB_MAX_BYTES must be a positive number") {
		t.Errorf("MAX_BYTES=0: %q", e)
	}
	s = server(t, hooks{}, map[string]string{"TIMEOUT": "-1s"})
	if _, e := call(t, s, fetchArgsFor("https://example.org/")); !strings.Contains(e, "MMCP_PLUGIN_WEB_TIMEOUT must be a positive duration") {
		t.Errorf("TIMEOUT=-1s: %q", e)
	}
	s = server(t, hooks{}, map[string]string{"TIMEOUT": "soon"})
	d, _ := s.Describe(context.Background(), &pluginpb.DescribeRequest{})
	if len(d.SettingProblems) != 1 || !strings.Contains(d.SettingProblems[0], "MMCP_PLUGIN_WEB_TIMEOUT") {
		t.Errorf("TIMEOUT=soon: %q", d.SettingProblems)
	}
}
