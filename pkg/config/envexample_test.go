package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvExample keeps deploy/mmcpd.env.example what EnvExample writes now: a
// setting added, renamed or given another default fails here until the file
// is regenerated (MMCP_UPDATE_DOCS=1 rewrites it, as for docs/plugins.md).
func TestEnvExample(t *testing.T) {
	var b bytes.Buffer
	if err := EnvExample(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "deploy", "mmcpd.env.example")
	if os.Getenv("MMCP_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; create it: %s", err, EnvExampleRegenerate)
	}
	if !bytes.Equal(committed, b.Bytes()) {
		t.Errorf("deploy/mmcpd.env.example is stale (first difference at line %d); regenerate it: %s (or MMCP_UPDATE_DOCS=1 go test -run TestEnvExample ./pkg/config)",
			firstDifferentLine(string(committed), b.String()), EnvExampleRegenerate)
	}

	// Every variable, with its documented default, as a commented line that
	// becomes a working setting once uncommented.
	for _, d := range documented {
		if !strings.Contains(b.String(), "\n#"+d.name+"="+d.def+"\n") {
			t.Errorf("the example has no line #%s=%s", d.name, d.def)
		}
	}
	// Nothing is set by the file as shipped: every line is a comment or empty.
	for i, line := range strings.Split(b.String(), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			t.Errorf("line %d sets something: %q", i+1, line)
		}
	}
}

func firstDifferentLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}
