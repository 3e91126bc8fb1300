package mcp

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, problem string }{
		{`{"command":"node","args":["x.js"],"env":{"A":"1"},"trusted":["t"]}`, ""},
		{`{"url":"https://h.example/mcp","headers":{"Authorization":"Bearer x"}}`, ""},
		{`{}`, "names neither a command"},
		{`{"command":"a","url":"http://h/"}`, "names both"},
		{`{"command":"a","headers":{"X":"y"}}`, "headers are for a url"},
		{`{"url":"http://h/","env":{"X":"y"}}`, "args and env are for a command"},
		{`{"url":"file:///etc/passwd"}`, "url must be an http or https URL"},
		{`{"command":"a","trusted":"all"}`, "cannot unmarshal"},
		{`{"command":"a","trustd":["x"]}`, `unknown field "trustd"`},
		{`{"command":"a"} {}`, "more than one JSON value"},
		{`{"command":"a","args":["` + strings.Repeat("x", maxManifestBytes) + `"]}`, "is over"},
	} {
		p := filepath.Join(dir, "x"+Suffix)
		if err := os.WriteFile(p, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(p)
		if (err == nil) != (tc.problem == "") || err != nil && !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("%.60s: %v, want %q", tc.body, err, tc.problem)
		}
	}
}

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.mcp.json", "a.mcp.json", ".mcp.json", "c.json", "mmcp-plugin-x"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d.mcp.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Discover(dir)
	if err != nil || len(got) != 2 || NameOf(got[0]) != "a" || NameOf(got[1]) != "b" {
		t.Errorf("Discover: %v, %v", got, err)
	}
	if got, err := Discover(filepath.Join(dir, "none")); got != nil || err != nil {
		t.Errorf("missing folder: %v, %v", got, err)
	}
}

func TestResolve(t *testing.T) {
	vars := map[string]string{"MMCP_PLUGIN_FS_TOKEN": "tok", "MMCP_PLUGIN_FS_EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	m := &Manifest{Env: map[string]string{"A": "x-${MMCP_PLUGIN_FS_TOKEN}-y", "B": "plain $HOME"}, Headers: map[string]string{"H": "${MMCP_PLUGIN_FS_TOKEN}"}}
	env, headers, err := m.Resolve("MMCP_PLUGIN_FS_", lookup)
	if err != nil || env["A"] != "x-tok-y" || env["B"] != "plain $HOME" || headers["H"] != "tok" {
		t.Errorf("Resolve: %v %v %v", env, headers, err)
	}
	var unset *Unset
	m = &Manifest{Env: map[string]string{"A": "${MMCP_PLUGIN_FS_MISSING}", "B": "${MMCP_PLUGIN_FS_EMPTY}"}}
	if _, _, err := m.Resolve("MMCP_PLUGIN_FS_", lookup); !errors.As(err, &unset) || err.Error() != "MMCP_PLUGIN_FS_MISSING is required; MMCP_PLUGIN_FS_EMPTY is required" {
		t.Errorf("unset: %v", err)
	}
	for _, ref := range []string{"${MMCP_API_TOKEN}", "${MMCP_PLUGIN_FSX_KEY}", "${MMCP_PLUGIN_FS_}", "${HOME}"} {
		m = &Manifest{Headers: map[string]string{"H": ref}}
		if _, _, err := m.Resolve("MMCP_PLUGIN_FS_", lookup); err == nil || errors.As(err, &unset) || !strings.Contains(err.Error(), "may only refer to its own variables") {
			t.Errorf("%s: %v", ref, err)
		}
	}
	m = &Manifest{Env: map[string]string{"A": "${MMCP_PLUGIN_FS_B} ${MMCP_PLUGIN_FS_A}"}, Headers: map[string]string{"H": "${MMCP_PLUGIN_FS_A}"}}
	if got := strings.Join(m.References(), ","); got != "MMCP_PLUGIN_FS_A,MMCP_PLUGIN_FS_B" {
		t.Errorf("References: %s", got)
	}
}

func TestToolName(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"everything", "get-env"}:     "everything_get_env",
		{"home-assistant", "TurnOn"}:  "home_assistant_turnon",
		{"fs", "read.file/é"}:         "fs_read_file___",
		{"a", "already_snake_case_1"}: "a_already_snake_case_1",
	} {
		if got := ToolName(in[0], in[1]); got != want {
			t.Errorf("ToolName(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}

func TestObservation(t *testing.T) {
	size := int64(2048)
	res := &sdk.CallToolResult{
		Content: []sdk.Content{
			&sdk.TextContent{Text: "hello"},
			&sdk.ImageContent{MIMEType: "image/png", Data: make([]byte, 300)},
			&sdk.AudioContent{MIMEType: "audio/wav", Data: make([]byte, 7)},
			&sdk.ResourceLink{URI: "file:///a.txt", Name: "a", MIMEType: "text/plain", Size: &size},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://t", MIMEType: "text/plain", Text: "inline text"}},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "mem://b", Blob: make([]byte, 9)}},
			&sdk.TextContent{Text: `{"b": 2, "a": 1}`},
		},
		StructuredContent: map[string]any{"a": 1, "b": 2},
	}
	want := "hello\n[image: image/png, 300 bytes, not shown]\n[audio: audio/wav, 7 bytes, not shown]\n" +
		"[resource link: file:///a.txt (a), text/plain, 2048 bytes]\n[resource mem://t, text/plain]\ninline text\n" +
		"[resource mem://b: unknown type, 9 bytes, not shown]\n{\"b\": 2, \"a\": 1}"
	if got := Observation(res); got != want {
		t.Errorf("Observation:\n%s\nwant:\n%s", got, want)
	}
	// Structured content no text block carries is added.
	res = &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "see data"}}, StructuredContent: map[string]any{"n": 3}}
	if got := Observation(res); got != "see data\n{\"n\":3}" {
		t.Errorf("structured: %q", got)
	}
}
