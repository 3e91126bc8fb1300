package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mmcpd/mmcpd/internal/s2g"
	"github.com/mmcpd/mmcpd/pkg/llm/ollamatest"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/schema"
	"github.com/mmcpd/mmcpd/pkg/server"
)

// TestSchemasFromStrangers: a plugin declaring raw schemas Ollama's
// converter cannot read as they are, and tools no union takes, through the
// real daemon: the bad tools are refused alone, with why, in /v1/tools and
// /v1/plugins; the others serve; /v1/schema and the format Ollama gets are
// accepted by Ollama's own converter.
func TestSchemasFromStrangers(t *testing.T) {
	conv := s2g.Build(t)
	dir := pluginsFolder(t, "works", "badschema")
	fake := ollamatest.New(t)
	addr, logs, _ := startDaemon(t, []string{"MMCP_OLLAMA_HOST=" + fake.URL, "MMCP_PLUGINS_DIR=" + dir})
	ready := waitReady(t, addr, logs)

	refused := map[string]string{
		"badschema_text": `refused: tool "badschema_text": schema must be an object schema ("type": "object")`,
		"BadSchema-Caps": `refused: tool name "BadSchema-Caps" must match ^[a-z][a-z0-9_]{0,63}$`,
	}
	tools := listTools(t, addr)
	for _, name := range []string{"badschema_any", "badschema_echo", "works_echo"} {
		if tl, ok := tools[name]; !ok || tl.Disabled != "" {
			t.Errorf("/v1/tools %s: %+v, want usable", name, tl)
		}
	}
	ps, _ := listPlugins(t, addr)
	if p := ps["badschema"]; p.Status != plugins.StatusReady {
		t.Errorf("badschema: %+v", p)
	}
	for name, why := range refused {
		if tl := tools[name]; tl.Disabled != why {
			t.Errorf("/v1/tools %s: disabled %q, want %q", name, tl.Disabled, why)
		}
		var found bool
		for _, ti := range ps["badschema"].Tools {
			if ti.Name == name {
				found = true
				if ti.Disabled != why {
					t.Errorf("/v1/plugins %s: disabled %q, want %q", name, ti.Disabled, why)
				}
			}
		}
		if !found {
			t.Errorf("/v1/plugins lacks %s", name)
		}
		if want := "tool " + name + " of plugin badschema is refused: "; !strings.Contains(ready, want) {
			t.Errorf("/readyz lacks %q: %s", want, ready)
		}
	}

	code, union := apiGet(t, addr, "/v1/schema")
	if code != http.StatusOK || !strings.Contains(string(union), `"badschema_any"`) || strings.Contains(string(union), "badschema_text") {
		t.Fatalf("/v1/schema: %d %s", code, union)
	}
	conv.Accepts(t, "/v1/schema", union)

	fake.Push(answer("fine"))
	chat := client{base: "http://" + addr, http: &http.Client{Timeout: time.Minute}}
	if _, err := chat.chat(server.ChatRequest{Message: "hello"}); err != nil {
		t.Fatalf("chat: %v\n%s", err, logs)
	}
	reqs := fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("Ollama got no request")
	}
	conv.Accepts(t, "the format Ollama got", reqs[0].Format)
}

// TestBundledUnionFormat: the union of every bundled tool, as Ollama gets it
// when every plugin serves, passes Ollama's converter, grammar size included.
func TestBundledUnionFormat(t *testing.T) {
	conv := s2g.Build(t)
	dir, names := bundledPlugins(t)
	var tools []schema.Tool
	var solo []string
	for _, n := range names {
		d, err := describePlugin(filepath.Join(dir, plugins.FilePrefix+n))
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range d.Tools {
			tools = append(tools, schema.Tool{Name: tl.Name, Description: tl.Description, Schema: tl.ArgsSchema})
			if tl.NeedsApproval {
				solo = append(solo, tl.Name)
			}
		}
	}
	u, err := schema.NewUnion(tools)
	if err != nil {
		t.Fatal(err)
	}
	conv.Accepts(t, "the union of the bundled tools", u.Format())
	t.Logf("%d bundled tools: format %d bytes, full schema %d bytes", len(tools), len(u.Format()), len(u.Schema()))
	// With the default batch of parallel calls, the approval tools left out
	// of it, as the daemon sends it.
	b, err := schema.NewBatchUnion(tools, schema.Batch{Max: 3, Solo: solo})
	if err != nil {
		t.Fatal(err)
	}
	conv.Accepts(t, "the union of the bundled tools with the batch branch", b.Format())
	t.Logf("with the batch branch: format %d bytes", len(b.Format()))
}
