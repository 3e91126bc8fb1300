package plugins_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/plugins"
)

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("mmcp-plugin-zeta", 0o755)
	write("mmcp-plugin-alpha", 0o700)
	write("mmcp-plugin-web_search", 0o755)
	write("mmcp-plugin-noexec", 0o644)    // not executable
	write("mmcp-plugin-src.go", 0o755)    // a source, by its dot
	write("mmcp-plugin-", 0o755)          // no name
	write("mmcp-plugin-old.bak", 0o755)   // a dot again
	write("other-plugin", 0o755)          // no prefix
	write("MMCP-PLUGIN-upper", 0o755)     // the prefix is case-sensitive
	write("xmmcp-plugin-inside", 0o755)   // prefix not at the start
	write("README", 0o644)                // a plain file
	write("target-of-link", 0o755)        // reached through a link below
	write("target-of-noexec-link", 0o644) // a link to a non-executable
	if err := os.Mkdir(filepath.Join(dir, "mmcp-plugin-folder"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mmcp-plugin-folder", "mmcp-plugin-nested"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"mmcp-plugin-linked":  "target-of-link",
		"mmcp-plugin-dirlink": "mmcp-plugin-folder",
		"mmcp-plugin-broken":  "nowhere",
		"mmcp-plugin-nolink":  "target-of-noexec-link",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}

	got, err := plugins.Discover(dir)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range []string{"alpha", "linked", "web_search", "zeta"} {
		want = append(want, filepath.Join(dir, "mmcp-plugin-"+n))
	}
	if !slices.Equal(got, want) {
		t.Errorf("Discover:\n got %q\nwant %q", got, want)
	}
	names := make([]string, len(got))
	for i, p := range got {
		names[i] = plugins.NameOf(p)
	}
	if !slices.Equal(names, []string{"alpha", "linked", "web_search", "zeta"}) {
		t.Errorf("NameOf: %q", names)
	}

	got, err = plugins.Discover(filepath.Join(dir, "missing"))
	if err != nil || got != nil {
		t.Errorf("missing folder: %q, %v; want none, no error", got, err)
	}
	if _, err := plugins.Discover(filepath.Join(dir, "README")); err == nil {
		t.Error("a file given as the folder: no error")
	}
	empty := t.TempDir()
	if got, err := plugins.Discover(empty); err != nil || len(got) != 0 {
		t.Errorf("empty folder: %q, %v", got, err)
	}
}

func TestSlug(t *testing.T) {
	for name, want := range map[string]string{
		"system":     "SYSTEM",
		"web_search": "WEB_SEARCH",
		"web-search": "WEB_SEARCH",
		"Tmdb2":      "TMDB2",
		"a.b c":      "A_B_C",
	} {
		if got := plugins.Slug(name); got != want {
			t.Errorf("Slug(%q) = %q, want %q", name, got, want)
		}
	}
	if got := plugins.EnvPrefix("web-search"); got != "MMCP_PLUGIN_WEB_SEARCH_" {
		t.Errorf("EnvPrefix = %q", got)
	}
}

func TestPluginEnv(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin:/bin",
		"HOME=/home/mmcp",
		"TZ=Europe/Paris",
		"LANG=fr_FR.UTF-8",
		"LC_ALL=C.UTF-8",
		"TMPDIR=/var/tmp",
		"SSL_CERT_FILE=/etc/ssl/cert.pem",
		"MMCP_DAEMON_VERSION=1.2.3",
		"MMCP_API_TOKEN=daemon-secret",
		"MMCP_PLUGINS_DIR=/plugins",
		"MMCP_OLLAMA_HOST=http://127.0.0.1:11434",
		"HOSTILE_VAR=boo",
		"USER=root",
		"PATHX=/not/path",
		"MMCP_PLUGIN_WEB_KEY=web-key",
		"MMCP_PLUGIN_WEB_SEARCH_KEY=search-key",
		"MMCP_PLUGIN_WEB_SEARCH_ENGINE_URL=https://search",
		"MMCP_PLUGIN_WEBX_KEY=nobody",    // no plugin webx
		"MMCP_PLUGIN_WEB=no-key",         // the slug alone, no key
		"MMCP_PLUGIN_OTHER_TOKEN=nobody", // no plugin other
		"MMCP_PLUGIN_SYSTEM_ZONE=UTC",
		"mmcp_plugin_web_key=lower", // variables are case-sensitive
	}
	got := plugins.PluginEnv(environ, []string{"web", "web_search", "system", "bare"})
	base := []string{
		"PATH=/usr/bin:/bin", "HOME=/home/mmcp", "TZ=Europe/Paris", "LANG=fr_FR.UTF-8", "LC_ALL=C.UTF-8",
		"TMPDIR=/var/tmp", "SSL_CERT_FILE=/etc/ssl/cert.pem", "MMCP_DAEMON_VERSION=1.2.3",
	}
	want := map[string][]string{
		"web":        append(slices.Clone(base), "MMCP_PLUGIN_WEB_KEY=web-key"),
		"web_search": append(slices.Clone(base), "MMCP_PLUGIN_WEB_SEARCH_KEY=search-key", "MMCP_PLUGIN_WEB_SEARCH_ENGINE_URL=https://search"),
		"system":     append(slices.Clone(base), "MMCP_PLUGIN_SYSTEM_ZONE=UTC"),
		"bare":       slices.Clone(base),
	}
	if len(got) != len(want) {
		t.Errorf("PluginEnv returned %d plugins, want %d: %q", len(got), len(want), got)
	}
	for name, w := range want {
		g := slices.Clone(got[name])
		slices.Sort(g)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Errorf("%s:\n got %q\nwant %q", name, g, w)
		}
	}

	// Without a web_search plugin, its variables are web's: WEB is then the
	// longest slug that matches, and SEARCH_KEY a key of web.
	got = plugins.PluginEnv(environ, []string{"web"})
	if !slices.Contains(got["web"], "MMCP_PLUGIN_WEB_SEARCH_KEY=search-key") {
		t.Errorf("web alone: %q", got["web"])
	}

	// Each plugin gets its own slice: appending to one must not show in
	// another.
	got = plugins.PluginEnv([]string{"PATH=/bin"}, []string{"a", "b"})
	a := append(got["a"], "X=1")
	_ = a
	if slices.Contains(got["b"], "X=1") {
		t.Error("plugins share their environment slice")
	}

	if got := plugins.PluginEnv(nil, nil); len(got) != 0 {
		t.Errorf("no plugins: %q", got)
	}
}
