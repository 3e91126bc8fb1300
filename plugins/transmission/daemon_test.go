package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/internal/needs"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/plugins/internal/torrenttest"
)

// The tests in this file run a real transmission-daemon (Debian package
// transmission-daemon), on loopback only, with DHT, LPD, PEX, uTP and port
// mapping off: nothing reaches the internet.

const (
	daemonUser = "mmcp"
	daemonPass = "daemon-pass-123"
)

type daemon struct {
	url         string
	downloadDir string
}

// startDaemon runs transmission-daemon in the foreground with its own config
// folder and ports, waits until its RPC answers, and kills it at cleanup.
func startDaemon(t *testing.T) daemon {
	t.Helper()
	bin := needs.Program(t, "transmission-daemon", "transmission-daemon")
	root := t.TempDir()
	dirs := map[string]string{}
	for _, d := range []string{"config", "downloads", "incomplete"} {
		dirs[d] = filepath.Join(root, d)
		if err := os.Mkdir(dirs[d], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rpcPort, peerPort := torrenttest.FreePort(t), torrenttest.FreePort(t)
	settings := map[string]any{
		"rpc-enabled":                 true,
		"rpc-port":                    rpcPort,
		"rpc-bind-address":            "127.0.0.1",
		"rpc-authentication-required": true,
		"rpc-username":                daemonUser,
		"rpc-password":                daemonPass, // the daemon hashes it when it saves
		"rpc-whitelist-enabled":       true,
		"rpc-whitelist":               "127.0.0.1",
		"rpc-host-whitelist-enabled":  false,
		"download-dir":                dirs["downloads"],
		"incomplete-dir":              dirs["incomplete"],
		"incomplete-dir-enabled":      true,
		"watch-dir-enabled":           false,
		"dht-enabled":                 false,
		"lpd-enabled":                 false,
		"pex-enabled":                 false,
		"utp-enabled":                 false,
		"port-forwarding-enabled":     false,
		"peer-port":                   peerPort,
		"peer-port-random-on-start":   false,
		"bind-address-ipv4":           "127.0.0.1",
		"bind-address-ipv6":           "::1",
		"blocklist-enabled":           false,
		"start-added-torrents":        true,
		"message-level":               1,
	}
	b, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirs["config"], "settings.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "-f", "-g", dirs["config"], "-p", strconv.Itoa(rpcPort))
	// The daemon fetches .torrent URLs itself, with libcurl: keep any proxy
	// away from the test's loopback server.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasSuffix(strings.ToLower(strings.SplitN(kv, "=", 2)[0]), "_proxy")
	})
	var out torrenttest.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting transmission-daemon: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("transmission-daemon output:\n%s", out.String())
		}
	})

	url := fmt.Sprintf("http://127.0.0.1:%d/transmission/rpc", rpcPort)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("transmission-daemon exited before its RPC answered (%v):\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("transmission-daemon's RPC did not answer at %s within 20s:\n%s", url, out.String())
		}
	}
	return daemon{url: url, downloadDir: dirs["downloads"]}
}

func TestRealDaemon(t *testing.T) {
	d := startDaemon(t)

	const name = "mmcp-test.bin"
	data := make([]byte, 40_000) // three pieces, the last one short
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	// The data is already where the torrent will download to: once started,
	// Transmission verifies it and seeds, with no peer involved.
	if err := os.WriteFile(filepath.Join(d.downloadDir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	torrentFile, _ := torrenttest.MakeTorrent(name, data)
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/files/"+name+".torrent" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-bittorrent")
		w.Write(torrentFile)
	}))
	defer files.Close()

	t.Setenv(envURL, d.url)
	t.Setenv(envUser, daemonUser)
	t.Setenv(envPass, daemonPass)
	s := newPlugin(15 * time.Second).Server()

	var added addResult
	realCall(t, s, "transmission_add", fmt.Sprintf(`{"source":%q,"download_dir":%q,"paused":true}`, files.URL+"/files/"+name+".torrent", d.downloadDir), &added)
	if added.Result != "added" || added.Name != name || !added.Paused || added.ID <= 0 {
		t.Fatalf("add: %+v", added)
	}
	id := added.ID

	var again addResult
	realCall(t, s, "transmission_add", fmt.Sprintf(`{"source":%q}`, files.URL+"/files/"+name+".torrent"), &again)
	if again != (addResult{Result: "already present", ID: id, Name: name}) {
		t.Errorf("add again: %+v", again)
	}

	one := listOne(t, s, "paused")
	if one.Name != name || one.ID != id || one.Status != "stopped" || one.Dir != d.downloadDir || one.Size != "40.0 kB" {
		t.Errorf("paused torrent: %+v", one)
	}
	if got := listAll(t, s, "downloading"); len(got.Torrents) != 0 {
		t.Errorf("downloading: %+v", got)
	}

	var acted actionResult
	realCall(t, s, "transmission_resume", fmt.Sprintf(`{"ids":[%d]}`, id), &acted)
	if want := (actionResult{Done: "resumed", Torrents: []torrentRef{{ID: id, Name: name}}}); !equalAction(acted, want) {
		t.Errorf("resume: %+v", acted)
	}
	// Verifying 40 kB takes a moment; then it seeds, complete.
	waitFor(t, "the torrent to seed", func() bool {
		v := listAll(t, s, "seeding")
		return len(v.Torrents) == 1 && v.Torrents[0].Status == "seeding"
	})
	if one := listOne(t, s, "done"); one.Percent != 100 || one.ETA != "done" || one.Error != "" {
		t.Errorf("done torrent: %+v", one)
	}
	c, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "downloads"})
	if err != nil || c.Text != "nothing downloading; 1 seeding" {
		t.Errorf("downloads context: %v, %v", c, err)
	}

	realCall(t, s, "transmission_pause", fmt.Sprintf(`{"ids":[%d]}`, id), &acted)
	if acted.Done != "paused" {
		t.Errorf("pause: %+v", acted)
	}
	waitFor(t, "the torrent to stop", func() bool { return listOne(t, s, "all").Status == "stopped" })

	want := "Transmission has no torrent with id 999 (transmission_list shows the ids); nothing was paused"
	if r := callTool(t, s, "transmission_pause", fmt.Sprintf(`{"ids":[%d,999]}`, id)); r.Error != want {
		t.Errorf("pause unknown id: %q\nwant %q", r.Error, want)
	}

	var magnet addResult
	realCall(t, s, "transmission_add", `{"source":"magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567&dn=mmcp-magnet","paused":true}`, &magnet)
	if magnet.Result != "added" || magnet.Name != "mmcp-magnet" {
		t.Errorf("add magnet: %+v", magnet)
	}

	realCall(t, s, "transmission_remove", fmt.Sprintf(`{"ids":[%d,%d],"delete_data":true}`, id, magnet.ID), &acted)
	if !acted.DataDelete || acted.Done != "removed" || len(acted.Torrents) != 2 {
		t.Errorf("remove: %+v", acted)
	}
	waitFor(t, "the data to be deleted", func() bool {
		_, err := os.Stat(filepath.Join(d.downloadDir, name))
		return os.IsNotExist(err)
	})
	if got := listAll(t, s, "all"); len(got.Torrents) != 0 || got.Totals.Torrents != 0 {
		t.Errorf("after remove: %+v", got)
	}

	r := callTool(t, s, "transmission_add", fmt.Sprintf(`{"source":%q}`, files.URL+"/files/missing.torrent"))
	if !strings.HasPrefix(r.Error, "Transmission could not add the torrent: ") || !strings.Contains(r.Error, "404") {
		t.Errorf("add a missing .torrent: %q", r.Error)
	}
}

func TestRealDaemonCredentials(t *testing.T) {
	d := startDaemon(t)
	t.Setenv(envURL, d.url)
	t.Setenv(envUser, daemonUser)
	t.Setenv(envPass, "wrong-password")
	want := "Transmission refused the credentials (401); check MMCP_PLUGIN_TRANSMISSION_USERNAME and MMCP_PLUGIN_TRANSMISSION_PASSWORD: credentials refused"
	if r := callTool(t, newPlugin(15*time.Second).Server(), "transmission_list", `{}`); r.Error != want {
		t.Errorf("wrong password: %q\nwant %q", r.Error, want)
	}

	t.Setenv(envUser, "")
	t.Setenv(envPass, "")
	want = "Transmission requires a user name and password (401); set MMCP_PLUGIN_TRANSMISSION_USERNAME and MMCP_PLUGIN_TRANSMISSION_PASSWORD: credentials refused"
	if r := callTool(t, newPlugin(15*time.Second).Server(), "transmission_list", `{}`); r.Error != want {
		t.Errorf("no credentials: %q\nwant %q", r.Error, want)
	}
}

// realCall calls a tool that must succeed and decodes its result into out.
func realCall(t *testing.T, s pluginpb.PluginServer, tool, args string, out any) {
	t.Helper()
	r := callTool(t, s, tool, args)
	if r.Error != "" {
		t.Fatalf("%s %s: %s", tool, args, r.Error)
	}
	if err := json.Unmarshal(r.Result, out); err != nil {
		t.Fatalf("%s: %v in %s", tool, err, r.Result)
	}
}

func listAll(t *testing.T, s pluginpb.PluginServer, filter string) listResult {
	t.Helper()
	var res listResult
	realCall(t, s, "transmission_list", fmt.Sprintf(`{"filter":%q}`, filter), &res)
	return res
}

func listOne(t *testing.T, s pluginpb.PluginServer, filter string) torrentView {
	t.Helper()
	res := listAll(t, s, filter)
	if len(res.Torrents) != 1 {
		t.Fatalf("list %s: want one torrent, got %+v", filter, res)
	}
	return res.Torrents[0]
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

func equalAction(a, b actionResult) bool {
	return a.Done == b.Done && a.DataDelete == b.DataDelete && slices.Equal(a.Torrents, b.Torrents)
}
