package plugins

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FilePrefix starts the file name of every plugin binary.
const FilePrefix = "mmcp-plugin-"

// Discover lists the plugin binaries in dir: regular executable files named
// mmcp-plugin-<name>, not in subfolders. Folders, non-executables and sources
// (a name with a dot, as in mmcp-plugin-x.go) are ignored. A missing dir is
// not an error: there are no plugins.
func Discover(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading plugins folder %s: %w", dir, err)
	}
	var paths []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, FilePrefix) || len(name) == len(FilePrefix) || strings.Contains(name, ".") {
			continue
		}
		info, err := os.Stat(filepath.Join(dir, name)) // follows symlinks
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			continue
		}
		paths = append(paths, filepath.Join(dir, name))
	}
	sort.Strings(paths)
	return paths, nil
}

// NameOf returns the plugin name of a binary path: the <name> of
// mmcp-plugin-<name>.
func NameOf(path string) string {
	return strings.TrimPrefix(filepath.Base(path), FilePrefix)
}

// baseEnv is what every plugin process inherits from the daemon besides its
// own settings: enough to run, nothing anybody else configured.
var baseEnv = []string{"MMCP_DAEMON_VERSION", "PATH", "HOME", "TZ", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR"}

// PluginEnv splits the daemon's environment among plugins. Each plugin gets
// baseEnv and the MMCP_PLUGIN_<SLUG>_* variables whose longest matching slug
// is its own: with plugins "web" and "web_search", MMCP_PLUGIN_WEB_SEARCH_KEY
// belongs to web_search only.
func PluginEnv(environ []string, names []string) map[string][]string {
	out := make(map[string][]string, len(names))
	var base []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		for _, b := range baseEnv {
			if k == b {
				base = append(base, kv)
			}
		}
	}
	slugs := make(map[string]string, len(names)) // slug -> name
	for _, n := range names {
		slugs[Slug(n)] = n
		out[n] = append([]string(nil), base...)
	}
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(k, "MMCP_PLUGIN_")
		if !ok {
			continue
		}
		best := ""
		for slug := range slugs {
			if strings.HasPrefix(rest, slug+"_") && len(slug) > len(best) {
				best = slug
			}
		}
		if best != "" {
			n := slugs[best]
			out[n] = append(out[n], kv)
		}
	}
	return out
}
