package main

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
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

// The tests in this file run a real qbittorrent-nox (Debian package
// qbittorrent-nox), with its own profile folder, its WebUI on loopback, its
// peer port on the loopback interface, and DHT, PeX, LSD, UPnP/NAT-PMP and
// GeoIP lookups off: nothing reaches the internet.

const (
	daemonUser = "mmcp"
	daemonPass = "daemon-pass-123"
)

type daemon struct {
	url         string
	downloadDir string
}

// startDaemon runs qbittorrent-nox with a profile written beforehand (the
// legal notice accepted, so it never asks; a known WebUI user and
// password), waits until its WebUI answers, and kills it at cleanup.
func startDaemon(t *testing.T) daemon {
	t.Helper()
	bin := needs.Program(t, "qbittorrent-nox", "qbittorrent-nox")
	root := t.TempDir()
	profile, downloads := filepath.Join(root, "profile"), filepath.Join(root, "downloads")
	config := filepath.Join(profile, "qBittorrent", "config")
	for _, d := range []string{config, downloads} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	webPort, peerPort := torrenttest.FreePort(t), torrenttest.FreePort(t)
	// QSettings' INI format: a key's slashes after its group are written as
	// backslashes.
	conf := fmt.Sprintf(`[LegalNotice]
Accepted=true

[Preferences]
WebUI\Enabled=true
WebUI\Address=127.0.0.1
WebUI\Port=%d
WebUI\Username=%s
WebUI\Password_PBKDF2="@ByteArray(%s)"
WebUI\LocalHostAuth=true
WebUI\UseUPnP=false
Connection\ResolvePeerCountries=false
General\Locale=en

[BitTorrent]
Session\DHTEnabled=false
Session\PeXEnabled=false
Session\LSDEnabled=false
Session\Port=%d
Session\Interface=lo
Session\InterfaceName=lo
Session\InterfaceAddress=127.0.0.1
Session\DefaultSavePath=%s
Session\QueueingSystemEnabled=false

[Network]
PortForwardingEnabled=false
`, webPort, daemonUser, passwordHash(t, daemonPass), peerPort, downloads)
	if err := os.WriteFile(filepath.Join(config, "qBittorrent.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "--profile="+profile, "--webui-port="+strconv.Itoa(webPort))
	// qBittorrent fetches .torrent URLs itself: keep any proxy away from the
	// test's loopback server.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasSuffix(strings.ToLower(strings.SplitN(kv, "=", 2)[0]), "_proxy")
	})
	var out torrenttest.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting qbittorrent-nox: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(profile, "qBittorrent", "data", "logs", "qbittorrent.log"))
			t.Logf("qbittorrent-nox output:\n%s\nits log:\n%s", out.String(), log)
		}
	})

	url := fmt.Sprintf("http://127.0.0.1:%d", webPort)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/api/v2/app/version") // 403 without a login: it answers
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("qbittorrent-nox exited before its WebUI answered (%v):\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("qbittorrent-nox's WebUI did not answer at %s within 20s:\n%s", url, out.String())
		}
	}
	return daemon{url: url, downloadDir: downloads}
}

// passwordHash is the WebUI password as qBittorrent stores it:
// PBKDF2-HMAC-SHA512, 100000 iterations, a 16-byte salt and a 64-byte key,
// written "salt:key" in base64.
func passwordHash(t *testing.T, password string) string {
	t.Helper()
	salt := make([]byte, 16)
	rand.Read(salt)
	key, err := pbkdf2.Key(sha512.New, password, salt, 100000, 64)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(salt) + ":" + base64.StdEncoding.EncodeToString(key)
}

func TestRealDaemon(t *testing.T) {
	d := startDaemon(t)
	addWait = 3 * time.Second // the duplicate below is never listed
	t.Cleanup(func() { addWait = 5 * time.Second })

	const name = "mmcp-test.bin"
	data := make([]byte, 40_000) // three pieces, the last one short
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	// The data is already where the torrent will download to: once
	// started, qBittorrent verifies it and seeds, with no peer involved.
	if err := os.WriteFile(filepath.Join(d.downloadDir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	torrentFile, hash := torrenttest.MakeTorrent(name, data)
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/files/"+name+".torrent" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-bittorrent")
		w.Write(torrentFile)
	}))
	defer files.Close()
	source := files.URL + "/files/" + name + ".torrent"

	t.Setenv(envURL, d.url)
	t.Setenv(envUser, daemonUser)
	t.Setenv(envPass, daemonPass)
	s := newPlugin(15 * time.Second).Server()

	if h, err := s.Health(context.Background(), &pluginpb.HealthRequest{}); err != nil || !h.Ok {
		t.Fatalf("health: %v %v", h, err)
	}

	var added addResult
	realCall(t, s, "qbittorrent_add", fmt.Sprintf(`{"source":%q,"save_path":%q,"category":"mmcp-test","paused":true}`, source, d.downloadDir), &added)
	// Right after the add it may still be loading.
	if added.Result != "added" || added.Hash != hash || added.Name != name || (added.State != "paused" && added.State != "loading") {
		t.Fatalf("add: %+v, want hash %s", added, hash)
	}
	waitFor(t, "the torrent to be paused", func() bool { return listOne(t, s, `{}`).State == "paused" })

	// qBittorrent 4.5 takes a known torrent's URL and drops it quietly.
	var again addResult
	realCall(t, s, "qbittorrent_add", fmt.Sprintf(`{"source":%q}`, source), &again)
	if again.Result != "requested" || again.Hash != "" {
		t.Errorf("add again: %+v", again)
	}

	one := listOne(t, s, `{"filter":"paused"}`)
	if one.Hash != hash || one.Name != name || one.State != "paused" || one.Category != "mmcp-test" || one.Dir != d.downloadDir || one.Size != "39.1 KiB" {
		t.Errorf("paused torrent: %+v", one)
	}
	listOne(t, s, `{"category":"mmcp-test"}`)
	if got := listAll(t, s, `{"category":"other"}`); len(got.Torrents) != 0 {
		t.Errorf("another category: %+v", got)
	}
	if got := listAll(t, s, `{"filter":"downloading"}`); len(got.Torrents) != 0 {
		t.Errorf("downloading: %+v", got)
	}

	var acted actionResult
	realCall(t, s, "qbittorrent_resume", `{"torrents":["mmcp-test"]}`, &acted)
	want := actionResult{Done: "resumed", Torrents: []torrentRef{{Hash: hash, Name: name}}}
	if !equalAction(acted, want) {
		t.Errorf("resume: %+v", acted)
	}
	// Verifying 40 kB takes a moment; then it seeds, complete.
	waitFor(t, "the torrent to seed", func() bool {
		v := listAll(t, s, `{"filter":"seeding"}`)
		return len(v.Torrents) == 1 && v.Torrents[0].State == "seeding"
	})
	if one := listOne(t, s, `{"filter":"completed"}`); one.Percent != 100 || one.ETA != "done" {
		t.Errorf("completed torrent: %+v", one)
	}
	c, err := s.Context(context.Background(), &pluginpb.ContextRequest{Key: "downloads"})
	if err != nil || c.Text != "nothing downloading; 1 seeding" {
		t.Errorf("downloads context: %v, %v", c, err)
	}
	var tr transferResult
	realCall(t, s, "qbittorrent_transfer", `{}`, &tr)
	if tr.Connection == "" || tr.Down == "" || tr.DownLimit != "none" || tr.DHTNodes != 0 {
		t.Errorf("transfer: %+v", tr)
	}

	realCall(t, s, "qbittorrent_pause", fmt.Sprintf(`{"torrents":[%q]}`, strings.ToUpper(hash)), &acted)
	if want.Done = "paused"; !equalAction(acted, want) {
		t.Errorf("pause: %+v", acted)
	}
	waitFor(t, "the torrent to pause", func() bool { return listOne(t, s, `{}`).State == "paused" })

	wantErr := `qBittorrent has no torrent matching "no-such-torrent" (qbittorrent_list shows the hashes and names); nothing was paused`
	if r := callTool(t, s, "qbittorrent_pause", fmt.Sprintf(`{"torrents":[%q,"no-such-torrent"]}`, hash)); r.Error != wantErr {
		t.Errorf("pause an unknown torrent: %q\nwant %q", r.Error, wantErr)
	}

	const magnet = "magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567&dn=mmcp-magnet"
	var m addResult
	realCall(t, s, "qbittorrent_add", fmt.Sprintf(`{"source":%q,"paused":true}`, magnet), &m)
	if m.Result != "added" || m.Hash != "0123456789abcdef0123456789abcdef01234567" || m.Name != "mmcp-magnet" {
		t.Errorf("add magnet: %+v", m)
	}
	realCall(t, s, "qbittorrent_add", fmt.Sprintf(`{"source":%q}`, magnet), &m)
	if m.Result != "already present" || m.Name != "mmcp-magnet" {
		t.Errorf("add the magnet again: %+v", m)
	}

	realCall(t, s, "qbittorrent_remove", fmt.Sprintf(`{"torrents":[%q,"mmcp-magnet"],"delete_files":true}`, name), &acted)
	if !acted.FilesDeleted || acted.Done != "removed" || len(acted.Torrents) != 2 {
		t.Errorf("remove: %+v", acted)
	}
	waitFor(t, "the data to be deleted", func() bool {
		_, err := os.Stat(filepath.Join(d.downloadDir, name))
		return os.IsNotExist(err)
	})
	waitFor(t, "the torrents to go", func() bool { return len(listAll(t, s, `{}`).Torrents) == 0 })
}

func TestRealDaemonCredentials(t *testing.T) {
	d := startDaemon(t)
	t.Setenv(envURL, d.url)
	t.Setenv(envUser, daemonUser)
	t.Setenv(envPass, "wrong-password")
	want := "qBittorrent refused the user name and password; check MMCP_PLUGIN_QBITTORRENT_USERNAME and MMCP_PLUGIN_QBITTORRENT_PASSWORD: credentials refused"
	s := newPlugin(15 * time.Second).Server()
	if r := callTool(t, s, "qbittorrent_list", `{}`); r.Error != want {
		t.Errorf("wrong password: %q\nwant %q", r.Error, want)
	}
	if h, err := s.Health(context.Background(), &pluginpb.HealthRequest{}); err != nil || h.Ok || h.Problem != want {
		t.Errorf("health with a wrong password: %v %v", h, err)
	}

	t.Setenv(envPass, "")
	want = "qBittorrent requires a login (403); set MMCP_PLUGIN_QBITTORRENT_PASSWORD (and MMCP_PLUGIN_QBITTORRENT_USERNAME unless the WebUI user is admin): credentials refused"
	if r := callTool(t, newPlugin(15*time.Second).Server(), "qbittorrent_list", `{}`); r.Error != want {
		t.Errorf("no password: %q\nwant %q", r.Error, want)
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

func listAll(t *testing.T, s pluginpb.PluginServer, args string) listResult {
	t.Helper()
	var res listResult
	realCall(t, s, "qbittorrent_list", args, &res)
	return res
}

func listOne(t *testing.T, s pluginpb.PluginServer, args string) torrentView {
	t.Helper()
	res := listAll(t, s, args)
	if len(res.Torrents) != 1 {
		t.Fatalf("list %s: want one torrent, got %+v", args, res)
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
	return a.Done == b.Done && a.FilesDeleted == b.FilesDeleted && slices.Equal(a.Torrents, b.Torrents)
}
