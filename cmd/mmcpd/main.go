// Command mmcpd is the daemon that gives a home media stack a chat endpoint
// driven by a local language model, and the client commands that talk to it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mmcpd/mmcpd/pkg/breaker"
	"github.com/mmcpd/mmcpd/pkg/config"
	"github.com/mmcpd/mmcpd/pkg/llm"
	"github.com/mmcpd/mmcpd/pkg/loop"
	"github.com/mmcpd/mmcpd/pkg/metrics"
	"github.com/mmcpd/mmcpd/pkg/plugins"
	"github.com/mmcpd/mmcpd/pkg/server"
	"github.com/mmcpd/mmcpd/pkg/store"
	"github.com/mmcpd/mmcpd/pkg/trace"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

// readTimeout bounds reading a request, its body included.
const readTimeout = 30 * time.Second

const usage = `mmcpd: a chat endpoint for a home media stack, driven by a local model.

Usage:
  mmcpd [serve]                 run the daemon in the foreground
  mmcpd mcp [--addr HOST:PORT]  speak MCP on stdin/stdout (for Claude Desktop), relayed to the running daemon's /mcp
  mmcpd chat [flags] "message"  send a message to a running daemon and print the answer
  mmcpd respond --session ID --approval ID approve|deny
                                answer an action the agent asked to run
  mmcpd sessions [show ID | rm ID]
                                list the daemon's sessions, show one's turns and steps, or delete one
  mmcpd db check|recover        check the session database, or save what is readable of a damaged one
  mmcpd config [--env-example]  print the effective configuration and every variable
                                (--env-example: as a commented settings file)
  mmcpd schema                  print the reply schema the model is held to
  mmcpd health [--addr HOST:PORT]
                                exit 0 if a running daemon answers /healthz (container health checks)
  mmcpd version                 print the version, commit, Go version and platform

Settings are environment variables; see "mmcpd config".
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	if cmd != "chat" && cmd != "respond" && slices.ContainsFunc(args, isHelpFlag) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(stderr)
	case "chat":
		err = chat(args, stdout, stderr)
	case "respond":
		err = respond(args, stdout, stderr)
	case "sessions":
		err = sessions(args, stdout, stderr)
	case "db":
		err = db(args, stdout)
	case "config":
		err = configCommand(args, stdout, stderr)
	case "schema":
		err = printSchema(stdout)
	case "mcp":
		err = mcpStdio(args, os.Stdin, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, versionLine())
	case "health":
		err = health(args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "mmcpd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0 // the flag set has printed its usage
	}
	if err != nil {
		fmt.Fprintf(stderr, "mmcpd %s: %v\n", cmd, err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// usageError marks a mistake in how mmcpd was invoked or configured.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func loadConfig() (config.Config, error) {
	cfg, err := config.Load()
	if err != nil {
		return cfg, usageError{fmt.Errorf("invalid configuration:\n%w", err)}
	}
	return cfg, nil
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.SlogLevel()}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(trace.Handler{Handler: h})
}

// daemon is everything serve and schema wire together.
type daemon struct {
	cfg    config.Config
	model  *llm.Pool
	runner *loop.Runner
	host   *plugins.Host
}

// newDaemon wires the daemon; environ is the process environment as it was at
// start, plugins' settings included.
func newDaemon(cfg config.Config, environ []string, log *slog.Logger) (*daemon, error) {
	model, err := newModels(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("model client: %w", err)
	}
	runner := &loop.Runner{
		Model: model,
		Config: loop.Config{
			MaxSteps:        cfg.LoopMaxSteps,
			MaxRetries:      cfg.LLMMaxRetries,
			MaxContextChars: cfg.LLMMaxContextChars,
			MaxOutputChars:  cfg.ToolMaxOutputChars,
			ToolTimeout:     cfg.ToolTimeout,
			MaxToolFailures: loop.DefaultConfig.MaxToolFailures,
			ParallelCalls:   cfg.ParallelCalls,
			ToolRetries:     cfg.ToolRetries,
			RetryWait:       loop.DefaultConfig.RetryWait,
		},
		Log: log,
	}
	_, explicit := os.LookupEnv("MMCP_PLUGINS_DIR")
	dir, beside := pluginsDir(cfg.PluginsDir, explicit)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	pluginsUser := ""
	if os.Geteuid() == 0 {
		// Plugins are other people's code: as root they could do anything.
		pluginsUser = cfg.PluginsUser
	}
	host, err := plugins.New(plugins.Options{
		Dir: dir,
		// Plugins may show the daemon's version; it is the one variable they
		// get that is not their own.
		Environ:      append(environ, "MMCP_DAEMON_VERSION="+buildVersion()),
		User:         pluginsUser,
		Limits:       plugins.ToolLimits{Tools: cfg.ToolsMax, DescriptionChars: cfg.ToolMaxDescriptionChars, SchemaBytes: cfg.ToolMaxSchemaBytes},
		StartTimeout: cfg.PluginsStartTimeout,
		KillGrace:    cfg.PluginsKillGrace,
		Idle:         cfg.PluginsIdle,
		CacheFile:    filepath.Join(cfg.DataDir, "plugins-cache.json"),
		Breakers:     breaker.New(breaker.Settings{Failures: uint32(cfg.BreakerFailures), Cooldown: cfg.BreakerCooldown}, plugins.IsToolError, log),
		Context: plugins.ContextOptions{
			PerProvider:  cfg.ContextProviderTimeout,
			Overall:      cfg.ContextTimeout,
			MaxChars:     plugins.DefaultContextOptions.MaxChars,
			FailureLimit: plugins.DefaultContextOptions.FailureLimit,
			SkipFor:      plugins.DefaultContextOptions.SkipFor,
		},
		Log: log,
	})
	if err != nil {
		return nil, err
	}
	runner.Tools = host
	runner.Context = host
	found, _ := plugins.Discover(dir)
	switch {
	case len(found) == 0:
		log.Warn("no plugins: the model has no tools. Build the bundled ones with make build, or set MMCP_PLUGINS_DIR to the folder that holds the mmcp-plugin-* files", "plugins_dir", dir)
	case beside:
		log.Info("plugins folder", "plugins_dir", dir, "plugins", len(found), "why", "./plugins does not exist here; using the folder beside the binary")
	default:
		log.Info("plugins folder", "plugins_dir", dir, "plugins", len(found))
	}
	return &daemon{cfg: cfg, model: model, runner: runner, host: host}, nil
}

func serve(stderr io.Writer) error {
	// First of all: no process of the same user (a plugin among them) may
	// read this one's environment or memory, where the secrets are.
	notDumpable := plugins.NotDumpable()
	environ := os.Environ()
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	hideSecrets()
	if err := cfg.CheckExposure(); err != nil {
		return usageError{err}
	}
	log := newLogger(cfg, stderr)
	slog.SetDefault(log)
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	if notDumpable != nil {
		log.Warn("cannot make the daemon non-dumpable: processes of the same user may read its secrets through /proc", "error", notDumpable.Error())
	}
	if os.Geteuid() == 0 && (cfg.PluginsUser == "root" || cfg.PluginsUser == "0") {
		log.Warn("plugins run as root (MMCP_PLUGINS_USER): any plugin can do anything on this machine")
	}
	opts, err := storeOptions()
	if err != nil {
		return err
	}
	st, err := store.OpenWith(context.Background(), cfg.DataDir, opts)
	if err != nil {
		return fmt.Errorf("session store: %w", err)
	}
	defer st.Close()
	d, err := newDaemon(cfg, environ, log)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Plugins start while the daemon already answers: /readyz says which are
	// still starting.
	go d.host.Start(ctx)
	defer d.host.Close()

	defer d.model.Close()
	checkCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := d.model.Check(checkCtx); err != nil {
		// Not fatal: Ollama may start after us. /readyz and every chat say
		// the same until it is there.
		log.Warn("the model is not ready; chats will fail until it is", "problem", err.Error(), "fix", modelFix(cfg))
	} else if cfg.LLMBackends == "" {
		log.Info("model ready", "model", cfg.OllamaModel, "ollama", cfg.OllamaHost)
	} else {
		for _, b := range d.model.Backends() {
			log.Info("model server", "backend", b.Name, "state", b.State, "problem", b.Reason)
		}
	}
	cancel()

	m := metrics.New(metrics.Sources{Plugins: d.host.Plugins, Sessions: st.SessionCount, Backends: d.model.Backends})
	d.model.OnCall(m.ModelCall)
	d.runner.Events = m.Observe
	api := &server.Server{
		Turns:     d.runner,
		Catalog:   d.runner,
		Model:     d.model,
		Store:     st,
		Plugins:   d.host,
		Calls:     d.host,
		Version:   buildVersion(),
		PublicURL: cfg.PublicURL,
		Limits: server.Limits{
			MaxMessageChars:    cfg.MaxMessageChars,
			MaxConcurrentTurns: cfg.MaxConcurrentTurns,
			ApprovalTTL:        cfg.ApprovalTTL,
			TurnTimeout:        cfg.TurnTimeout,
			StreamHeartbeat:    cfg.StreamHeartbeat,
			ToolTimeout:        cfg.ToolTimeout,
		},
		Token:        cfg.APIToken.Reveal(),
		ListenAddr:   cfg.ListenAddr,
		AllowedHosts: cfg.AllowedHostList(),
		Log:          log,
		Metrics:      m.Handler(),
		TurnDone:     m.TurnDone,
	}
	tcp, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listening on %s (MMCP_LISTEN_ADDR): %w", cfg.ListenAddr, err)
	}
	// Bounded connections and headers: what a client can hold before it is
	// authenticated.
	if cfg.OpenaiTasks == "plain" {
		// Open WebUI's titles and tags: one plain model call each, not a
		// turn with tools on the user's slow model.
		api.Tasks = d.model
	}
	ln := server.LimitListener(tcp, cfg.MaxConnections)
	// Every request's context derives from this one: cancelling it with
	// server.ErrShuttingDown ends the running turns, which answer their
	// clients and are recorded cancelled.
	turnsCtx, cancelTurns := context.WithCancelCause(context.Background())
	defer cancelTurns(nil)
	srv := &http.Server{
		BaseContext:       func(net.Listener) context.Context { return turnsCtx },
		Handler:           api.Handler(),
		ConnState:         ln.ConnState,
		MaxHeaderBytes:    server.MaxHeaderBytes,
		ReadHeaderTimeout: server.ReadHeaderTimeout,
		ReadTimeout:       readTimeout,
		// The write deadline is set once, when a request's headers are
		// read, and covers the whole answer, a stream included: it must
		// not cut a turn that is within MMCP_TURN_TIMEOUT. The slack covers
		// reading the body before the turn, and, after its deadline,
		// stopping its calls, recording it and writing the 504.
		WriteTimeout: readTimeout + cfg.TurnTimeout + time.Minute,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("mmcpd listening", "addr", ln.Addr().String(), "version", buildVersion(), "model", modelNames(d.model))

	errc := make(chan error, 1)
	// MCP clients hold a stream open to hear of tool changes: shutting
	// down closes their sessions rather than waiting out the grace for them.
	srv.RegisterOnShutdown(api.CloseMCP)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	drain(srv, log, cfg.ShutdownGrace, func() { cancelTurns(server.ErrShuttingDown) })
	log.Info("stopped")
	return nil
}

// drain stops the server: no new connections at once, then running turns get
// grace to finish. Past it (or at a second signal) they are cancelled: each
// answers its client (503 shutting_down, or the stream's error event) and is
// recorded cancelled. Plugins are stopped after, by serve's deferred Close.
func drain(srv *http.Server, log *slog.Logger, grace time.Duration, cancelTurns func()) {
	log.Info("shutting down: no new requests; running turns have the grace to finish", "grace", grace)
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	select {
	case <-done:
		return
	case <-time.After(grace):
		log.Warn("cancelling the turns still running", "grace", grace)
	case sig := <-again:
		log.Warn("cancelling the turns still running", "signal", sig.String())
	}
	cancelTurns()
	// A cancelled turn records itself and answers within moments; a
	// handler that does not is cut off.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		log.Warn("closing the connections still open")
		_ = srv.Close()
	}
}

// hideSecrets removes the API token and every plugin setting from the
// daemon's own environment once they are read, so no child it starts can
// inherit them by accident: plugins get theirs explicitly. The kernel's copy
// behind /proc/<pid>/environ cannot be changed; being non-dumpable keeps
// other processes of the same user out of it.
func hideSecrets() {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "MMCP_API_TOKEN" || strings.HasPrefix(k, "MMCP_PLUGIN_") {
			_ = os.Unsetenv(k)
		}
	}
}

func printConfig(stdout io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "# Effective configuration (secrets masked)")
	if err := cfg.Effective(stdout); err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stdout, "# warning:", w)
	}
	printModels(stdout, cfg)
	if err := printPluginSettings(stdout, cfg); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\n# Variables")
	return config.Usage(stdout)
}

// printPluginSettings starts the plugins to ask each for its settings, and
// prints them as the API shows them: secrets masked, credentials in URLs too.
func printPluginSettings(stdout io.Writer, cfg config.Config) error {
	d, err := newDaemon(cfg, os.Environ(), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	d.host.Start(context.Background())
	defer d.host.Close()
	for _, p := range d.host.Plugins() {
		fmt.Fprintf(stdout, "\n# Plugin %s: %s", p.Name, p.Status)
		if p.Reason != "" {
			fmt.Fprintf(stdout, " (%s)", p.Reason)
		}
		fmt.Fprintln(stdout)
		for _, s := range p.Settings {
			var notes []string
			if s.Required {
				notes = append(notes, "required")
			}
			if s.Secret {
				notes = append(notes, "secret")
			}
			if !s.Set {
				notes = append(notes, "not set")
				if s.Default != "" {
					notes = append(notes, "default "+s.Default)
				}
			}
			line := s.Variable + "=" + s.Value
			if len(notes) > 0 {
				line += "  # " + strings.Join(notes, ", ")
			}
			fmt.Fprintln(stdout, line)
		}
	}
	return nil
}

func printSchema(stdout io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	d, err := newDaemon(cfg, os.Environ(), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	d.host.Start(context.Background())
	defer d.host.Close()
	u, err := d.runner.Union()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", indentJSON(u.Format()))
	return err
}

func chat(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("chat", stderr)
	session := fs.String("session", "", "continue this session (the id a previous chat printed)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() != 1 {
		return usageError{errors.New(`want exactly one message: mmcpd chat "what's downloading?"`)}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	p := newTurnPrinter(stdout, stderr, *cf.steps)
	defer p.end()
	c.events = p.event
	res, err := c.chat(server.ChatRequest{Message: fs.Arg(0), SessionID: *session})
	if err != nil {
		return err
	}
	p.outcome(res)
	return nil
}

// respond answers an action request that chat printed.
func respond(args []string, stdout, stderr io.Writer) error {
	fs, cf := clientFlagSet("respond", stderr)
	session := fs.String("session", "", "the session of the request (required)")
	approval := fs.String("approval", "", "the approval id chat printed (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if *session == "" || *approval == "" || fs.NArg() != 1 || (fs.Arg(0) != "approve" && fs.Arg(0) != "deny") {
		return usageError{errors.New(`usage: mmcpd respond --session ID --approval ID approve|deny`)}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	p := newTurnPrinter(stdout, stderr, *cf.steps)
	defer p.end()
	c.events = p.event
	res, err := c.respond(server.RespondRequest{SessionID: *session, ApprovalID: *approval, Decision: fs.Arg(0)})
	if err != nil {
		return err
	}
	p.outcome(res)
	return nil
}

// clientFlags are the flags every command that talks to a daemon shares.
type clientFlags struct {
	steps   *bool
	addr    *string
	timeout *time.Duration
}

func clientFlagSet(name string, stderr io.Writer) (*flag.FlagSet, clientFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs, clientFlags{
		steps:   fs.Bool("steps", false, "print each step the agent takes as it happens"),
		addr:    fs.String("addr", "", "daemon address (default: MMCP_LISTEN_ADDR)"),
		timeout: fs.Duration("timeout", 0, "give up after this long (default: MMCP_TURN_TIMEOUT plus a minute, so the daemon's own timeout comes first)"),
	}
}

// client reaches the daemon the settings (or --addr) name, with its token.
func (f clientFlags) client() (client, error) {
	cfg, err := loadConfig()
	if err != nil {
		return client{}, err
	}
	addr := *f.addr
	if addr == "" {
		addr = cfg.ListenAddr
	}
	timeout := *f.timeout
	if timeout <= 0 {
		timeout = cfg.TurnTimeout + time.Minute
	}
	return client{base: "http://" + addr, token: cfg.APIToken.Reveal(), http: &http.Client{Timeout: timeout}}, nil
}
