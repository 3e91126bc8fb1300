package loop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"

	convo "github.com/mmcpd/mmcpd/pkg/context"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/schema"
)

// instantModel answers from a fixed cycle of replies at once, in process: what
// is left of a step's time is the loop's own.
type instantModel struct {
	replies []string
	i       int
}

func (m *instantModel) Chat(context.Context, []convo.Message, json.RawMessage) (llm.Reply, error) {
	r := m.replies[m.i%len(m.replies)]
	m.i++
	return llm.Reply{Content: r, Usage: llm.Usage{Calls: 1, PromptTokens: 100, CompletionTokens: 20}}, nil
}

type benchArgs struct {
	Query     string   `json:"query" jsonschema:"minLength=1,description=What to look for"`
	MediaType string   `json:"media_type,omitempty" jsonschema:"enum=movie,enum=tv,enum=episode"`
	Year      int      `json:"year,omitempty" jsonschema:"minimum=1870,maximum=2100"`
	Limit     int      `json:"limit,omitempty" jsonschema:"minimum=1,maximum=50,default=5"`
	Tags      []string `json:"tags,omitempty" jsonschema:"maxItems=10"`
}

// benchTools has n tools that answer at once with a small result.
type benchTools struct{ tools []loop.Tool }

func newBenchTools(b *testing.B, n int) *benchTools {
	s, err := schema.Reflect(benchArgs{})
	if err != nil {
		b.Fatal(err)
	}
	bt := &benchTools{}
	for i := range n {
		bt.tools = append(bt.tools, loop.Tool{Tool: schema.Tool{Name: fmt.Sprintf("tool_%02d", i), Description: "A tool for benchmarks.", Schema: s}})
	}
	return bt
}

func (bt *benchTools) Tools() []loop.Tool { return bt.tools }
func (bt *benchTools) Call(context.Context, string, json.RawMessage) (string, error) {
	return `{"results":[{"id":1,"title":"Dune","year":2021}]}`, nil
}

// BenchmarkStep measures one step's own overhead: window, system prompt,
// union lookup, decode and validation, the tool call path, events and the log
// line, with a model and tools that take no time. Each op is one turn of two
// steps (a tool call, then the answer); ns/step is the figure to read.
func BenchmarkStep(b *testing.B) {
	for _, n := range []int{1, 20} {
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			model := &instantModel{replies: []string{
				`{"thought":"I should search for it first.","action":"tool_07","args":{"query":"Dune","media_type":"movie","year":2021}}`,
				`{"thought":"I have the answer.","action":"final_response","args":{"answer":"Dune (2021) is available."}}`,
			}}
			if n == 1 {
				model.replies[0] = `{"thought":"I should search for it first.","action":"tool_00","args":{"query":"Dune","media_type":"movie","year":2021}}`
			}
			r := &loop.Runner{
				Model:  model,
				Tools:  newBenchTools(b, n),
				Config: loop.DefaultConfig,
				Log:    slog.New(slog.NewJSONHandler(io.Discard, nil)),
			}
			// Warm the union cache: compiling belongs to the first turn only.
			if _, err := r.Run(context.Background(), &convo.Conversation{}, "warm up", nil); err != nil {
				b.Fatal(err)
			}
			events := 0
			obs := func(loop.Event) { events++ }
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				var conv convo.Conversation
				res, err := r.Run(context.Background(), &conv, "Is Dune in the library?", obs)
				if err != nil || len(res.Steps) != 2 {
					b.Fatalf("%v %+v", err, res)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/step")
		})
	}
}
