// Package s2g builds, for tests, the converter Ollama runs on a request's
// `format` (llama.cpp's json-schema-to-grammar, from the ollama module's own
// sources) and asks it whether Ollama would accept a schema.
package s2g

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mmcpd/mmcpd/internal/needs"
)

//go:embed testdata/driver.cpp
var driver []byte

// Converter is the compiled driver. Safe for concurrent use.
type Converter struct{ path string }

var built struct {
	once sync.Once
	c    *Converter
	err  error
}

// Build returns the converter, compiling it on the first call of a test
// binary into the user's cache (once per converter source and compiler, so
// later runs reuse it). Without g++ or nlohmann-json3-dev the test skips
// (fails under MMCP_TEST_REQUIRE_EXTERNAL=1).
func Build(t testing.TB) *Converter {
	t.Helper()
	gxx := needs.Program(t, "g++", "g++")
	needs.File(t, "/usr/include/nlohmann/json.hpp", "nlohmann's JSON for C++", "nlohmann-json3-dev")
	built.once.Do(func() { built.c, built.err = compile(gxx) })
	if built.err != nil {
		t.Fatalf("building Ollama's schema converter: %v", built.err)
	}
	return built.c
}

func compile(gxx string) (*Converter, error) {
	mod, err := ollamaDir()
	if err != nil {
		return nil, err
	}
	src := filepath.Join(mod, "llama", "llama.cpp", "common", "json-schema-to-grammar.cpp")
	conv, err := os.ReadFile(src)
	if err != nil {
		return nil, fmt.Errorf("the converter's source: %w", err)
	}
	version, _ := exec.Command(gxx, "--version").Output()
	h := sha256.New()
	for _, b := range [][]byte{driver, conv, version, []byte(mod)} {
		h.Write(b)
		h.Write([]byte{0})
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "mmcpd", "s2g")
	bin := filepath.Join(dir, "s2g-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(bin); err == nil {
		return &Converter{path: bin}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache folder: %w", err)
	}
	// Built beside its final name and renamed, so test binaries of several
	// packages building at once never run a half-written file.
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return nil, fmt.Errorf("build folder: %w", err)
	}
	defer os.RemoveAll(work)
	drv := filepath.Join(work, "driver.cpp")
	if err := os.WriteFile(drv, driver, 0o644); err != nil {
		return nil, fmt.Errorf("writing the driver: %w", err)
	}
	out := filepath.Join(work, "s2g")
	cmd := exec.Command(gxx, "-std=c++17", "-O1",
		"-I"+filepath.Join(mod, "llama", "llama.cpp", "common"),
		"-I"+filepath.Join(mod, "llama", "llama.cpp", "include"),
		"-I"+filepath.Join(mod, "ml", "backend", "ggml", "ggml", "include"),
		drv, src, "-o", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("g++: %w\n%s", err, msg)
	}
	if err := os.Rename(out, bin); err != nil {
		return nil, fmt.Errorf("installing the converter: %w", err)
	}
	return &Converter{path: bin}, nil
}

// ollamaDir finds the ollama module's source, the version go.mod names.
func ollamaDir() (string, error) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out, err := exec.Command(gobin, "list", "-m", "-f", "{{.Dir}}", "github.com/ollama/ollama").Output()
	if dir := strings.TrimSpace(string(out)); err == nil && dir != "" {
		return dir, nil
	}
	out, err = exec.Command(gobin, "mod", "download", "-json", "github.com/ollama/ollama").Output()
	if err != nil {
		return "", fmt.Errorf("go mod download github.com/ollama/ollama: %w", err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download github.com/ollama/ollama: no folder in %s", out)
	}
	return m.Dir, nil
}

// ErrRefused wraps every reason Ollama would refuse a format for.
var ErrRefused = errors.New("Ollama would refuse this format")

// Check returns, for each schema, nil if Ollama would accept it as `format`,
// else why not (wrapping ErrRefused). Ollama refuses what is not an object,
// what the converter throws on, an empty grammar, and a grammar that does not
// fit the buffer it converts into (it would be cut, see llama.SchemaToGrammar).
func (c *Converter) Check(schemas ...[]byte) ([]error, error) {
	var in bytes.Buffer
	errs := make([]error, len(schemas))
	var sent []int
	for i, s := range schemas {
		var compact bytes.Buffer
		if len(s) == 0 || s[0] != '{' {
			errs[i] = fmt.Errorf("%w: invalid format: expected a JSON Schema object", ErrRefused)
			continue
		}
		if err := json.Compact(&compact, s); err != nil {
			errs[i] = fmt.Errorf("%w: invalid JSON: %v", ErrRefused, err)
			continue
		}
		in.Write(compact.Bytes())
		in.WriteByte('\n')
		sent = append(sent, i)
	}
	cmd := exec.Command(c.path)
	cmd.Stdin = &in
	cmd.Stderr = io.Discard // the converter's warnings: Ollama ignores them too
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the converter: %w", err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	n := 0
	for ; n < len(sent) && sc.Scan(); n++ {
		i := sent[n]
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "ok "); ok {
			size, _ := strconv.Atoi(rest)
			limit := max(32768, min(1<<20, len(schemas[i])*4))
			switch {
			case size == 0:
				errs[i] = fmt.Errorf("%w: the grammar is empty", ErrRefused)
			case size >= limit:
				errs[i] = fmt.Errorf("%w: the grammar has %d bytes, over Ollama's buffer of %d", ErrRefused, size, limit)
			}
			continue
		}
		errs[i] = fmt.Errorf("%w: %s", ErrRefused, strings.TrimPrefix(line, "error "))
	}
	werr := cmd.Wait()
	if n < len(sent) {
		// Ollama's runner would die the same way on that schema.
		return nil, fmt.Errorf("the converter stopped (%v) on schema %d: %s", werr, sent[n], clip(schemas[sent[n]]))
	}
	return errs, nil
}

// Accepts fails the test unless Ollama would accept schema as `format`.
func (c *Converter) Accepts(t testing.TB, what string, schema []byte) {
	t.Helper()
	errs, err := c.Check(schema)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if errs[0] != nil {
		t.Errorf("%s: %v\nformat: %s", what, errs[0], clip(schema))
	}
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}
