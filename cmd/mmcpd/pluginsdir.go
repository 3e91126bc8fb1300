package main

import (
	"os"
	"path/filepath"
)

// pluginsDir returns the plugins folder to use, and whether it was found
// beside the binary. The default ./plugins is relative to the working
// directory; started from elsewhere (a service, another shell) the daemon
// would run without tools and without a word. So when MMCP_PLUGINS_DIR is
// unset and ./plugins does not exist, the folder beside the binary is used:
// <bin>/plugins, or <bin>/../plugins for the bin/mmcpd that make build
// writes.
func pluginsDir(configured string, explicit bool) (string, bool) {
	if explicit || isDir(configured) {
		return configured, false
	}
	exe, err := os.Executable()
	if err != nil {
		return configured, false
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	dir := filepath.Dir(exe)
	candidates := []string{filepath.Join(dir, "plugins")}
	if filepath.Base(dir) == "bin" {
		candidates = append(candidates, filepath.Join(filepath.Dir(dir), "plugins"))
	}
	for _, c := range candidates {
		if isDir(c) {
			return c, true
		}
	}
	return configured, false
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}
