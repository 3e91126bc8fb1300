// Package config owns the daemon's MMCP_* settings and the Secret type that
// keeps credentials out of logs and responses.
package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/mmcpd/mmcpd/pkg/redact"
)

const prefix = "mmcp"

// Config is the daemon's configuration. The struct tags are the single source
// of truth for variable names, defaults and descriptions: Load, Usage and
// Effective all read them.
//
// Every field uses split_words and none uses an `envconfig:"..."` name,
// because an explicit name makes envconfig fall back to the unprefixed
// variable (`envconfig:"listen_addr"` would also read LISTEN_ADDR). The tests
// pin every derived name.
type Config struct {
	ListenAddr              string        `split_words:"true" default:"127.0.0.1:8787" desc:"HTTP listen address, host:port"`
	AllowedHosts            string        `split_words:"true" desc:"comma-separated Host names (name or name:port) the API answers besides localhost, loopback addresses and the listen address; * allows any"`
	PublicURL               string        `split_words:"true" desc:"the address people open the page at (e.g. http://nas.local:8787), for the links mmcpd writes into answers (an approval asked on the OpenAI route); empty: the address the request came to"`
	OllamaHost              string        `split_words:"true" default:"http://127.0.0.1:11434" desc:"Ollama server URL or host[:port]; defaults to $OLLAMA_HOST when that is set"`
	OllamaModel             string        `split_words:"true" default:"qwen2.5:7b-instruct" desc:"Ollama model name"`
	OllamaNumCtx            int           `split_words:"true" default:"8192" desc:"context window in tokens requested from Ollama (num_ctx), at least 512"`
	OllamaKeepAlive         time.Duration `split_words:"true" default:"5m" desc:"how long Ollama keeps the model loaded after a call; negative keeps it loaded"`
	LLMBackends             string        `split_words:"true" desc:"model servers, comma-separated kind=url#model, kind ollama or openai (a server with /v1/chat/completions); the API key of entry N comes from MMCP_LLM_<N>_API_KEY; empty: one Ollama at MMCP_OLLAMA_HOST with MMCP_OLLAMA_MODEL"`
	LLMTemperature          float64       `split_words:"true" default:"0" desc:"sampling temperature, 0 to 2"`
	LLMTimeout              time.Duration `split_words:"true" default:"120s" desc:"how long a model call may wait for the first piece of its reply (a check: for its answer), greater than 0"`
	LLMIdleTimeout          time.Duration `split_words:"true" default:"60s" desc:"how long a model may stay silent between two pieces of its reply, greater than 0"`
	LLMMaxContextChars      int           `split_words:"true" default:"28000" desc:"character budget for the prompt, at least 1000"`
	LLMMaxRetries           int           `split_words:"true" default:"2" desc:"self-corrections allowed per step after an invalid model reply, 0 to 10"`
	LLMRateLimitRetries     int           `split_words:"true" default:"3" desc:"retries when the model server is busy or rate-limits, 0 to 10"`
	LoopMaxSteps            int           `split_words:"true" default:"5" desc:"maximum reasoning steps per request, 1 to 50"`
	ToolTimeout             time.Duration `split_words:"true" default:"30s" desc:"timeout for one tool call, greater than 0"`
	ToolMaxOutputChars      int           `split_words:"true" default:"4000" desc:"tool output is truncated to this many characters, at least 100"`
	ToolRetries             int           `split_words:"true" default:"2" desc:"more calls of a tool that only reads after a transient failure (service unreachable, timeout, 429, 5xx), waiting 1s then 2s; 0 to 5"`
	ParallelCalls           int           `split_words:"true" default:"3" desc:"most tool calls one model reply may ask for at once, 1 to 10; 1 allows one call per reply"`
	PluginsDir              string        `split_words:"true" default:"./plugins" desc:"directory of tool plugins"`
	DataDir                 string        `split_words:"true" default:"./data" desc:"directory for state and traces"`
	PluginsStartTimeout     time.Duration `split_words:"true" default:"10s" desc:"time a plugin has to start, shake hands and describe itself"`
	PluginsKillGrace        time.Duration `split_words:"true" default:"2s" desc:"time a plugin has to answer after a call's deadline before it is killed"`
	PluginsIdle             time.Duration `split_words:"true" default:"10m" desc:"a plugin or MCP server no call used for this long is stopped, and started again on its next use; 0 keeps every plugin running"`
	PluginsUser             string        `split_words:"true" default:"nobody" desc:"user plugins run as when the daemon runs as root (name or uid); root keeps them root, which is not advised"`
	ToolsMax                int           `split_words:"true" default:"64" desc:"most tools offered to the model; tools past it (in plugin name order) are refused, 1 to 1000"`
	ToolMaxDescriptionChars int           `split_words:"true" default:"1000" desc:"longest tool description in characters; a longer tool is refused, 100 to 100000"`
	ToolMaxSchemaBytes      int           `split_words:"true" default:"8192" desc:"largest tool argument schema in bytes; a larger tool is refused, 256 to 1048576"`
	BreakerFailures         int           `split_words:"true" default:"5" desc:"consecutive failures of a tool that open its circuit breaker, 1 to 100"`
	BreakerCooldown         time.Duration `split_words:"true" default:"30s" desc:"how long an open breaker waits before a trial call"`
	ContextProviderTimeout  time.Duration `split_words:"true" default:"300ms" desc:"time one plugin context provider has per turn"`
	ContextTimeout          time.Duration `split_words:"true" default:"800ms" desc:"time all context providers have together per turn"`
	MaxMessageChars         int           `split_words:"true" default:"8000" desc:"longest chat message in characters; longer ones get 400"`
	MaxConcurrentTurns      int           `split_words:"true" default:"16" desc:"turns running at once (streams included); more get 503"`
	MaxConnections          int           `split_words:"true" default:"256" desc:"HTTP connections held at once, 1 to 100000; past it one waiting without a request is dropped for the newcomer"`
	ApprovalTTL             time.Duration `split_words:"true" default:"10m" desc:"how long a tool call waits for the user's approval"`
	TurnTimeout             time.Duration `split_words:"true" default:"10m" desc:"the longest a whole chat turn may run, every model and tool call included; past it the turn ends with 504 timeout"`
	StreamHeartbeat         time.Duration `split_words:"true" default:"10s" desc:"on a streamed turn, a comment line is sent after this long without output, so proxies and clients do not time out"`
	APIToken                Secret        `split_words:"true" desc:"bearer token required by the HTTP API; empty disables authentication"`
	ShutdownGrace           time.Duration `split_words:"true" default:"5s" desc:"on SIGTERM, how long running turns may finish before they are cancelled"`
	OpenaiTasks             string        `split_words:"true" default:"plain" desc:"Open WebUI's background task requests (titles, tags, follow-ups): plain (one model call) or turn (a full agent turn)"`
	LogLevel                string        `split_words:"true" default:"info" desc:"debug, info, warn or error"`
	LogFormat               string        `split_words:"true" default:"text" desc:"text or json"`
}

const (
	defaultOllamaPort = "11434"
	// ollamaHostFallback is Ollama's own variable, honoured so that mmcpd
	// finds the same server as the ollama CLI without extra setup.
	ollamaHostFallback = "OLLAMA_HOST"
)

// Load reads the MMCP_* variables from the process environment, applies
// defaults, normalises and validates them. Each error line names the variable
// and what it accepts; all validation problems are reported together.
func Load() (Config, error) {
	var c Config
	if err := envconfig.Process(prefix, &c); err != nil {
		return Config{}, everyParseError(err)
	}
	if err := reparseInts(&c); err != nil {
		return Config{}, err
	}

	// An empty MMCP_OLLAMA_HOST counts as unset, so that compose files can
	// pass an unset variable through; with no fallback either,
	// normalizeOllamaHost maps "" to the local server, as Ollama does.
	hostVar := "MMCP_OLLAMA_HOST"
	if strings.TrimSpace(os.Getenv(hostVar)) == "" {
		if v := os.Getenv(ollamaHostFallback); strings.TrimSpace(v) != "" {
			c.OllamaHost, hostVar = v, ollamaHostFallback
		}
	}
	c.LogLevel = strings.ToLower(strings.TrimSpace(c.LogLevel))
	c.LogFormat = strings.ToLower(strings.TrimSpace(c.LogFormat))

	var hostErr error
	c.OllamaHost, hostErr = normalizeOllamaHost(c.OllamaHost)
	if hostErr != nil {
		hostErr = fmt.Errorf("%s: %w", hostVar, hostErr)
	}

	_, backendsErr := c.Backends()
	if err := errors.Join(hostErr, c.validate(), backendsErr); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c Config) validate() error {
	return errors.Join(
		validateListenAddr(c.ListenAddr),
		validateAllowedHosts(c.AllowedHostList()),
		validatePublicURL(c.PublicURL),
		nonEmpty("MMCP_OLLAMA_MODEL", c.OllamaModel),
		atLeast("MMCP_OLLAMA_NUM_CTX", c.OllamaNumCtx, 512),
		temperature("MMCP_LLM_TEMPERATURE", c.LLMTemperature),
		positive("MMCP_LLM_TIMEOUT", c.LLMTimeout),
		positive("MMCP_LLM_IDLE_TIMEOUT", c.LLMIdleTimeout),
		atLeast("MMCP_LLM_MAX_CONTEXT_CHARS", c.LLMMaxContextChars, 1000),
		between("MMCP_LLM_MAX_RETRIES", c.LLMMaxRetries, 0, 10),
		between("MMCP_LLM_RATE_LIMIT_RETRIES", c.LLMRateLimitRetries, 0, 10),
		between("MMCP_LOOP_MAX_STEPS", c.LoopMaxSteps, 1, 50),
		positive("MMCP_TOOL_TIMEOUT", c.ToolTimeout),
		atLeast("MMCP_TOOL_MAX_OUTPUT_CHARS", c.ToolMaxOutputChars, 100),
		between("MMCP_TOOL_RETRIES", c.ToolRetries, 0, 5),
		between("MMCP_PARALLEL_CALLS", c.ParallelCalls, 1, 10),
		nonEmpty("MMCP_PLUGINS_DIR", c.PluginsDir),
		nonEmpty("MMCP_DATA_DIR", c.DataDir),
		positive("MMCP_PLUGINS_START_TIMEOUT", c.PluginsStartTimeout),
		positive("MMCP_PLUGINS_KILL_GRACE", c.PluginsKillGrace),
		nonNegative("MMCP_PLUGINS_IDLE", c.PluginsIdle),
		nonEmpty("MMCP_PLUGINS_USER", c.PluginsUser),
		between("MMCP_TOOLS_MAX", c.ToolsMax, 1, 1000),
		between("MMCP_TOOL_MAX_DESCRIPTION_CHARS", c.ToolMaxDescriptionChars, 100, 100000),
		between("MMCP_TOOL_MAX_SCHEMA_BYTES", c.ToolMaxSchemaBytes, 256, 1<<20),
		between("MMCP_BREAKER_FAILURES", c.BreakerFailures, 1, 100),
		positive("MMCP_BREAKER_COOLDOWN", c.BreakerCooldown),
		positive("MMCP_CONTEXT_PROVIDER_TIMEOUT", c.ContextProviderTimeout),
		positive("MMCP_CONTEXT_TIMEOUT", c.ContextTimeout),
		between("MMCP_MAX_MESSAGE_CHARS", c.MaxMessageChars, 1, 1<<20),
		between("MMCP_MAX_CONCURRENT_TURNS", c.MaxConcurrentTurns, 1, 10000),
		between("MMCP_MAX_CONNECTIONS", c.MaxConnections, 1, 100000),
		positive("MMCP_APPROVAL_TTL", c.ApprovalTTL),
		positive("MMCP_TURN_TIMEOUT", c.TurnTimeout),
		positive("MMCP_STREAM_HEARTBEAT", c.StreamHeartbeat),
		positive("MMCP_SHUTDOWN_GRACE", c.ShutdownGrace),
		oneOf("MMCP_OPENAI_TASKS", c.OpenaiTasks, "plain", "turn"),
		oneOf("MMCP_LOG_LEVEL", c.LogLevel, "debug", "info", "warn", "error"),
		oneOf("MMCP_LOG_FORMAT", c.LogFormat, "text", "json"),
	)
}

// validatePublicURL accepts an empty value or an absolute http(s) URL with a
// host and, behind a reverse proxy, a path; nothing that would ride along
// into every link (credentials, a query, a fragment).
func validatePublicURL(raw string) error {
	const name = "MMCP_PUBLIC_URL"
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %q is not a URL: %w", name, raw, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("%s: must be an http:// or https:// address with a host (e.g. http://nas.local:8787), got %q", name, raw)
	case u.User != nil, u.RawQuery != "", u.Fragment != "" || strings.HasSuffix(raw, "#"):
		return fmt.Errorf("%s: must not carry credentials, a query or a fragment (it starts every link mmcpd writes), got %q", name, redact.URL(raw))
	}
	return nil
}

func validateListenAddr(addr string) error {
	const name = "MMCP_LISTEN_ADDR"
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: must be host:port (e.g. 127.0.0.1:8787 or :8787), got %q", name, addr)
	}
	// Port 0 (pick a free port) stays legal for tests.
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%s: port must be a number between 0 and 65535, got %q", name, addr)
	}
	return nil
}

// AllowedHostList is MMCP_ALLOWED_HOSTS as a list, empty entries left out
// (a trailing comma is harmless).
func (c Config) AllowedHostList() []string {
	var hosts []string
	for _, h := range strings.Split(c.AllowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// validateAllowedHosts accepts "*", host names and IP addresses, each with an
// optional port: what a Host header carries, never a URL.
func validateAllowedHosts(hosts []string) error {
	const name = "MMCP_ALLOWED_HOSTS"
	for _, h := range hosts {
		if h == "*" {
			continue
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ""
		}
		bad := host == "" || strings.IndexFunc(host, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:%", r))
		}) >= 0
		if n, err := strconv.Atoi(port); port != "" && (err != nil || n < 1 || n > 65535) {
			bad = true
		}
		if bad {
			return fmt.Errorf("%s: %q is not a host name or host:port (example: nas.local,media.example.com:8787, or * for any)", name, h)
		}
	}
	return nil
}

func nonEmpty(name, v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("%s: must not be empty", name)
	}
	return nil
}

func atLeast(name string, v, lo int) error {
	if v < lo {
		return fmt.Errorf("%s: must be at least %d, got %d", name, lo, v)
	}
	return nil
}

func between(name string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s: must be between %d and %d, got %d", name, lo, hi, v)
	}
	return nil
}

func temperature(name string, v float64) error {
	// Written so that NaN, which compares false with everything, fails too.
	if !(v >= 0 && v <= 2) {
		return fmt.Errorf("%s: must be between 0 and 2, got %v", name, v)
	}
	return nil
}

func positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s: must be greater than 0 (examples: 30s, 2m), got %s", name, d)
	}
	return nil
}

func nonNegative(name string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s: must be 0 or more (examples: 0, 10m), got %s", name, d)
	}
	return nil
}

func oneOf(name, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fmt.Errorf("%s: must be one of %s, got %q", name, strings.Join(allowed, ", "), v)
}

// explainProcessError rewrites envconfig's parse errors, which name the Go
// field and type, into the variable name and what it accepts.
// everyParseError reports every variable envconfig cannot parse, one line
// each, where Process stops at the first: each field is processed again on
// its own, in a one-field struct with the same tags.
func everyParseError(first error) error {
	var errs []error
	t := reflect.TypeFor[Config]()
	for i, key := range envNames() {
		one := reflect.New(reflect.StructOf([]reflect.StructField{t.Field(i)}))
		if err := envconfig.Process(prefix, one.Interface()); err != nil {
			errs = append(errs, explainProcessError(err))
			continue
		}
		if s, ok := os.LookupEnv(key); ok && t.Field(i).Type == reflect.TypeFor[int]() {
			if _, err := strconv.Atoi(s); err != nil { // as reparseInts would
				errs = append(errs, invalidValue(key, "int", s))
			}
		}
	}
	if len(errs) == 0 {
		return explainProcessError(first)
	}
	return errors.Join(errs...)
}

func explainProcessError(err error) error {
	var pe *envconfig.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	return invalidValue(pe.KeyName, pe.TypeName, pe.Value)
}

func invalidValue(key, typeName, value string) error {
	switch typeName {
	case "time.Duration":
		return fmt.Errorf("%s: invalid duration %q (examples: 30s, 2m)", key, value)
	case "int":
		return fmt.Errorf("%s: invalid integer %q (expected a decimal whole number)", key, value)
	case "float64":
		return fmt.Errorf("%s: invalid number %q (examples: 0, 0.7)", key, value)
	}
	return fmt.Errorf("%s: invalid value %q for type %s", key, value, typeName)
}

// reparseInts reads every integer variable again in base 10. envconfig
// parses integers with base 0, so MMCP_LOOP_MAX_STEPS=010 would silently mean
// 8 and 0x10 would be accepted.
func reparseInts(c *Config) error {
	var errs []error
	v := reflect.ValueOf(c).Elem()
	for i, key := range envNames() {
		f := v.Field(i)
		if f.Type() != reflect.TypeFor[int]() {
			continue
		}
		if s, ok := os.LookupEnv(key); ok {
			n, err := strconv.Atoi(s)
			if err != nil {
				errs = append(errs, invalidValue(key, "int", s))
				continue
			}
			f.SetInt(int64(n))
		}
	}
	return errors.Join(errs...)
}

// envNames lists the variable that envconfig reads for each Config field, in
// field order. It is asked from envconfig itself so that Usage, Effective and
// the checks above can never disagree with what Process reads.
var envNames = sync.OnceValue(func() []string {
	var b strings.Builder
	if err := envconfig.Usagef(prefix, &Config{}, &b, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
		panic("config: listing variables: " + err.Error())
	}
	names := strings.Fields(b.String())
	if len(names) != reflect.TypeFor[Config]().NumField() {
		panic("config: every Config field must map to exactly one variable")
	}
	return names
})

// SlogLevel returns LogLevel as a slog.Level. Load has validated it; anything
// else maps to Info.
func (c Config) SlogLevel() slog.Level {
	switch strings.ToLower(c.LogLevel) {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

const (
	// charsPerToken is prose's rate, the most characters a token of the
	// prompt usually holds: a budget that does not fit num_ctx even at this
	// rate can never be used. Below it the window follows the ratio learned
	// from the model's own counts (llm.Client.PromptBudget).
	charsPerToken = 4
	// replyReserveTokens is left free in num_ctx for the model's answer.
	replyReserveTokens = 1024
)

// Warnings returns human-readable warnings for settings that are legal but
// risky. Load does not fail on them; the daemon should log them at startup.
func (c Config) Warnings() []string {
	var w []string

	if need := c.LLMMaxContextChars/charsPerToken + replyReserveTokens; need > c.OllamaNumCtx {
		msg := fmt.Sprintf("MMCP_LLM_MAX_CONTEXT_CHARS=%d (about %d tokens at %d characters per token, plus %d tokens reserved for the reply) does not fit in MMCP_OLLAMA_NUM_CTX=%d, so the window is held to what num_ctx holds and the extra characters are never used; ",
			c.LLMMaxContextChars, c.LLMMaxContextChars/charsPerToken, charsPerToken, replyReserveTokens, c.OllamaNumCtx)
		if fit := (c.OllamaNumCtx - replyReserveTokens) * charsPerToken; fit >= 1000 {
			msg += fmt.Sprintf("lower MMCP_LLM_MAX_CONTEXT_CHARS to at most %d or ", fit)
		}
		msg += fmt.Sprintf("raise MMCP_OLLAMA_NUM_CTX to at least %d", need)
		w = append(w, msg)
	}

	if c.ToolMaxOutputChars > c.LLMMaxContextChars {
		w = append(w, fmt.Sprintf("MMCP_TOOL_MAX_OUTPUT_CHARS=%d is larger than MMCP_LLM_MAX_CONTEXT_CHARS=%d: a single tool result can crowd out the rest of the prompt",
			c.ToolMaxOutputChars, c.LLMMaxContextChars))
	}

	if c.TurnTimeout < c.LLMTimeout {
		w = append(w, fmt.Sprintf("MMCP_TURN_TIMEOUT=%s is shorter than MMCP_LLM_TIMEOUT=%s: a slow model call ends the whole turn (504 timeout) before its own timeout can say the model was slow",
			c.TurnTimeout, c.LLMTimeout))
	}

	if err := c.CheckExposure(); err != nil {
		w = append(w, err.Error())
	}
	return w
}

// CheckExposure refuses a daemon reachable from other machines without a
// token: anyone who could reach it could drive the agent and its tools.
func (c Config) CheckExposure() error {
	if c.APIToken == "" && !isLoopback(c.ListenAddr) {
		return fmt.Errorf("MMCP_LISTEN_ADDR=%s may be reachable from other machines (a name counts as local only when every address it resolves to is loopback) and MMCP_API_TOKEN is empty; set a token (for example MMCP_API_TOKEN=$(openssl rand -hex 32)) or listen on 127.0.0.1", c.ListenAddr)
	}
	return nil
}

// lookupHost resolves a host name to its addresses; tests replace it so that
// they do not depend on the machine's /etc/hosts or DNS.
var lookupHost = func(host string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return net.DefaultResolver.LookupHost(ctx, host)
}

// isLoopback reports whether addr only accepts local connections. A name
// counts only when every address it resolves to is loopback: net.Listen
// binds one of them, and "localhost" may be mapped elsewhere (a hosts file,
// a resolver that answers it). An empty host, or a name that does not
// resolve, counts as exposed, to err on the side of refusing.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	addrs, err := lookupHost(host)
	if err != nil || len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if ip := net.ParseIP(a); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

const usageFormat = `VARIABLE	TYPE	DEFAULT	DESCRIPTION
{{range .}}{{usage_key .}}	{{usage_type .}}	{{usage_default .}}	{{usage_description .}}
{{end}}`

// Usage writes a table of every variable with its type, default and
// description, generated from the Config struct tags.
func Usage(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if err := envconfig.Usagef(prefix, &Config{}, tw, usageFormat); err != nil {
		return err
	}
	return tw.Flush()
}

// Effective writes the configuration in use, one MMCP_NAME=value per line in
// field order. Secrets print masked because fmt goes through Secret.Format.
func (c Config) Effective(w io.Writer) error {
	v := reflect.ValueOf(c)
	for i, name := range envNames() {
		if _, err := fmt.Fprintf(w, "%s=%v\n", name, v.Field(i).Interface()); err != nil {
			return err
		}
	}
	return c.effectiveKeys(w)
}
