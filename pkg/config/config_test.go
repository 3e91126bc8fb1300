package config

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// documented is the public contract: every variable, in struct order, with
// the default Usage shows. It is kept by hand on purpose, so that a renamed
// field or a changed split_words derivation breaks a test instead of silently
// renaming a setting.
var documented = []struct{ name, def string }{
	{"MMCP_LISTEN_ADDR", "127.0.0.1:8787"},
	{"MMCP_ALLOWED_HOSTS", ""},
	{"MMCP_PUBLIC_URL", ""},
	{"MMCP_OLLAMA_HOST", "http://127.0.0.1:11434"},
	{"MMCP_OLLAMA_MODEL", "qwen2.5:7b-instruct"},
	{"MMCP_OLLAMA_NUM_CTX", "8192"},
	{"MMCP_OLLAMA_KEEP_ALIVE", "5m"},
	{"MMCP_LLM_BACKENDS", ""},
	{"MMCP_LLM_TEMPERATURE", "0"},
	{"MMCP_LLM_TIMEOUT", "120s"},
	{"MMCP_LLM_IDLE_TIMEOUT", "60s"},
	{"MMCP_LLM_MAX_CONTEXT_CHARS", "28000"},
	{"MMCP_LLM_MAX_RETRIES", "2"},
	{"MMCP_LLM_RATE_LIMIT_RETRIES", "3"},
	{"MMCP_LOOP_MAX_STEPS", "5"},
	{"MMCP_TOOL_TIMEOUT", "30s"},
	{"MMCP_TOOL_MAX_OUTPUT_CHARS", "4000"},
	{"MMCP_TOOL_RETRIES", "2"},
	{"MMCP_PARALLEL_CALLS", "3"},
	{"MMCP_PLUGINS_DIR", "./plugins"},
	{"MMCP_DATA_DIR", "./data"},
	{"MMCP_PLUGINS_START_TIMEOUT", "10s"},
	{"MMCP_PLUGINS_KILL_GRACE", "2s"},
	{"MMCP_PLUGINS_IDLE", "10m"},
	{"MMCP_PLUGINS_USER", "nobody"},
	{"MMCP_TOOLS_MAX", "64"},
	{"MMCP_TOOL_MAX_DESCRIPTION_CHARS", "1000"},
	{"MMCP_TOOL_MAX_SCHEMA_BYTES", "8192"},
	{"MMCP_BREAKER_FAILURES", "5"},
	{"MMCP_BREAKER_COOLDOWN", "30s"},
	{"MMCP_CONTEXT_PROVIDER_TIMEOUT", "300ms"},
	{"MMCP_CONTEXT_TIMEOUT", "800ms"},
	{"MMCP_MAX_MESSAGE_CHARS", "8000"},
	{"MMCP_MAX_CONCURRENT_TURNS", "16"},
	{"MMCP_MAX_CONNECTIONS", "256"},
	{"MMCP_APPROVAL_TTL", "10m"},
	{"MMCP_TURN_TIMEOUT", "10m"},
	{"MMCP_STREAM_HEARTBEAT", "10s"},
	{"MMCP_API_TOKEN", ""},
	{"MMCP_SHUTDOWN_GRACE", "5s"},
	{"MMCP_OPENAI_TASKS", "plain"},
	{"MMCP_LOG_LEVEL", "info"},
	{"MMCP_LOG_FORMAT", "text"},
}

var defaults = Config{
	ListenAddr:              "127.0.0.1:8787",
	OllamaHost:              "http://127.0.0.1:11434",
	OllamaModel:             "qwen2.5:7b-instruct",
	OllamaNumCtx:            8192,
	OllamaKeepAlive:         5 * time.Minute,
	LLMTemperature:          0,
	LLMTimeout:              120 * time.Second,
	LLMIdleTimeout:          60 * time.Second,
	LLMMaxContextChars:      28000,
	LLMMaxRetries:           2,
	LLMRateLimitRetries:     3,
	LoopMaxSteps:            5,
	ToolTimeout:             30 * time.Second,
	ToolMaxOutputChars:      4000,
	ToolRetries:             2,
	ParallelCalls:           3,
	PluginsDir:              "./plugins",
	DataDir:                 "./data",
	PluginsStartTimeout:     10 * time.Second,
	PluginsKillGrace:        2 * time.Second,
	PluginsIdle:             10 * time.Minute,
	PluginsUser:             "nobody",
	ToolsMax:                64,
	ToolMaxDescriptionChars: 1000,
	ToolMaxSchemaBytes:      8192,
	BreakerFailures:         5,
	BreakerCooldown:         30 * time.Second,
	ContextProviderTimeout:  300 * time.Millisecond,
	ContextTimeout:          800 * time.Millisecond,
	MaxMessageChars:         8000,
	MaxConcurrentTurns:      16,
	MaxConnections:          256,
	ApprovalTTL:             10 * time.Minute,
	TurnTimeout:             10 * time.Minute,
	StreamHeartbeat:         10 * time.Second,
	APIToken:                "",
	ShutdownGrace:           5 * time.Second,
	OpenaiTasks:             "plain",
	LogLevel:                "info",
	LogFormat:               "text",
}

// cleanEnv unsets every variable Load may read, restoring them after the
// test. t.Setenv registers the restore; os.Unsetenv then makes it truly unset,
// because an empty value means something different to envconfig.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MMCP_") || k == "OLLAMA_HOST" {
			t.Setenv(k, "")
			if err := os.Unsetenv(k); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
}

func mustLoad(t *testing.T) Config {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func TestVariableNames(t *testing.T) {
	var want []string
	for _, d := range documented {
		want = append(want, d.name)
	}
	if got := envNames(); !reflect.DeepEqual(got, want) {
		t.Errorf("envconfig derives\n%q\nwant\n%q", got, want)
	}
}

func TestDefaults(t *testing.T) {
	cleanEnv(t)
	if got := mustLoad(t); got != defaults {
		t.Errorf("Load() =\n%+v\nwant\n%+v", got, defaults)
	}
}

// readCases sets each variable to a valid non-default value.
var readCases = []struct {
	name, value string
	apply       func(*Config)
}{
	{"MMCP_LISTEN_ADDR", "0.0.0.0:9000", func(c *Config) { c.ListenAddr = "0.0.0.0:9000" }},
	{"MMCP_ALLOWED_HOSTS", "nas.local, media.example.com:8787,[fd00::1]:8787,*,", func(c *Config) { c.AllowedHosts = "nas.local, media.example.com:8787,[fd00::1]:8787,*," }},
	{"MMCP_PUBLIC_URL", "https://media.example.com/mmcpd/", func(c *Config) { c.PublicURL = "https://media.example.com/mmcpd/" }},
	{"MMCP_OLLAMA_HOST", "http://gpu-box:11434", func(c *Config) { c.OllamaHost = "http://gpu-box:11434" }},
	{"MMCP_OLLAMA_MODEL", "llama3.1:8b", func(c *Config) { c.OllamaModel = "llama3.1:8b" }},
	{"MMCP_OLLAMA_NUM_CTX", "16384", func(c *Config) { c.OllamaNumCtx = 16384 }},
	{"MMCP_OLLAMA_KEEP_ALIVE", "-1s", func(c *Config) { c.OllamaKeepAlive = -time.Second }},
	{"MMCP_LLM_BACKENDS", "ollama=gpu1#qwen2.5:7b-instruct,openai=http://nas:8080/v1#qwen2.5-7b", func(c *Config) {
		c.LLMBackends = "ollama=gpu1#qwen2.5:7b-instruct,openai=http://nas:8080/v1#qwen2.5-7b"
	}},
	{"MMCP_LLM_TEMPERATURE", "0.7", func(c *Config) { c.LLMTemperature = 0.7 }},
	{"MMCP_LLM_TIMEOUT", "45s", func(c *Config) { c.LLMTimeout = 45 * time.Second }},
	{"MMCP_LLM_IDLE_TIMEOUT", "15s", func(c *Config) { c.LLMIdleTimeout = 15 * time.Second }},
	{"MMCP_LLM_MAX_CONTEXT_CHARS", "12000", func(c *Config) { c.LLMMaxContextChars = 12000 }},
	{"MMCP_LLM_MAX_RETRIES", "0", func(c *Config) { c.LLMMaxRetries = 0 }},
	{"MMCP_LLM_RATE_LIMIT_RETRIES", "10", func(c *Config) { c.LLMRateLimitRetries = 10 }},
	{"MMCP_LOOP_MAX_STEPS", "012", func(c *Config) { c.LoopMaxSteps = 12 }}, // decimal, not octal
	{"MMCP_TOOL_TIMEOUT", "2m", func(c *Config) { c.ToolTimeout = 2 * time.Minute }},
	{"MMCP_TOOL_MAX_OUTPUT_CHARS", "800", func(c *Config) { c.ToolMaxOutputChars = 800 }},
	{"MMCP_TOOL_RETRIES", "0", func(c *Config) { c.ToolRetries = 0 }},
	{"MMCP_PARALLEL_CALLS", "1", func(c *Config) { c.ParallelCalls = 1 }},
	{"MMCP_PLUGINS_DIR", "/etc/mmcpd/plugins", func(c *Config) { c.PluginsDir = "/etc/mmcpd/plugins" }},
	{"MMCP_DATA_DIR", "/var/lib/mmcpd", func(c *Config) { c.DataDir = "/var/lib/mmcpd" }},
	{"MMCP_PLUGINS_START_TIMEOUT", "3s", func(c *Config) { c.PluginsStartTimeout = 3 * time.Second }},
	{"MMCP_PLUGINS_KILL_GRACE", "1s", func(c *Config) { c.PluginsKillGrace = time.Second }},
	{"MMCP_PLUGINS_IDLE", "0", func(c *Config) { c.PluginsIdle = 0 }},
	{"MMCP_PLUGINS_USER", "mmcp", func(c *Config) { c.PluginsUser = "mmcp" }},
	{"MMCP_TOOLS_MAX", "10", func(c *Config) { c.ToolsMax = 10 }},
	{"MMCP_TOOL_MAX_DESCRIPTION_CHARS", "500", func(c *Config) { c.ToolMaxDescriptionChars = 500 }},
	{"MMCP_TOOL_MAX_SCHEMA_BYTES", "4096", func(c *Config) { c.ToolMaxSchemaBytes = 4096 }},
	{"MMCP_BREAKER_FAILURES", "3", func(c *Config) { c.BreakerFailures = 3 }},
	{"MMCP_BREAKER_COOLDOWN", "1m", func(c *Config) { c.BreakerCooldown = time.Minute }},
	{"MMCP_CONTEXT_PROVIDER_TIMEOUT", "100ms", func(c *Config) { c.ContextProviderTimeout = 100 * time.Millisecond }},
	{"MMCP_CONTEXT_TIMEOUT", "1s", func(c *Config) { c.ContextTimeout = time.Second }},
	{"MMCP_MAX_MESSAGE_CHARS", "400", func(c *Config) { c.MaxMessageChars = 400 }},
	{"MMCP_MAX_CONCURRENT_TURNS", "2", func(c *Config) { c.MaxConcurrentTurns = 2 }},
	{"MMCP_MAX_CONNECTIONS", "1024", func(c *Config) { c.MaxConnections = 1024 }},
	{"MMCP_APPROVAL_TTL", "1m", func(c *Config) { c.ApprovalTTL = time.Minute }},
	{"MMCP_TURN_TIMEOUT", "30m", func(c *Config) { c.TurnTimeout = 30 * time.Minute }},
	{"MMCP_STREAM_HEARTBEAT", "2s", func(c *Config) { c.StreamHeartbeat = 2 * time.Second }},
	{"MMCP_API_TOKEN", "s3cret", func(c *Config) { c.APIToken = "s3cret" }},
	{"MMCP_SHUTDOWN_GRACE", "30s", func(c *Config) { c.ShutdownGrace = 30 * time.Second }},
	{"MMCP_OPENAI_TASKS", "turn", func(c *Config) { c.OpenaiTasks = "turn" }},
	{"MMCP_LOG_LEVEL", " DEBUG ", func(c *Config) { c.LogLevel = "debug" }},
	{"MMCP_LOG_FORMAT", "JSON", func(c *Config) { c.LogFormat = "json" }},
}

func TestEachVariableIsRead(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range readCases {
		covered[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(tc.name, tc.value)
			want := defaults
			tc.apply(&want)
			if got := mustLoad(t); got != want {
				t.Errorf("%s=%q: Load() =\n%+v\nwant\n%+v", tc.name, tc.value, got, want)
			}
		})
	}
	for _, d := range documented {
		if !covered[d.name] {
			t.Errorf("no read case for %s", d.name)
		}
	}
}

// An explicit `envconfig:"..."` tag would make envconfig also read the
// unprefixed name; none of them may have any effect.
func TestUnprefixedNamesIgnored(t *testing.T) {
	cleanEnv(t)
	for _, tc := range readCases {
		if tc.name == "MMCP_OLLAMA_HOST" {
			continue // OLLAMA_HOST is the deliberate fallback, tested below
		}
		t.Setenv(strings.TrimPrefix(tc.name, "MMCP_"), tc.value)
	}
	t.Setenv("PORT", "1")
	if got := mustLoad(t); got != defaults {
		t.Errorf("unprefixed variables changed the config:\n%+v\nwant\n%+v", got, defaults)
	}
}

func TestOllamaHostFallback(t *testing.T) {
	tests := []struct {
		desc string
		env  map[string]string
		want string
	}{
		{"neither set", nil, "http://127.0.0.1:11434"},
		{"OLLAMA_HOST used", map[string]string{"OLLAMA_HOST": "gpu-box:11500"}, "http://gpu-box:11500"},
		{"OLLAMA_HOST bind address", map[string]string{"OLLAMA_HOST": "0.0.0.0"}, "http://127.0.0.1:11434"},
		{"empty OLLAMA_HOST ignored", map[string]string{"OLLAMA_HOST": ""}, "http://127.0.0.1:11434"},
		{"MMCP wins", map[string]string{"OLLAMA_HOST": "gpu-box", "MMCP_OLLAMA_HOST": "https://proxy.lan/ollama"}, "https://proxy.lan/ollama"},
		{"MMCP wins even when it equals the default", map[string]string{"OLLAMA_HOST": "gpu-box", "MMCP_OLLAMA_HOST": "http://127.0.0.1:11434"}, "http://127.0.0.1:11434"},
		{"empty MMCP counts as unset", map[string]string{"OLLAMA_HOST": "gpu-box", "MMCP_OLLAMA_HOST": ""}, "http://gpu-box:11434"},
		{"empty MMCP alone means local", map[string]string{"MMCP_OLLAMA_HOST": ""}, "http://127.0.0.1:11434"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			cleanEnv(t)
			setEnv(t, tc.env)
			if got := mustLoad(t).OllamaHost; got != tc.want {
				t.Errorf("OllamaHost = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestOllamaHostErrorNamesTheVariableRead(t *testing.T) {
	cleanEnv(t)
	t.Setenv("OLLAMA_HOST", "ftp://gpu-box")
	_, err := Load()
	if err == nil || !strings.HasPrefix(err.Error(), "OLLAMA_HOST: ") {
		t.Fatalf("Load() error = %v, want one naming OLLAMA_HOST", err)
	}

	t.Setenv("MMCP_OLLAMA_HOST", "ftp://gpu-box")
	_, err = Load()
	if err == nil || !strings.HasPrefix(err.Error(), "MMCP_OLLAMA_HOST: ") {
		t.Fatalf("Load() error = %v, want one naming MMCP_OLLAMA_HOST", err)
	}
}

func TestNormalizeOllamaHost(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "http://127.0.0.1:11434"},
		{"localhost", "http://localhost:11434"},
		{"localhost:1234", "http://localhost:1234"},
		{"gpu-box", "http://gpu-box:11434"},
		{"10.0.0.5", "http://10.0.0.5:11434"},
		{"0.0.0.0", "http://127.0.0.1:11434"},
		{"0.0.0.0:11434", "http://127.0.0.1:11434"},
		{":11434", "http://127.0.0.1:11434"},
		{"::1", "http://[::1]:11434"},
		{"[::]:11500", "http://[::1]:11500"},
		{"[::]", "http://[::1]:11434"},
		{"proxy.lan/ollama", "http://proxy.lan:11434/ollama"},
		{"  gpu-box:11434  ", "http://gpu-box:11434"},
		{"http://gpu-box", "http://gpu-box"},
		{"http://gpu-box:11434/", "http://gpu-box:11434"},
		{"HTTP://gpu-box:11434", "http://gpu-box:11434"},
		{"http://0.0.0.0:11434", "http://127.0.0.1:11434"},
		{"http://[::]", "http://[::1]"},
		{"https://ollama.example.com/", "https://ollama.example.com"},
		{"https://proxy.lan/ollama/", "https://proxy.lan/ollama"},
	}
	for _, tc := range tests {
		got, err := normalizeOllamaHost(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("normalizeOllamaHost(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}

	for _, in := range []string{
		"ftp://gpu-box",
		"unix:///run/ollama.sock",
		"http://user:pass@gpu-box",
		"gpu-box:abc",
		"gpu box",
		"http://gpu-box:0",
		"http://gpu-box:99999",
		"http://gpu-box:11434/?x=1",
		"http://gpu-box#frag",
	} {
		if got, err := normalizeOllamaHost(in); err == nil {
			t.Errorf("normalizeOllamaHost(%q) = %q, want an error", in, got)
		}
	}
}

func TestCredentialsInHostNotEchoed(t *testing.T) {
	for _, in := range []string{"http://user:hunter2@gpu-box", "http://user:hunter2@gpu-box:bad"} {
		_, err := normalizeOllamaHost(in)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("normalizeOllamaHost(%q) error = %v, want one without the password", in, err)
		}
	}
}

func TestInvalidValues(t *testing.T) {
	tests := []struct{ name, value string }{
		{"MMCP_LISTEN_ADDR", "8787"},
		{"MMCP_LISTEN_ADDR", "localhost"},
		{"MMCP_LISTEN_ADDR", "localhost:http"},
		{"MMCP_LISTEN_ADDR", "localhost:70000"},
		{"MMCP_LISTEN_ADDR", ""},
		{"MMCP_PUBLIC_URL", "nas.local:8787"},
		{"MMCP_PUBLIC_URL", "ftp://nas.local"},
		{"MMCP_PUBLIC_URL", "http://"},
		{"MMCP_PUBLIC_URL", "http://user:secret@nas.local"},
		{"MMCP_PUBLIC_URL", "http://nas.local/?token=x"},
		{"MMCP_PUBLIC_URL", "http://nas.local/#x"},
		{"MMCP_PUBLIC_URL", "http://nas.local/#"},
		{"MMCP_ALLOWED_HOSTS", "http://nas.local"},
		{"MMCP_ALLOWED_HOSTS", "nas.local/"},
		{"MMCP_ALLOWED_HOSTS", "nas.local:0"},
		{"MMCP_ALLOWED_HOSTS", "nas.local:http"},
		{"MMCP_ALLOWED_HOSTS", "ok.example,user@nas.local"},
		{"MMCP_ALLOWED_HOSTS", "*.example.com"},
		{"MMCP_MAX_CONNECTIONS", "0"},
		{"MMCP_MAX_CONNECTIONS", "100001"},
		{"MMCP_MAX_CONNECTIONS", "many"},
		{"MMCP_OLLAMA_HOST", "ftp://gpu-box"},
		{"MMCP_OLLAMA_HOST", "gpu-box:abc"},
		{"MMCP_OLLAMA_HOST", "http://user:pass@gpu-box"},
		{"MMCP_OLLAMA_MODEL", ""},
		{"MMCP_OLLAMA_MODEL", "  "},
		{"MMCP_OLLAMA_NUM_CTX", "abc"},
		{"MMCP_OLLAMA_NUM_CTX", ""},
		{"MMCP_OLLAMA_NUM_CTX", "511"},
		{"MMCP_OLLAMA_NUM_CTX", "0x2000"},
		{"MMCP_OLLAMA_NUM_CTX", "8192.5"},
		{"MMCP_OLLAMA_NUM_CTX", "99999999999999999999"},
		{"MMCP_OLLAMA_KEEP_ALIVE", "5"},
		{"MMCP_OLLAMA_KEEP_ALIVE", "forever"},
		{"MMCP_LLM_TEMPERATURE", "hot"},
		{"MMCP_LLM_TEMPERATURE", "-0.1"},
		{"MMCP_LLM_TEMPERATURE", "2.5"},
		{"MMCP_LLM_TEMPERATURE", "NaN"},
		{"MMCP_LLM_TEMPERATURE", "Inf"},
		{"MMCP_LLM_TIMEOUT", "abc"},
		{"MMCP_LLM_TIMEOUT", "0s"},
		{"MMCP_LLM_TIMEOUT", "-1s"},
		{"MMCP_LLM_IDLE_TIMEOUT", "0s"},
		{"MMCP_LLM_MAX_CONTEXT_CHARS", "999"},
		{"MMCP_LLM_MAX_CONTEXT_CHARS", "lots"},
		{"MMCP_LLM_MAX_RETRIES", "-1"},
		{"MMCP_LLM_MAX_RETRIES", "11"},
		{"MMCP_LLM_RATE_LIMIT_RETRIES", "-1"},
		{"MMCP_LLM_RATE_LIMIT_RETRIES", "11"},
		{"MMCP_LOOP_MAX_STEPS", "0"},
		{"MMCP_LOOP_MAX_STEPS", "51"},
		{"MMCP_LOOP_MAX_STEPS", "five"},
		{"MMCP_TOOL_TIMEOUT", "0"},
		{"MMCP_TOOL_TIMEOUT", "soon"},
		{"MMCP_TOOL_MAX_OUTPUT_CHARS", "99"},
		{"MMCP_TOOL_RETRIES", "6"},
		{"MMCP_PARALLEL_CALLS", "0"},
		{"MMCP_PLUGINS_DIR", ""},
		{"MMCP_DATA_DIR", ""},
		{"MMCP_BREAKER_FAILURES", "0"},
		{"MMCP_PLUGINS_KILL_GRACE", "0s"},
		{"MMCP_PLUGINS_IDLE", "-1s"},
		{"MMCP_PLUGINS_USER", ""},
		{"MMCP_TOOLS_MAX", "0"},
		{"MMCP_TOOL_MAX_DESCRIPTION_CHARS", "99"},
		{"MMCP_TOOL_MAX_SCHEMA_BYTES", "100"},
		{"MMCP_SHUTDOWN_GRACE", "0s"},
		{"MMCP_OPENAI_TASKS", "never"},
		{"MMCP_TURN_TIMEOUT", "0s"},
		{"MMCP_TURN_TIMEOUT", "-1m"},
		{"MMCP_TURN_TIMEOUT", "long"},
		{"MMCP_STREAM_HEARTBEAT", "0s"},
		{"MMCP_STREAM_HEARTBEAT", "10"},
		{"MMCP_LOG_LEVEL", "verbose"},
		{"MMCP_LOG_LEVEL", ""},
		{"MMCP_LOG_FORMAT", "xml"},
	}
	for _, tc := range tests {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(tc.name, tc.value)
			got, err := Load()
			if err == nil {
				t.Fatalf("Load() = %+v, want an error", got)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tc.name+": ") || strings.Contains(msg, "\n") {
				t.Errorf("error %q should be one line starting with %q", msg, tc.name+": ")
			}
			if got != (Config{}) {
				t.Errorf("Load() returned %+v with an error, want the zero Config", got)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	tests := []struct{ name, value, want string }{
		{"MMCP_LOOP_MAX_STEPS", "0", "MMCP_LOOP_MAX_STEPS: must be between 1 and 50, got 0"},
		{"MMCP_LLM_TIMEOUT", "abc", `MMCP_LLM_TIMEOUT: invalid duration "abc" (examples: 30s, 2m)`},
		{"MMCP_OLLAMA_NUM_CTX", "abc", `MMCP_OLLAMA_NUM_CTX: invalid integer "abc" (expected a decimal whole number)`},
		{"MMCP_OLLAMA_NUM_CTX", "0x2000", `MMCP_OLLAMA_NUM_CTX: invalid integer "0x2000" (expected a decimal whole number)`},
		{"MMCP_LOG_LEVEL", "verbose", `MMCP_LOG_LEVEL: must be one of debug, info, warn, error, got "verbose"`},
	}
	for _, tc := range tests {
		cleanEnv(t)
		t.Setenv(tc.name, tc.value)
		if _, err := Load(); err == nil || err.Error() != tc.want {
			t.Errorf("%s=%q: error = %v, want %q", tc.name, tc.value, err, tc.want)
		}
	}
}

func TestAllValidationErrorsReported(t *testing.T) {
	cleanEnv(t)
	setEnv(t, map[string]string{
		"MMCP_LOOP_MAX_STEPS": "0",
		"MMCP_LOG_FORMAT":     "xml",
		"MMCP_OLLAMA_HOST":    "ftp://x",
	})
	_, err := Load()
	if err == nil {
		t.Fatal("Load() succeeded, want errors")
	}
	for _, name := range []string{"MMCP_LOOP_MAX_STEPS: ", "MMCP_LOG_FORMAT: ", "MMCP_OLLAMA_HOST: "} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not mention %s", err, name)
		}
	}
}

func TestSlogLevel(t *testing.T) {
	tests := map[string]slog.Level{
		"debug": slog.LevelDebug,
		"info":  slog.LevelInfo,
		"warn":  slog.LevelWarn,
		"error": slog.LevelError,
		"":      slog.LevelInfo,
	}
	for in, want := range tests {
		if got := (Config{LogLevel: in}).SlogLevel(); got != want {
			t.Errorf("SlogLevel(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestWarnings(t *testing.T) {
	resolveAs(t, map[string][]string{"localhost": {"127.0.0.1", "::1"}})
	with := func(f func(*Config)) Config {
		c := defaults
		f(&c)
		return c
	}
	tests := []struct {
		desc string
		cfg  Config
		want []string // substrings of the only warning; nil means no warning
	}{
		{"defaults", defaults, nil},
		{"budget exactly fits", with(func(c *Config) { c.LLMMaxContextChars = 28672 }), nil},
		{"budget one token over", with(func(c *Config) { c.LLMMaxContextChars = 28676 }),
			[]string{"MMCP_LLM_MAX_CONTEXT_CHARS=28676", "MMCP_OLLAMA_NUM_CTX=8192", "at most 28672", "never used"}},
		{"budget far over", with(func(c *Config) { c.LLMMaxContextChars = 100000 }),
			[]string{"MMCP_LLM_MAX_CONTEXT_CHARS=100000", "MMCP_OLLAMA_NUM_CTX=8192", "at most 28672", "at least 26024", "never used"}},
		{"num_ctx too small for any budget", with(func(c *Config) { c.OllamaNumCtx = 1024 }),
			[]string{"MMCP_OLLAMA_NUM_CTX=1024", "at least 8024"}},
		{"tool output larger than budget", with(func(c *Config) { c.ToolMaxOutputChars = 30000 }),
			[]string{"MMCP_TOOL_MAX_OUTPUT_CHARS=30000"}},
		{"exposed without token", with(func(c *Config) { c.ListenAddr = "0.0.0.0:8787" }),
			[]string{"MMCP_LISTEN_ADDR=0.0.0.0:8787", "MMCP_API_TOKEN"}},
		{"all interfaces without token", with(func(c *Config) { c.ListenAddr = ":8787" }),
			[]string{"MMCP_LISTEN_ADDR=:8787"}},
		{"turn shorter than one model call", with(func(c *Config) { c.TurnTimeout = time.Minute }),
			[]string{"MMCP_TURN_TIMEOUT=1m0s", "MMCP_LLM_TIMEOUT=2m0s"}},
		{"turn as long as one model call", with(func(c *Config) { c.TurnTimeout = c.LLMTimeout }), nil},
		{"exposed with token", with(func(c *Config) { c.ListenAddr = "0.0.0.0:8787"; c.APIToken = "t" }), nil},
		{"localhost", with(func(c *Config) { c.ListenAddr = "localhost:8787" }), nil},
		{"IPv6 loopback", with(func(c *Config) { c.ListenAddr = "[::1]:8787" }), nil},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got := tc.cfg.Warnings()
			if tc.want == nil {
				if len(got) != 0 {
					t.Errorf("Warnings() = %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("Warnings() = %q, want exactly one", got)
			}
			for _, s := range tc.want {
				if !strings.Contains(got[0], s) {
					t.Errorf("warning %q does not contain %q", got[0], s)
				}
			}
		})
	}
}

func TestBudgetWarningFromEnv(t *testing.T) {
	cleanEnv(t)
	if w := mustLoad(t).Warnings(); len(w) != 0 {
		t.Errorf("default config warns: %q", w)
	}
	t.Setenv("MMCP_LLM_MAX_CONTEXT_CHARS", "100000")
	if w := mustLoad(t).Warnings(); len(w) != 1 || !strings.Contains(w[0], "MMCP_OLLAMA_NUM_CTX=8192") {
		t.Errorf("Warnings() = %q, want one about the budget", w)
	}
}

func TestUsage(t *testing.T) {
	var b bytes.Buffer
	if err := Usage(&b); err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{}
	for _, line := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			lines[f[0]] = f
		}
	}
	if _, ok := lines["VARIABLE"]; !ok {
		t.Errorf("no header in usage:\n%s", b.String())
	}
	for _, d := range documented {
		f, ok := lines[d.name]
		if !ok {
			t.Errorf("usage does not list %s:\n%s", d.name, b.String())
			continue
		}
		if d.def != "" && (len(f) < 3 || f[2] != d.def) {
			t.Errorf("usage line for %s = %q, want default %q in the third column", d.name, f, d.def)
		}
	}
	if n := strings.Count(b.String(), "MMCP_"); n < len(documented) {
		t.Errorf("usage mentions MMCP_ %d times, want at least %d", n, len(documented))
	}
}

func TestEffective(t *testing.T) {
	c := defaults
	c.APIToken = "s3cret"
	var b bytes.Buffer
	if err := c.Effective(&b); err != nil {
		t.Fatal(err)
	}
	want := `MMCP_LISTEN_ADDR=127.0.0.1:8787
MMCP_ALLOWED_HOSTS=
MMCP_PUBLIC_URL=
MMCP_OLLAMA_HOST=http://127.0.0.1:11434
MMCP_OLLAMA_MODEL=qwen2.5:7b-instruct
MMCP_OLLAMA_NUM_CTX=8192
MMCP_OLLAMA_KEEP_ALIVE=5m0s
MMCP_LLM_BACKENDS=
MMCP_LLM_TEMPERATURE=0
MMCP_LLM_TIMEOUT=2m0s
MMCP_LLM_IDLE_TIMEOUT=1m0s
MMCP_LLM_MAX_CONTEXT_CHARS=28000
MMCP_LLM_MAX_RETRIES=2
MMCP_LLM_RATE_LIMIT_RETRIES=3
MMCP_LOOP_MAX_STEPS=5
MMCP_TOOL_TIMEOUT=30s
MMCP_TOOL_MAX_OUTPUT_CHARS=4000
MMCP_TOOL_RETRIES=2
MMCP_PARALLEL_CALLS=3
MMCP_PLUGINS_DIR=./plugins
MMCP_DATA_DIR=./data
MMCP_PLUGINS_START_TIMEOUT=10s
MMCP_PLUGINS_KILL_GRACE=2s
MMCP_PLUGINS_IDLE=10m0s
MMCP_PLUGINS_USER=nobody
MMCP_TOOLS_MAX=64
MMCP_TOOL_MAX_DESCRIPTION_CHARS=1000
MMCP_TOOL_MAX_SCHEMA_BYTES=8192
MMCP_BREAKER_FAILURES=5
MMCP_BREAKER_COOLDOWN=30s
MMCP_CONTEXT_PROVIDER_TIMEOUT=300ms
MMCP_CONTEXT_TIMEOUT=800ms
MMCP_MAX_MESSAGE_CHARS=8000
MMCP_MAX_CONCURRENT_TURNS=16
MMCP_MAX_CONNECTIONS=256
MMCP_APPROVAL_TTL=10m0s
MMCP_TURN_TIMEOUT=10m0s
MMCP_STREAM_HEARTBEAT=10s
MMCP_API_TOKEN=**********
MMCP_SHUTDOWN_GRACE=5s
MMCP_OPENAI_TASKS=plain
MMCP_LOG_LEVEL=info
MMCP_LOG_FORMAT=text
`
	if b.String() != want {
		t.Errorf("Effective() =\n%s\nwant\n%s", b.String(), want)
	}
}

// Effective output must load back to the same config, except the masked token.
func TestEffectiveRoundTrips(t *testing.T) {
	cleanEnv(t)
	c := defaults
	c.LLMTemperature = 0.7
	c.OllamaKeepAlive = -time.Second
	var b bytes.Buffer
	if err := c.Effective(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		k, v, _ := strings.Cut(line, "=")
		t.Setenv(k, v)
	}
	if got := mustLoad(t); got != c {
		t.Errorf("round trip = %+v, want %+v", got, c)
	}
}

// resolveAs makes lookupHost answer from names for the rest of the test.
func resolveAs(t *testing.T, names map[string][]string) {
	t.Helper()
	old := lookupHost
	t.Cleanup(func() { lookupHost = old })
	lookupHost = func(host string) ([]string, error) {
		if addrs, ok := names[strings.ToLower(host)]; ok {
			return addrs, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
}

// TestLoopbackNeedsEveryAddressLocal: a name counts as loopback only when
// every address it resolves to is one; a localhost that /etc/hosts (or a
// resolver) points elsewhere would expose the daemon without a token.
func TestLoopbackNeedsEveryAddressLocal(t *testing.T) {
	tests := []struct {
		desc     string
		names    map[string][]string
		addr     string
		loopback bool
	}{
		{"localhost to loopback", map[string][]string{"localhost": {"127.0.0.1", "::1"}}, "localhost:8787", true},
		{"localhost to a LAN address", map[string][]string{"localhost": {"192.168.1.5"}}, "localhost:8787", false},
		{"localhost upper case to a LAN address", map[string][]string{"localhost": {"192.168.1.5"}}, "LOCALHOST:8787", false},
		{"localhost to both", map[string][]string{"localhost": {"127.0.0.1", "10.0.0.7"}}, "localhost:8787", false},
		{"localhost to nothing", map[string][]string{"localhost": {}}, "localhost:8787", false},
		{"localhost unresolved", nil, "localhost:8787", false},
		{"another name to loopback", map[string][]string{"mybox": {"127.0.1.1"}}, "mybox:8787", true},
		{"another name to a LAN address", map[string][]string{"mybox": {"192.168.1.5"}}, "mybox:8787", false},
		{"IPv4 loopback", nil, "127.0.0.1:8787", true},
		{"IPv6 loopback", nil, "[::1]:8787", true},
		{"all interfaces", nil, "0.0.0.0:8787", false},
		{"no host", nil, ":8787", false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			resolveAs(t, tc.names)
			c := defaults
			c.ListenAddr = tc.addr
			err := c.CheckExposure()
			if (err == nil) != tc.loopback {
				t.Errorf("CheckExposure() for %s = %v, want loopback %v", tc.addr, err, tc.loopback)
			}
			c.APIToken = "t"
			if err := c.CheckExposure(); err != nil {
				t.Errorf("with a token: %v", err)
			}
		})
	}
}

// TestEveryBadVariableReported: several unparsable variables give one line
// each, not just the first.
func TestEveryBadVariableReported(t *testing.T) {
	cleanEnv(t)
	t.Setenv("MMCP_LLM_TIMEOUT", "soon")
	t.Setenv("MMCP_LOOP_MAX_STEPS", "many")
	t.Setenv("MMCP_LLM_TEMPERATURE", "warm")
	t.Setenv("MMCP_TOOLS_MAX", "0x10")
	_, err := Load()
	if err == nil {
		t.Fatal("Load accepted four bad variables")
	}
	for _, want := range []string{
		`MMCP_LLM_TIMEOUT: invalid duration "soon"`,
		`MMCP_LOOP_MAX_STEPS: invalid integer "many"`,
		`MMCP_LLM_TEMPERATURE: invalid number "warm"`,
		`MMCP_TOOLS_MAX: invalid integer "0x10"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
}

// A public URL refused for its credentials is not quoted with them.
func TestPublicURLErrorHidesCredentials(t *testing.T) {
	err := validatePublicURL("http://mmcp:hunter2@nas.local:8787/")
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "MMCP_PUBLIC_URL") {
		t.Errorf("validatePublicURL = %v, want an error naming the setting without the password", err)
	}
}
