// Package torrenttest holds what the tests of the download-client plugins
// share when they drive a real client on loopback: free ports, a log buffer,
// and a generated .torrent that needs no tracker.
package torrenttest

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// LockedBuffer collects a daemon's output; safe for concurrent use.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Bencode encodes ints, strings, lists and dictionaries (keys sorted, as
// BEP 3 requires).
func Bencode(v any) []byte {
	var b bytes.Buffer
	var enc func(any)
	enc = func(v any) {
		switch x := v.(type) {
		case int:
			fmt.Fprintf(&b, "i%de", x)
		case string:
			fmt.Fprintf(&b, "%d:%s", len(x), x)
		case []any:
			b.WriteByte('l')
			for _, e := range x {
				enc(e)
			}
			b.WriteByte('e')
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			b.WriteByte('d')
			for _, k := range keys {
				enc(k)
				enc(x[k])
			}
			b.WriteByte('e')
		default:
			panic(fmt.Sprintf("bencode: %T", v))
		}
	}
	enc(v)
	return b.Bytes()
}

// MakeTorrent returns a single-file .torrent for data, without trackers,
// and its info hash in hex.
func MakeTorrent(name string, data []byte) ([]byte, string) {
	const pieceLen = 16 << 10
	var pieces []byte
	for off := 0; off < len(data); off += pieceLen {
		sum := sha1.Sum(data[off:min(off+pieceLen, len(data))])
		pieces = append(pieces, sum[:]...)
	}
	info := map[string]any{
		"name":         name,
		"length":       len(data),
		"piece length": pieceLen,
		"pieces":       string(pieces),
	}
	hash := sha1.Sum(Bencode(info))
	return Bencode(map[string]any{
		"created by":    "mmcpd tests",
		"creation date": 1767225600,
		"info":          info,
	}), hex.EncodeToString(hash[:])
}
