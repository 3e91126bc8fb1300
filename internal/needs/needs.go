// Package needs decides what a test does when an outside program it runs is
// not installed: skip with the line that installs it, or fail where every
// test must run (CI sets MMCP_TEST_REQUIRE_EXTERNAL=1).
package needs

import (
	"os"
	"os/exec"
	"testing"
)

// RequireVar, set to 1, turns a missing program into a test failure.
const RequireVar = "MMCP_TEST_REQUIRE_EXTERNAL"

// Program returns the path of program, or skips the test (fails it when
// RequireVar is 1), naming the Debian package that provides it.
func Program(t testing.TB, program, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err == nil {
		return path
	}
	msg := "SKIP: " + program + " is not installed (Debian: apt-get install " + debianPackage + ")"
	if os.Getenv(RequireVar) == "1" {
		t.Fatal(msg + "; " + RequireVar + "=1 requires it")
	}
	t.Skip(msg)
	return ""
}

// File returns path if it exists (a header, a data set a package installs),
// or skips the test (fails it when RequireVar is 1), naming what is missing
// and the Debian package that provides it.
func File(t testing.TB, path, what, debianPackage string) string {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return path
	}
	msg := "SKIP: " + what + " is not installed, no " + path + " (Debian: apt-get install " + debianPackage + ")"
	if os.Getenv(RequireVar) == "1" {
		t.Fatal(msg + "; " + RequireVar + "=1 requires it")
	}
	t.Skip(msg)
	return ""
}
