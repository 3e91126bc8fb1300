package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/pkg/plugins"
)

// TestPluginsBesideBinary: started from another folder with no
// MMCP_PLUGINS_DIR, the daemon finds the plugins beside bin/mmcpd, says which
// folder it uses, and warns loudly when a folder holds none.
func TestPluginsBesideBinary(t *testing.T) {
	_, system := buildPlugins(t)
	root := pluginUserDir(t, false)
	for _, d := range []string{"bin", "plugins"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(root, "bin", "mmcpd")
	for src, dst := range map[string]string{binary: bin, system: filepath.Join(root, "plugins", plugins.FilePrefix+"system")} {
		if err := os.Link(src, dst); err != nil {
			t.Skipf("cannot link %s: %v", src, err)
		}
	}
	elsewhere := t.TempDir()

	schema := command(nil, "schema")
	schema.Path, schema.Args[0], schema.Dir = bin, bin, elsewhere
	out, err := schema.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "system_time") {
		t.Errorf("schema from another folder: %v\n%s", err, out)
	}

	// The daemon says where its plugins come from.
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, `"msg":"plugins folder","plugins_dir":"` + filepath.Join(root, "plugins") + `","plugins":1`},
		{[]string{"MMCP_PLUGINS_DIR=" + elsewhere}, `"level":"WARN","msg":"no plugins: the model has no tools.`},
	} {
		addr := freeAddr(t)
		serve := command(append(tc.env, "MMCP_LISTEN_ADDR="+addr, "MMCP_LOG_FORMAT=json", "MMCP_OLLAMA_HOST=http://"+freeAddr(t)), "serve")
		serve.Path, serve.Args[0], serve.Dir = bin, bin, elsewhere
		logs := &syncBuffer{}
		serve.Stdout, serve.Stderr = logs, logs
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		ok := waitFor(20e9, func() bool { return strings.Contains(logs.String(), tc.want) })
		_ = serve.Process.Kill()
		_ = serve.Wait()
		if !ok {
			t.Errorf("the log lacks %s:\n%s", tc.want, logs)
		}
	}
}
