package plugins

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// The describe cache lets the daemon know every plugin's tools at start
// without starting the plugins: a plugin binary is described once, and again
// only when the file or its settings change.
//
// It is a trust boundary: a description says which tools run without the
// user's approval. So:
//   - the file is written by the daemon only, atomically, mode 0600; one that
//     is not a regular file owned by the daemon's user with no group or other
//     permission bits, does not parse, or is of another format version, is
//     ignored as a whole (and replaced at the next write);
//   - an entry is bound to the identity of the very file that produced it:
//     device, inode, size, modification time and change time (ctime), all to
//     the nanosecond. No user can set a file's ctime: any write, rename over
//     it, chmod or chown gives another one, so a changed binary is always
//     described again. This binds as tightly as a hash of the contents would,
//     without reading every binary (tens of MB each) at every start;
//   - the settings are in the key as a salted SHA-256 of the plugin's own
//     MMCP_PLUGIN_<SLUG>_* variables: a changed setting is described again,
//     and no value is written in clear.

// cacheVersion changes when an entry's meaning does.
const cacheVersion = 1

type cacheFile struct {
	Version int                   `json:"version"`
	Salt    string                `json:"salt"`
	Entries map[string]cacheEntry `json:"entries"` // by binary path
}

type cacheEntry struct {
	Identity string `json:"identity"` // fileIdentity of the binary
	Settings string `json:"settings"` // settingsKey of its environment
	Describe []byte `json:"describe"` // the DescribeResponse, in protobuf
}

// describeCache is the cache in memory, written back on every change. Safe
// for concurrent use; a nil one caches nothing.
type describeCache struct {
	path string
	log  *slog.Logger

	mu   sync.Mutex
	file cacheFile
}

// openCache reads the cache at path, or starts an empty one when it is
// missing or cannot be trusted. An empty path caches nothing.
// MaxCacheBytes bounds the describe cache file; a larger one is ignored and
// replaced, like a corrupt one. The tools the union takes (by default 64,
// each schema at most 8 KiB) describe in far less.
const MaxCacheBytes = 8 << 20

func openCache(path string, log *slog.Logger) *describeCache {
	if path == "" {
		return nil
	}
	c := &describeCache{path: path, log: log}
	if err := c.load(); err != nil {
		if !os.IsNotExist(err) {
			log.Warn("plugin describe cache ignored; every plugin is described again", "path", path, "reason", err.Error())
		}
		c.file = cacheFile{Version: cacheVersion, Entries: map[string]cacheEntry{}}
	}
	if c.file.Salt == "" {
		salt := make([]byte, 16)
		_, _ = rand.Read(salt)
		c.file.Salt = hex.EncodeToString(salt)
	}
	return c
}

func (c *describeCache) load() error {
	f, err := os.Open(c.path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("not a regular file")
	}
	if info.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("mode %o: others than the daemon's user may write it", info.Mode().Perm())
	}
	if err := ownedByDaemon(info); err != nil {
		return err
	}
	// The file is the daemon's, yet a disk can be filled and a file
	// replaced: nothing is read unbounded.
	if info.Size() > MaxCacheBytes {
		return fmt.Errorf("%d bytes, over the %d MiB limit", info.Size(), MaxCacheBytes>>20)
	}
	var file cacheFile
	if err := json.NewDecoder(io.LimitReader(f, MaxCacheBytes)).Decode(&file); err != nil {
		return fmt.Errorf("unreadable: %w", err)
	}
	if file.Version != cacheVersion || file.Salt == "" || file.Entries == nil {
		return fmt.Errorf("format version %d, not %d", file.Version, cacheVersion)
	}
	c.file = file
	return nil
}

// get returns the cached description of the binary at path, or nil when
// there is none for this very file and these settings.
func (c *describeCache) get(path, identity string, env []string, name string) *pluginpb.DescribeResponse {
	if c == nil || identity == "" {
		return nil
	}
	c.mu.Lock()
	e, ok := c.file.Entries[path]
	key := settingsKey(c.file.Salt, env, name)
	c.mu.Unlock()
	if !ok || e.Identity != identity || e.Settings != key {
		return nil
	}
	d := &pluginpb.DescribeResponse{}
	if err := proto.Unmarshal(e.Describe, d); err != nil || d.Name != name {
		return nil
	}
	return d
}

// put records a description and writes the file.
func (c *describeCache) put(path, identity string, env []string, name string, d *pluginpb.DescribeResponse) {
	if c == nil || identity == "" {
		return
	}
	b, err := proto.Marshal(d)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.file.Entries[path] = cacheEntry{Identity: identity, Settings: settingsKey(c.file.Salt, env, name), Describe: b}
	if err := c.writeLocked(); err != nil {
		c.log.Warn("plugin describe cache not written; plugins are described again at the next start", "path", c.path, "error", err.Error())
	}
}

// writeLocked replaces the file atomically: a reader never sees half of it.
func (c *describeCache) writeLocked() error {
	b, err := json.Marshal(c.file)
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	dir := filepath.Dir(c.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("making %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".plugins-cache-*") // created 0600
	if err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", tmp.Name(), firstErr(werr, cerr))
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("replacing: %w", err)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// settingsKey hashes, with salt, the plugin's own settings: the variables of
// env under its prefix, sorted.
func settingsKey(salt string, env []string, name string) string {
	prefix := EnvPrefix(name)
	var own []string
	for _, kv := range env {
		if strings.HasPrefix(kv, prefix) {
			own = append(own, kv)
		}
	}
	sort.Strings(own)
	h := sha256.New()
	h.Write([]byte(salt))
	for _, kv := range own {
		h.Write([]byte{0})
		h.Write([]byte(kv))
	}
	return hex.EncodeToString(h.Sum(nil))
}
