package main

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/config"
	"github.com/mmcpd/mmcpd/pkg/llm"
)

// newModels makes the pool of model servers MMCP_LLM_BACKENDS lists (the one
// Ollama of MMCP_OLLAMA_HOST when it is empty). The MMCP_OLLAMA_* settings
// apply to Ollama servers; the MMCP_LLM_* ones to every server.
func newModels(cfg config.Config, log *slog.Logger) (*llm.Pool, error) {
	list, err := cfg.Backends()
	if err != nil {
		return nil, err
	}
	// With another server to go to, a refused connection is not waited
	// out here: the pool moves the call at once.
	several := len(list) > 1
	members := make([]llm.Member, 0, len(list))
	for _, b := range list {
		var backend llm.Backend
		switch b.Kind {
		case config.KindOllama:
			backend, err = llm.New(llm.Options{
				Host:        b.URL,
				Model:       b.Model,
				NumCtx:      cfg.OllamaNumCtx,
				Temperature: cfg.LLMTemperature,
				Timeout:     cfg.LLMTimeout,
				IdleTimeout: cfg.LLMIdleTimeout,
				Retries:     cfg.LLMRateLimitRetries,
				KeepAlive:   cfg.OllamaKeepAlive,
				FailFast:    several,
			})
		case config.KindOpenAI:
			backend, err = llm.NewOpenAI(llm.OpenAIOptions{
				BaseURL:     b.URL,
				Model:       b.Model,
				APIKey:      b.APIKey.Reveal(),
				KeySetting:  b.KeyVar,
				Temperature: cfg.LLMTemperature,
				Timeout:     cfg.LLMTimeout,
				IdleTimeout: cfg.LLMIdleTimeout,
				Retries:     cfg.LLMRateLimitRetries,
				FailFast:    several,
			})
		default:
			err = fmt.Errorf("unknown kind %q", b.Kind)
		}
		if err != nil {
			return nil, fmt.Errorf("model server %s: %w", b.Name(), err)
		}
		members = append(members, llm.Member{Name: b.Name(), Model: b.Model, Backend: backend})
	}
	return llm.NewPool(members, llm.PoolOptions{Log: log})
}

// modelFix is what the start-up log says to do when no model server is
// ready.
func modelFix(cfg config.Config) string {
	if cfg.LLMBackends == "" {
		return fmt.Sprintf("install Ollama, start it (ollama serve), run: ollama pull %s; MMCP_OLLAMA_HOST tells mmcpd where it is", cfg.OllamaModel)
	}
	return "start the model servers MMCP_LLM_BACKENDS lists, with their models (GET /readyz shows each one's state)"
}

// printModels lists the model servers for mmcpd config, keys masked.
func printModels(w io.Writer, cfg config.Config) {
	list, _ := cfg.Backends()
	fmt.Fprintln(w, "\n# Model servers")
	for i, b := range list {
		line := fmt.Sprintf("%d %s", i+1, b.Name())
		if b.APIKey != "" {
			line += fmt.Sprintf("  # key %s=%v", b.KeyVar, b.APIKey)
		}
		fmt.Fprintln(w, line)
	}
}

// modelNames lists the models the servers run, for the start-up line.
func modelNames(p *llm.Pool) string {
	var names []string
	for _, b := range p.Backends() {
		if !slices.Contains(names, b.Model) {
			names = append(names, b.Model)
		}
	}
	return strings.Join(names, ",")
}
