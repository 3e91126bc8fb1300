// Package mcptest finds, for tests, the real MCP servers from npm that `npm ci` installs in this folder, and builds the small Go MCP server in testdata.
package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/mmcpd/mmcpd/internal/needs"
)

// folder is this package's folder, where package.json and node_modules are.
func folder() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Everything returns node and the script of @modelcontextprotocol/server-everything.
func Everything(t testing.TB) (node, script string) {
	return npmServer(t, "server-everything")
}

// Filesystem returns node and the script of @modelcontextprotocol/server-filesystem.
func Filesystem(t testing.TB) (node, script string) {
	return npmServer(t, "server-filesystem")
}

// npmServer skips the test, with the line that installs what is missing,
// when node or the package is not there; with needs.RequireVar=1 it fails
// instead.
func npmServer(t testing.TB, pkg string) (node, script string) {
	t.Helper()
	node = needs.Program(t, "node", "nodejs")
	script = filepath.Join(folder(), "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js")
	if _, err := os.Stat(script); err != nil {
		msg := "SKIP: @modelcontextprotocol/" + pkg + " is not installed (run: npm ci --prefix internal/mcptest; Debian: apt-get install npm)"
		if os.Getenv(needs.RequireVar) == "1" {
			t.Fatal(msg + "; " + needs.RequireVar + "=1 requires it")
		}
		t.Skip(msg)
	}
	return node, script
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
	buildOut  []byte
)

// GoServer builds testdata/mcpserver once per test binary into a folder the
// plugins user can read, and returns its path.
func GoServer(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mmcp-mcpserver")
		if err != nil {
			buildErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "mcpserver")
		cmd := exec.Command("go", "build", "-o", built, "./testdata/mcpserver")
		cmd.Dir = folder()
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building the test MCP server: %v\n%s", buildErr, buildOut)
	}
	return built
}

// Cleanup removes what GoServer built; TestMain calls it after the tests.
func Cleanup() {
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
}
