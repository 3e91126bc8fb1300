package needs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestProgram runs this test binary again for each case: Program ends a test
// with Skip or Fatal, which the parent reads from the child's output.
func TestProgram(t *testing.T) {
	if name := os.Getenv("NEEDS_CHILD"); name != "" {
		Program(t, name, "some-package")
		return
	}
	for _, tc := range []struct {
		program, require string
		want             string
		fails            bool
	}{
		{"sh", "", "--- PASS", false},
		{"no-such-program-mmcp", "", "SKIP: no-such-program-mmcp is not installed (Debian: apt-get install some-package)", false},
		{"no-such-program-mmcp", "1", "MMCP_TEST_REQUIRE_EXTERNAL=1 requires it", true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestProgram$", "-test.v")
		cmd.Env = append(os.Environ(), "NEEDS_CHILD="+tc.program, RequireVar+"="+tc.require)
		out, err := cmd.CombinedOutput()
		if !strings.Contains(string(out), tc.want) || (err != nil) != tc.fails {
			t.Errorf("%s with %s=%q: err %v, output:\n%s", tc.program, RequireVar, tc.require, err, out)
		}
	}
}

// TestFile runs this test binary again for each case, as TestProgram does.
func TestFile(t *testing.T) {
	if path := os.Getenv("NEEDS_FILE"); path != "" {
		File(t, path, "the thing", "some-package")
		return
	}
	for _, tc := range []struct {
		path, require string
		want          string
		fails         bool
	}{
		{"needs.go", "", "--- PASS", false},
		{"/no/such/file-mmcp", "", "SKIP: the thing is not installed, no /no/such/file-mmcp (Debian: apt-get install some-package)", false},
		{"/no/such/file-mmcp", "1", "MMCP_TEST_REQUIRE_EXTERNAL=1 requires it", true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFile$", "-test.v")
		cmd.Env = append(os.Environ(), "NEEDS_FILE="+tc.path, RequireVar+"="+tc.require)
		out, err := cmd.CombinedOutput()
		if !strings.Contains(string(out), tc.want) || (err != nil) != tc.fails {
			t.Errorf("%s with %s=%q: err %v, output:\n%s", tc.path, RequireVar, tc.require, err, out)
		}
	}
}
