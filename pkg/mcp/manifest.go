// Package mcp owns MCP servers as tool sources: their manifests in the plugins folder, starting or reaching them with the official SDK, and their tools and results in mmcpd's terms.
package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Suffix ends the file name of every MCP server manifest: plugins/<name>.mcp.json.
const Suffix = ".mcp.json"

// maxManifestBytes bounds a manifest: it is a few lines of settings, and is
// read whole.
const maxManifestBytes = 64 << 10

// Manifest declares one MCP server: a command run over stdio, or the URL of
// a streamable HTTP endpoint.
type Manifest struct {
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Trusted tools run without the user's approval although the server
	// does not say they only read. By the server's tool name or mmcpd's.
	Trusted []string `json:"trusted,omitempty"`
}

// Discover lists the manifests in dir, sorted. A missing dir holds none.
func Discover(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading plugins folder %s: %w", dir, err)
	}
	var paths []string
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, Suffix) && len(name) > len(Suffix) && !e.IsDir() {
			paths = append(paths, filepath.Join(dir, name))
		}
	}
	sort.Strings(paths)
	return paths, nil
}

// NameOf is the server's name from its manifest path: the <name> of
// <name>.mcp.json.
func NameOf(path string) string {
	return strings.TrimSuffix(filepath.Base(path), Suffix)
}

// Load reads and checks a manifest. Unknown keys are refused: a misspelt
// "trusted" must not silently leave every tool asking for approval, nor a
// misspelt "env" start the server without its settings.
func Load(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxManifestBytes+1)); err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	if buf.Len() > maxManifestBytes {
		return nil, fmt.Errorf("manifest %s is over %d bytes", filepath.Base(path), maxManifestBytes)
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", filepath.Base(path), err)
	}
	if dec.More() {
		return nil, fmt.Errorf("manifest %s holds more than one JSON value", filepath.Base(path))
	}
	switch {
	case m.Command == "" && m.URL == "":
		return nil, fmt.Errorf("manifest %s names neither a command (stdio) nor a url (streamable HTTP)", filepath.Base(path))
	case m.Command != "" && m.URL != "":
		return nil, fmt.Errorf("manifest %s names both a command and a url; keep one", filepath.Base(path))
	case m.URL != "":
		u, err := url.Parse(m.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("manifest %s: url must be an http or https URL", filepath.Base(path))
		}
		if len(m.Args) > 0 || len(m.Env) > 0 {
			return nil, fmt.Errorf("manifest %s: args and env are for a command; a url takes headers", filepath.Base(path))
		}
	case len(m.Headers) > 0:
		return nil, fmt.Errorf("manifest %s: headers are for a url; a command takes env", filepath.Base(path))
	}
	return &m, nil
}

// reference is ${NAME} in an env or header value.
var reference = regexp.MustCompile(`\$\{([^}]*)\}`)

// Unset is a problem that keeps a server on standby until its settings are
// fixed: a variable its manifest needs is not set, or its command is not
// installed.
type Unset struct{ Problem string }

func (e *Unset) Error() string { return e.Problem }

// Resolve expands the ${VAR} references of the manifest's env and headers.
// Only the server's own variables (prefix, as MMCP_PLUGIN_<SLUG>_) may be
// referenced, and lookup holds exactly those: another plugin's secrets, or the
// daemon's, never reach a server through its manifest. A reference to a
// variable that is not set returns *Unset.
func (m *Manifest) Resolve(prefix string, lookup func(string) (string, bool)) (env, headers map[string]string, err error) {
	var missing []string
	expand := func(where, v string) (string, error) {
		var bad error
		out := reference.ReplaceAllStringFunc(v, func(ref string) string {
			name := ref[2 : len(ref)-1]
			if !strings.HasPrefix(name, prefix) || len(name) == len(prefix) {
				bad = fmt.Errorf("%s refers to ${%s}: a manifest may only refer to its own variables, %s*", where, name, prefix)
				return ""
			}
			val, ok := lookup(name)
			if !ok || val == "" {
				if !slices.Contains(missing, name) {
					missing = append(missing, name)
				}
				return ""
			}
			return val
		})
		return out, bad
	}
	env, err = expandAll("env", m.Env, expand)
	if err != nil {
		return nil, nil, err
	}
	headers, err = expandAll("headers", m.Headers, expand)
	if err != nil {
		return nil, nil, err
	}
	if len(missing) > 0 {
		return nil, nil, &Unset{Problem: strings.Join(missing, " is required; ") + " is required"}
	}
	return env, headers, nil
}

func expandAll(field string, in map[string]string, expand func(where, v string) (string, error)) (map[string]string, error) {
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first error is always the same one
	out := make(map[string]string, len(in))
	for _, k := range keys {
		v, err := expand(field+"."+k, in[k])
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// References lists the variables the manifest's env and headers refer to,
// sorted, once each.
func (m *Manifest) References() []string {
	var out []string
	for _, vals := range []map[string]string{m.Env, m.Headers} {
		for _, v := range vals {
			for _, sub := range reference.FindAllStringSubmatch(v, -1) {
				if !slices.Contains(out, sub[1]) {
					out = append(out, sub[1])
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// ToolName is the name mmcpd gives a server's tool: <name>_<tool>, lower
// case (the union's tool names are), every character outside [a-z0-9_]
// turned to "_". Whether the result is usable (length, first character,
// clashes) is for the caller to check.
func ToolName(server, tool string) string {
	b := []byte(strings.ToLower(server + "_" + tool))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return string(b)
}
