package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/internal/needs"
)

// TestDist runs "make dist" as a release would, with one plugin instead of
// all (two architectures of every plugin is minutes of building on a small
// machine; .ci/run builds the whole set), and reads the archives back: each
// holds a static binary of its own architecture, the plugin, the unit, the
// env example and the README, and SHA256SUMS matches them.
func TestDist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the daemon for two architectures")
	}
	makeCmd := needs.Program(t, "make", "make")
	dist := t.TempDir()
	const version, commit = "v0.0.0-disttest", "0123456789ab"
	start := time.Now()
	cmd := exec.Command(makeCmd, "-C", "..", "dist", "DIST_DIR="+dist, "DIST_PLUGINS=system", "VERSION="+version, "COMMIT="+commit)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, out)
	}
	t.Logf("make dist (daemon and one plugin, two architectures): %s", time.Since(start).Round(time.Second))

	sums := readSums(t, filepath.Join(dist, "SHA256SUMS"))
	if len(sums) != 2 {
		t.Errorf("SHA256SUMS lists %d archives, want 2: %v", len(sums), sums)
	}
	example, err := os.ReadFile("mmcpd.env.example")
	if err != nil {
		t.Fatal(err)
	}
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		t.Run(arch, func(t *testing.T) {
			name := "mmcpd-" + version + "-linux-" + arch
			archive := filepath.Join(dist, name+".tar.gz")
			b, err := os.ReadFile(archive)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			if got := sums[name+".tar.gz"]; got != hex.EncodeToString(sum[:]) {
				t.Errorf("SHA256SUMS has %q for %s, the file hashes to %x", got, name, sum)
			}
			files := untar(t, b)
			for _, f := range []string{"bin/mmcpd", "plugins/mmcp-plugin-system", "mmcpd.service", "mmcpd.env.example", "README.md"} {
				if _, ok := files[name+"/"+f]; !ok {
					t.Errorf("%s has no %s/%s", filepath.Base(archive), name, f)
				}
			}
			if !bytes.Equal(files[name+"/mmcpd.env.example"].data, example) {
				t.Error("the archive's mmcpd.env.example differs from deploy's")
			}
			for _, bin := range []string{"bin/mmcpd", "plugins/mmcp-plugin-system"} {
				f := files[name+"/"+bin]
				if f.mode&0o111 == 0 {
					t.Errorf("%s is not executable (%o)", bin, f.mode)
				}
				checkELF(t, bin, f.data, machine)
			}
			if arch == runtime.GOARCH {
				checkVersion(t, files[name+"/bin/mmcpd"].data, version, commit)
			}
		})
	}
}

type tarFile struct {
	mode int64
	data []byte
}

func untar(t *testing.T, gz []byte) map[string]tarFile {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]tarFile{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = tarFile{h.Mode, data}
	}
}

func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not sha256sum's", sc.Text())
		}
		sums[file] = sum
	}
	return sums
}

// checkELF wants a Linux executable for machine with no interpreter: static,
// so it runs on any distribution (and in a distroless image).
func checkELF(t *testing.T, name string, data []byte, machine elf.Machine) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("%s is %v %v, want %v ET_EXEC", name, f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for a dynamic loader: it is not static", name)
		}
	}
}

func checkVersion(t *testing.T, daemon []byte, version, commit string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mmcpd")
	if err := os.WriteFile(path, daemon, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	want := "mmcpd " + version + " (commit " + commit + ", " + runtime.Version() + ", linux/" + runtime.GOARCH + ")\n"
	if err != nil || string(out) != want {
		t.Errorf("mmcpd version: %v\n%q, want %q", err, out, want)
	}
}
