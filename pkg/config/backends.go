package config

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/mmcpd/mmcpd/pkg/redact"
)

// Model server kinds of MMCP_LLM_BACKENDS.
const (
	KindOllama = "ollama"
	KindOpenAI = "openai" // any server with OpenAI's /v1/chat/completions
)

// Backend is one model server of MMCP_LLM_BACKENDS.
type Backend struct {
	Kind   string // KindOllama or KindOpenAI
	URL    string // normalised, without a trailing slash
	Model  string
	APIKey Secret // from KeyVar; openai only
	KeyVar string // MMCP_LLM_<N>_API_KEY, N the entry's place from 1
}

// Name is the entry as it would be written in MMCP_LLM_BACKENDS: it names the
// server in logs, steps, /readyz and metrics, and holds no secret (the URL
// cannot carry credentials).
func (b Backend) Name() string { return b.Kind + "=" + b.URL + "#" + b.Model }

// keyVar is the variable of entry n's API key (n from 1).
func keyVar(n int) string { return fmt.Sprintf("MMCP_LLM_%d_API_KEY", n) }

// Backends lists the model servers: MMCP_LLM_BACKENDS's entries with their
// keys, or, when it is empty, the one Ollama of MMCP_OLLAMA_HOST and
// MMCP_OLLAMA_MODEL. Load has checked them; the error says what is wrong
// with each entry.
func (c Config) Backends() ([]Backend, error) {
	const name = "MMCP_LLM_BACKENDS"
	keys := apiKeys()
	if strings.TrimSpace(c.LLMBackends) == "" {
		var errs []error
		for n := range keys {
			errs = append(errs, fmt.Errorf("%s is set, but %s is empty: keys go with its entries (the Ollama of MMCP_OLLAMA_HOST takes none)", keyVar(n), name))
		}
		return []Backend{{Kind: KindOllama, URL: c.OllamaHost, Model: c.OllamaModel}}, errors.Join(errs...)
	}
	var (
		out  []Backend
		errs []error
		seen = map[string]int{}
	)
	entries := strings.Split(c.LLMBackends, ",")
	for i, e := range entries {
		n := i + 1
		b, err := parseBackend(strings.TrimSpace(e))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s entry %d: %w (expected kind=url#model, kind ollama or openai, e.g. openai=http://nas:8080/v1#qwen2.5-7b)", name, n, err))
			continue
		}
		if first, dup := seen[b.Name()]; dup {
			errs = append(errs, fmt.Errorf("%s entry %d: the same server and model as entry %d", name, n, first))
			continue
		}
		seen[b.Name()] = n
		b.KeyVar = keyVar(n)
		if k, ok := keys[n]; ok {
			if b.Kind == KindOllama {
				errs = append(errs, fmt.Errorf("%s is set, but entry %d is an Ollama server, which takes no key", keyVar(n), n))
			}
			b.APIKey = k
		}
		out = append(out, b)
	}
	for n := range keys {
		if n > len(entries) {
			errs = append(errs, fmt.Errorf("%s is set, but %s has %d entries", keyVar(n), name, len(entries)))
		}
	}
	return out, errors.Join(errs...)
}

func parseBackend(e string) (Backend, error) {
	if e == "" {
		return Backend{}, errors.New("empty")
	}
	kind, rest, ok := strings.Cut(e, "=")
	kind = strings.ToLower(strings.TrimSpace(kind))
	if !ok {
		return Backend{}, errors.New("no kind= before the URL")
	}
	cut := strings.LastIndex(rest, "#")
	if cut < 0 || strings.TrimSpace(rest[cut+1:]) == "" {
		return Backend{}, errors.New("no #model after the URL")
	}
	raw, model := strings.TrimSpace(rest[:cut]), strings.TrimSpace(rest[cut+1:])
	switch kind {
	case KindOllama:
		u, err := normalizeOllamaHost(raw)
		if err != nil {
			return Backend{}, err
		}
		return Backend{Kind: kind, URL: u, Model: model}, nil
	case KindOpenAI:
		u, err := openAIURL(raw)
		if err != nil {
			return Backend{}, err
		}
		return Backend{Kind: kind, URL: u, Model: model}, nil
	}
	return Backend{}, fmt.Errorf("unknown kind %q", kind)
}

// openAIURL checks the base URL of an OpenAI-compatible server: http(s),
// with no credentials or query, which would be shown wherever the server is
// named (keys go in MMCP_LLM_<N>_API_KEY).
func openAIURL(s string) (string, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil && strings.Contains(s, "@"):
		return "", errors.New("cannot parse the URL (not shown: it may contain credentials)")
	case err != nil:
		return "", fmt.Errorf("cannot parse the URL %q", redact.URL(s))
	case u.User != nil:
		return "", errors.New("user:password@ in the URL is not supported: put the key in MMCP_LLM_<N>_API_KEY")
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return "", fmt.Errorf("%q is not an http(s) URL such as http://nas:8080/v1", redact.URL(s))
	case u.RawQuery != "" || u.Fragment != "":
		return "", errors.New("a query in the URL is not supported, nor a # before the model's (a query may hold a key: put the key in MMCP_LLM_<N>_API_KEY)")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}

// apiKeys reads every MMCP_LLM_<N>_API_KEY that is set and not empty.
func apiKeys() map[int]Secret {
	keys := map[int]Secret{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		num, ok := strings.CutPrefix(k, "MMCP_LLM_")
		if !ok {
			continue
		}
		num, ok = strings.CutSuffix(num, "_API_KEY")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 1 || strconv.Itoa(n) != num || v == "" {
			continue
		}
		keys[n] = Secret(v)
	}
	return keys
}

// effectiveKeys writes each entry's key, masked, after the settings: they are
// no fields of Config, being one per entry.
func (c Config) effectiveKeys(w io.Writer) error {
	if strings.TrimSpace(c.LLMBackends) == "" {
		return nil
	}
	list, _ := c.Backends()
	for _, b := range list {
		if b.APIKey == "" {
			continue
		}
		if _, err := fmt.Fprintf(w, "%s=%v\n", b.KeyVar, b.APIKey); err != nil {
			return err
		}
	}
	return nil
}
