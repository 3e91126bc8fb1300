package config

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestBackendsDefaultToOneOllama(t *testing.T) {
	cleanEnv(t)
	t.Setenv("MMCP_OLLAMA_HOST", "gpu-box")
	t.Setenv("MMCP_OLLAMA_MODEL", "llama3.1:8b")
	c := mustLoad(t)
	list, err := c.Backends()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0] != (Backend{Kind: KindOllama, URL: "http://gpu-box:11434", Model: "llama3.1:8b"}) {
		t.Errorf("Backends() = %+v", list)
	}
}

func TestBackendsParse(t *testing.T) {
	cleanEnv(t)
	t.Setenv("MMCP_LLM_BACKENDS", " ollama=gpu1#qwen2.5:7b-instruct , OPENAI=https://nas:8080/v1/#qwen2.5-7b")
	t.Setenv("MMCP_LLM_2_API_KEY", "sk-canary-2")
	c := mustLoad(t)
	list, err := c.Backends()
	if err != nil {
		t.Fatal(err)
	}
	want := []Backend{
		{Kind: KindOllama, URL: "http://gpu1:11434", Model: "qwen2.5:7b-instruct", KeyVar: "MMCP_LLM_1_API_KEY"},
		{Kind: KindOpenAI, URL: "https://nas:8080/v1", Model: "qwen2.5-7b", APIKey: "sk-canary-2", KeyVar: "MMCP_LLM_2_API_KEY"},
	}
	if len(list) != 2 || list[0] != want[0] || list[1] != want[1] {
		t.Fatalf("Backends() = %+v", list)
	}
	if list[1].Name() != "openai=https://nas:8080/v1#qwen2.5-7b" {
		t.Errorf("Name() = %q", list[1].Name())
	}
	// The key is masked wherever the configuration is shown or logged.
	var b bytes.Buffer
	if err := c.Effective(&b); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("backends", "list", list, "one", list[1])
	shown := b.String() + fmt.Sprintf("%v %+v %#v", list, list, list) + logged.String()
	if strings.Contains(shown, "sk-canary") {
		t.Errorf("the key shows:\n%s", shown)
	}
	if !strings.Contains(b.String(), "\nMMCP_LLM_2_API_KEY=**********\n") || !strings.Contains(b.String(), "\nMMCP_LLM_BACKENDS= ollama=gpu1") {
		t.Errorf("Effective() =\n%s", b.String())
	}
}

func TestBackendsErrors(t *testing.T) {
	tests := []struct {
		value string
		env   map[string]string
		want  string
	}{
		{value: "gpu1#qwen", want: "entry 1: no kind= before the URL"},
		{value: "ollama=gpu1", want: "entry 1: no #model after the URL"},
		{value: "ollama=gpu1#", want: "entry 1: no #model"},
		{value: "vllm=http://x:8000/v1#m", want: `entry 1: unknown kind "vllm"`},
		{value: "ollama=gpu1#m,,openai=http://x/v1#m", want: "entry 2: empty"},
		{value: "openai=ftp://x/v1#m", want: "not an http(s) URL"},
		{value: "openai=http://user:hunter2@x/v1#m", want: "user:password@ in the URL is not supported"},
		{value: "openai=http://x/v1?key=hunter2#m", want: "a query in the URL is not supported"},
		{value: "openai=http://x/v1#org#m", want: "a query in the URL is not supported"},
		{value: "ollama=gpu1#m,ollama=http://gpu1:11434#m", want: "entry 2: the same server and model as entry 1"},
		{value: "ollama=gpu1#m", env: map[string]string{"MMCP_LLM_1_API_KEY": "hunter2"}, want: "MMCP_LLM_1_API_KEY is set, but entry 1 is an Ollama server"},
		{value: "openai=http://x/v1#m", env: map[string]string{"MMCP_LLM_3_API_KEY": "hunter2"}, want: "MMCP_LLM_3_API_KEY is set, but MMCP_LLM_BACKENDS has 1 entries"},
		{value: "", env: map[string]string{"MMCP_LLM_1_API_KEY": "hunter2"}, want: "MMCP_LLM_1_API_KEY is set, but MMCP_LLM_BACKENDS is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv("MMCP_LLM_BACKENDS", tt.value)
			setEnv(t, tt.env)
			_, err := Load()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load() error = %v, want one saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows a secret: %v", err)
			}
		})
	}
}
