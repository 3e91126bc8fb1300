package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/mmcpd/mmcpd/pkg/plugins"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
)

// pluginsSource is the folder of the bundled plugins' sources, seen from this
// package.
const pluginsSource = "../../plugins"

// docsPath is the generated reference of the bundled plugins.
const docsPath = "../../docs/plugins.md"

// docHandMarker starts the hand-written end of docsPath (adding an MCP
// server), which the generator keeps as it finds it.
const docHandMarker = "<!-- Hand-written from here on: TestPluginDocs keeps it as it is. -->"

// updateDocsVar, set to 1, makes TestPluginDocs rewrite docsPath instead of
// comparing it.
const updateDocsVar = "MMCP_UPDATE_DOCS"

// bundledNames are the plugins every mmcpd ships; the doc must list each.
var bundledNames = []string{"jellyfin", "lidarr", "plex", "prowlarr", "qbittorrent", "radarr", "seerr", "sonarr", "system", "tmdb", "transmission", "web"}

// bundledBuild holds the bundled plugins, built once next to the daemon's
// binary (so TestMain removes them) as mmcp-plugin-<name>.
var bundledBuild struct {
	once   sync.Once
	dir    string
	names  []string
	err    error
	output []byte
}

// pluginSources lists the plugins under plugins/: each folder with a main.go,
// internal aside, in name order.
func pluginSources() ([]string, error) {
	entries, err := os.ReadDir(pluginsSource)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "internal" {
			continue
		}
		if _, err := os.Stat(filepath.Join(pluginsSource, e.Name(), "main.go")); err == nil {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// bundledPlugins builds every plugin under plugins/ (once per test binary)
// and returns the folder holding them as mmcp-plugin-<name>, and their names.
func bundledPlugins(t *testing.T) (dir string, names []string) {
	t.Helper()
	bundledBuild.once.Do(func() {
		b := &bundledBuild
		if b.names, b.err = pluginSources(); b.err != nil {
			return
		}
		if len(b.names) == 0 {
			b.err = fmt.Errorf("no plugin (a folder with a main.go) under %s", pluginsSource)
			return
		}
		b.dir = filepath.Join(filepath.Dir(binary), "bundled")
		out := filepath.Join(filepath.Dir(binary), "bundled-build")
		for _, d := range []string{b.dir, out} {
			if b.err = os.MkdirAll(d, 0o755); b.err != nil {
				return
			}
		}
		// One go build for all: the packages build in parallel. Each binary
		// is named after its folder; the host wants mmcp-plugin-<name>.
		args := []string{"build", "-o", out + string(filepath.Separator)}
		for _, n := range b.names {
			args = append(args, "./"+filepath.ToSlash(filepath.Join(pluginsSource, n)))
		}
		if b.output, b.err = exec.Command("go", args...).CombinedOutput(); b.err != nil {
			b.err = fmt.Errorf("go %s: %w", strings.Join(args, " "), b.err)
			return
		}
		for _, n := range b.names {
			if b.err = os.Rename(filepath.Join(out, n), filepath.Join(b.dir, plugins.FilePrefix+n)); b.err != nil {
				return
			}
		}
	})
	if bundledBuild.err != nil {
		t.Fatalf("building the bundled plugins: %v\n%s", bundledBuild.err, bundledBuild.output)
	}
	return bundledBuild.dir, bundledBuild.names
}

// describePlugin starts the plugin binary at path as the host does (go-plugin
// handshake, gRPC, AutoMTLS), with none of its settings, and asks for its
// description. Without settings a plugin may be on standby; Describe works
// all the same.
func describePlugin(path string) (*pluginpb.DescribeResponse, error) {
	cmd := exec.Command(path)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	var stderr syncBuffer
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  plugins.Handshake,
		Plugins:          plugin.PluginSet{plugins.PluginName: &plugins.GRPCPlugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		StartTimeout:     30 * time.Second,
		Logger:           hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &stderr}),
		Stderr:           &stderr,
	})
	defer client.Kill()
	proto, err := client.Client()
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w\n%s", path, err, stderr.String())
	}
	raw, err := proto.Dispense(plugins.PluginName)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rpc, ok := raw.(pluginpb.PluginClient)
	if !ok {
		return nil, fmt.Errorf("%s served %T, not the Plugin service", path, raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := rpc.Describe(ctx, &pluginpb.DescribeRequest{})
	if err != nil {
		return nil, fmt.Errorf("%s: Describe: %w\n%s", path, err, stderr.String())
	}
	return d, nil
}

// TestPluginDocs keeps docs/plugins.md in step with the plugins: it is
// rendered from what each bundled plugin describes of itself.
func TestPluginDocs(t *testing.T) {
	dir, names := bundledPlugins(t)
	for _, want := range bundledNames {
		if !slices.Contains(names, want) {
			t.Errorf("the bundled plugin %s is missing from %s", want, pluginsSource)
		}
	}
	descs := make([]*pluginpb.DescribeResponse, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { descs[i], errs[i] = describePlugin(filepath.Join(dir, plugins.FilePrefix+n)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, d := range descs {
		docCheckDescription(t, names[i], d)
	}

	doc := renderPluginDocs(descs)
	old, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatalf("%v: generate it with %s=1 go test -run TestPluginDocs ./cmd/mmcpd", err, updateDocsVar)
	}
	if i := bytes.Index(old, []byte(docHandMarker)); i >= 0 {
		doc = append(append(doc, '\n'), old[i:]...)
	}
	if os.Getenv(updateDocsVar) == "1" {
		if err := os.WriteFile(docsPath, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", docsPath)
		return
	}
	if !bytes.Equal(old, doc) {
		t.Errorf("docs/plugins.md is out of date with the plugins: regenerate it with\n\t%s=1 go test -run TestPluginDocs ./cmd/mmcpd\nand commit it. %s", updateDocsVar, docFirstDifference(old, doc))
	}
}

// docCheckDescription holds what the doc needs of a plugin: its own name, and a
// description for each tool, argument, setting and context provider.
func docCheckDescription(t *testing.T, name string, d *pluginpb.DescribeResponse) {
	t.Helper()
	if d.Name != name {
		t.Errorf("plugins/%s describes itself as %q", name, d.Name)
	}
	if len(d.Tools) == 0 {
		t.Errorf("plugin %s has no tool", name)
	}
	for _, tl := range d.Tools {
		if strings.TrimSpace(tl.Description) == "" {
			t.Errorf("plugin %s: tool %s has no description", name, tl.Name)
		}
		args, err := docArgs(tl.ArgsSchema)
		if err != nil {
			t.Errorf("plugin %s: tool %s: %v", name, tl.Name, err)
		}
		for _, a := range args {
			if a.Description == "" {
				t.Errorf("plugin %s: tool %s: argument %s has no description", name, tl.Name, a.Name)
			}
		}
	}
	for _, s := range d.Settings {
		if strings.TrimSpace(s.Description) == "" {
			t.Errorf("plugin %s: setting %s has no description", name, s.Key)
		}
	}
	for _, c := range d.Contexts {
		if strings.TrimSpace(c.Description) == "" {
			t.Errorf("plugin %s: context provider %s has no description", name, c.Key)
		}
	}
}

// docFirstDifference says where two texts first part, by line.
func docFirstDifference(old, new []byte) string {
	a, b := strings.Split(string(old), "\n"), strings.Split(string(new), "\n")
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y || i >= len(a) || i >= len(b) {
			return fmt.Sprintf("First difference at line %d:\n\tfile:      %q\n\tgenerated: %q", i+1, x, y)
		}
	}
	return ""
}

// docArg is one argument of a tool, read from its schema.
type docArg struct {
	Name, Type, Default, Allowed, Description string
	Required                                  bool
}

// docSchema is the part of a JSON Schema the doc shows.
type docSchema struct {
	Type        json.RawMessage   `json:"type"`
	Description string            `json:"description"`
	Default     json.RawMessage   `json:"default"`
	Enum        []json.RawMessage `json:"enum"`
	Const       json.RawMessage   `json:"const"`
	Minimum     json.RawMessage   `json:"minimum"`
	Maximum     json.RawMessage   `json:"maximum"`
	ExclMinimum json.RawMessage   `json:"exclusiveMinimum"`
	ExclMaximum json.RawMessage   `json:"exclusiveMaximum"`
	MinLength   *int              `json:"minLength"`
	MaxLength   *int              `json:"maxLength"`
	MinItems    *int              `json:"minItems"`
	MaxItems    *int              `json:"maxItems"`
	Pattern     string            `json:"pattern"`
	Format      string            `json:"format"`
	Items       *docSchema        `json:"items"`
	Required    []string          `json:"required"`
	Properties  json.RawMessage   `json:"properties"`
}

// docArgs reads a tool's arguments from its schema, in the schema's own
// order (the order of the Go struct the SDK reflected it from).
func docArgs(raw []byte) ([]docArg, error) {
	var root docSchema
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("argument schema: %w", err)
	}
	names, props, err := docOrderedObject(root.Properties)
	if err != nil {
		return nil, fmt.Errorf("argument schema properties: %w", err)
	}
	out := make([]docArg, 0, len(names))
	for _, n := range names {
		var p docSchema
		if err := json.Unmarshal(props[n], &p); err != nil {
			return nil, fmt.Errorf("argument %s: %w", n, err)
		}
		a := docArg{Name: n, Type: docType(&p), Allowed: docAllowed(&p), Description: docOneLine(p.Description), Required: slices.Contains(root.Required, n)}
		if len(p.Default) > 0 {
			a.Default = docValue(p.Default)
		}
		out = append(out, a)
	}
	return out, nil
}

// docOrderedObject splits a JSON object into its keys, in order, and values.
func docOrderedObject(raw json.RawMessage) ([]string, map[string]json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("not an object")
	}
	var keys []string
	vals := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		if _, dup := vals[k]; !dup {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	return keys, vals, nil
}

// docType is a property's JSON type in words: "integer", "array of string".
func docType(p *docSchema) string {
	var typ string
	var one string
	var many []string
	switch {
	case json.Unmarshal(p.Type, &one) == nil:
		typ = one
	case json.Unmarshal(p.Type, &many) == nil:
		typ = strings.Join(many, " or ")
	case len(p.Const) > 0 || len(p.Enum) > 0:
		typ = "enum"
	default:
		typ = "any"
	}
	if typ == "array" && p.Items != nil {
		typ = "array of " + docType(p.Items)
	}
	return typ
}

// docAllowed says which values a property takes beyond its type: its enum or
// const, its bounds, its pattern or format. Empty when any value of the type
// does.
func docAllowed(p *docSchema) string {
	var parts []string
	switch {
	case len(p.Const) > 0:
		parts = append(parts, "exactly "+docCode(docValue(p.Const)))
	case len(p.Enum) > 0:
		vals := make([]string, len(p.Enum))
		for i, v := range p.Enum {
			vals[i] = docCode(docValue(v))
		}
		parts = append(parts, strings.Join(vals, ", "))
	}
	parts = docRange(parts, p.Minimum, p.Maximum)
	if len(p.ExclMinimum) > 0 {
		parts = append(parts, "> "+docValue(p.ExclMinimum))
	}
	if len(p.ExclMaximum) > 0 {
		parts = append(parts, "< "+docValue(p.ExclMaximum))
	}
	parts = docCount(parts, p.MinLength, p.MaxLength, "characters")
	parts = docCount(parts, p.MinItems, p.MaxItems, "items")
	if p.Pattern != "" {
		parts = append(parts, "matching "+docCode(p.Pattern))
	}
	if p.Format != "" {
		parts = append(parts, "format "+p.Format)
	}
	if p.Items != nil {
		if a := docAllowed(p.Items); a != "" {
			parts = append(parts, "each "+a)
		}
	}
	return strings.Join(parts, "; ")
}

// docRange adds numeric bounds: "1 to 100", ">= 1", "<= 100".
func docRange(parts []string, minimum, maximum json.RawMessage) []string {
	switch lo, hi := docValue(minimum), docValue(maximum); {
	case lo != "" && hi != "":
		return append(parts, lo+" to "+hi)
	case lo != "":
		return append(parts, ">= "+lo)
	case hi != "":
		return append(parts, "<= "+hi)
	}
	return parts
}

// docCount adds length bounds: "1 to 200 characters", "at most 20 items".
func docCount(parts []string, lo, hi *int, unit string) []string {
	switch {
	case lo != nil && hi != nil:
		return append(parts, fmt.Sprintf("%d to %d %s", *lo, *hi, unit))
	case lo != nil:
		return append(parts, fmt.Sprintf("at least %d %s", *lo, unit))
	case hi != nil:
		return append(parts, fmt.Sprintf("at most %d %s", *hi, unit))
	}
	return parts
}

// docValue is a JSON value as written in the doc: strings bare, anything
// else compact JSON.
func docValue(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// renderPluginDocs writes the reference of the plugins described, in the
// order given (name order).
func renderPluginDocs(descs []*pluginpb.DescribeResponse) []byte {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Bundled plugins\n\n")
	w("<!-- Generated from the plugins' own descriptions by TestPluginDocs (cmd/mmcpd/plugindocs_test.go).\n")
	w("     Do not edit by hand: run `%s=1 go test -run TestPluginDocs ./cmd/mmcpd`. -->\n\n", updateDocsVar)
	w("Each plugin is built from `plugins/<name>` to `plugins/%s<name>` and run by the daemon: described at start-up (or from its cache), started when a call or a turn needs it, stopped after `MMCP_PLUGINS_IDLE` without use (see SPEC.md, Plugins). ", plugins.FilePrefix)
	w("A plugin's settings are environment variables `%s<KEY>` given to the daemon; the daemon passes each plugin its own and no other. ", "MMCP_PLUGIN_<SLUG>_")
	w("A plugin with a required setting missing, or a setting it cannot use, is on standby: its tools are listed as disabled, with the reason, until the setting is fixed and the daemon restarted. ")
	w("A tool that needs approval stops the turn with an action request (`POST /v1/chat` answers `\"type\": \"action_request\"`) and runs only once the user approves it (`POST /v1/chat/respond`). ")
	w("MCP servers join the same way: see [Adding an MCP server](#adding-an-mcp-server).\n\n")

	w("| plugin | version | tools | settings | context providers |\n|---|---|---|---|---|\n")
	for _, d := range descs {
		tools := make([]string, len(d.Tools))
		for i, tl := range d.Tools {
			tools[i] = docCode(tl.Name)
		}
		required := 0
		for _, s := range d.Settings {
			if s.Required {
				required++
			}
		}
		settings := fmt.Sprintf("%d", len(d.Settings))
		if required > 0 {
			settings += fmt.Sprintf(" (%d required)", required)
		}
		ctxs := make([]string, len(d.Contexts))
		for i, c := range d.Contexts {
			ctxs[i] = docCode(d.Name + "." + c.Key)
		}
		w("| [%s](#%s) | %s | %s | %s | %s |\n", d.Name, docAnchor(d.Name), docText(d.Version), strings.Join(tools, ", "), settings, docOrDash(strings.Join(ctxs, ", ")))
	}

	for _, d := range descs {
		w("\n## %s\n\n", d.Name)
		w("Version %s, built to `plugins/%s%s`.\n", docText(d.Version), plugins.FilePrefix, d.Name)

		w("\n### Settings\n\n")
		if len(d.Settings) == 0 {
			w("None.\n")
		} else {
			w("| variable | required | secret | default | description |\n|---|---|---|---|---|\n")
			for _, s := range d.Settings {
				def := "-"
				if s.Default != "" {
					def = docCode(s.Default)
				}
				w("| `%s%s` | %s | %s | %s | %s |\n", plugins.EnvPrefix(d.Name), s.Key, docYesNo(s.Required), docYesNo(s.Secret), def, docText(s.Description))
			}
		}

		w("\n### Tools\n")
		for _, tl := range d.Tools {
			w("\n#### %s\n\n", tl.Name)
			w("%s\n\n", docText(tl.Description))
			if tl.NeedsApproval {
				w("Needs approval: **yes**, the user approves each call before it runs.")
			} else {
				w("Needs approval: no.")
			}
			if tl.TimeoutMs > 0 {
				w(" Time limit: %s.", time.Duration(tl.TimeoutMs)*time.Millisecond)
			}
			w("\n\n")
			args, err := docArgs(tl.ArgsSchema)
			switch {
			case err != nil:
				w("Arguments: the schema could not be read (%s).\n", docText(err.Error()))
			case len(args) == 0:
				w("Arguments: none.\n")
			default:
				w("| argument | type | required | default | allowed | description |\n|---|---|---|---|---|---|\n")
				for _, a := range args {
					def := "-"
					if a.Default != "" {
						def = docCode(a.Default)
					}
					w("| `%s` | %s | %s | %s | %s | %s |\n", a.Name, docText(a.Type), docYesNo(a.Required), def, docOrDash(docCellCode(a.Allowed)), docOrDash(docText(a.Description)))
				}
			}
		}

		w("\n### Context providers\n\n")
		if len(d.Contexts) == 0 {
			w("None.\n")
		} else {
			w("Their lines go into the system prompt once per turn, while the plugin is ready.\n\n")
			w("| key | description |\n|---|---|\n")
			for _, c := range d.Contexts {
				w("| `%s.%s` | %s |\n", d.Name, c.Key, docText(c.Description))
			}
		}
	}
	return []byte(b.String())
}

func docYesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

func docOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// docAnchor is the id GitHub gives a heading of plain lower-case words.
func docAnchor(heading string) string {
	return strings.ReplaceAll(strings.ToLower(heading), " ", "-")
}

// docOneLine folds whitespace, newlines included, into single spaces.
func docOneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// docEscaper keeps prose from turning into markup: a "<id>" would be
// read as an HTML tag and vanish, a "|" would split a table cell.
var docEscaper = strings.NewReplacer(`\`, `\\`, "<", `\<`, "|", `\|`, "*", `\*`, "`", "\\`")

// docText is prose from a plugin, safe in Markdown, on one line.
func docText(s string) string { return docEscaper.Replace(docOneLine(s)) }

// docCellCode is a cell whose code spans are already formatted: only the
// pipes, which would end the cell even inside code, are escaped.
func docCellCode(s string) string { return strings.ReplaceAll(docOneLine(s), "|", `\|`) }

// docCode is s as inline code, fenced with enough backticks.
func docCode(s string) string {
	s = docOneLine(s)
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + strings.ReplaceAll(s, "|", `\|`) + fence
}
