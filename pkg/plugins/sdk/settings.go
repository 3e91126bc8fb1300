package sdk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/kelseyhightower/envconfig"

	"github.com/mmcpd/mmcpd/pkg/plugins"
	pluginpb "github.com/mmcpd/mmcpd/pkg/plugins/proto"
	"github.com/mmcpd/mmcpd/pkg/redact"
)

// settingsState is what Settings learnt: the declared variables, the
// problems with their values, and the secret values to keep out of every
// message.
type settingsState struct {
	declared bool
	list     []*pluginpb.Setting
	problems []string
	secrets  []string
	// parseFailed is set when Settings itself found problems.
	parseFailed bool
}

// variable is one setting as envconfig itself sees it.
type variable struct {
	env      string        // the full variable name, MMCP_PLUGIN_<SLUG>_<KEY>
	field    reflect.Value // the leaf field envconfig assigns
	def      string
	desc     string
	required bool
	secret   bool
}

// minSecret is the shortest secret value scrubbed from messages: shorter ones
// would blank out ordinary words.
const minSecret = 4

// Settings reads the plugin's settings into the struct ptr points to, from
// the variables MMCP_PLUGIN_<SLUG>_<FIELD>, using envconfig and its tags:
// split_words:"true" (APIKey reads API_KEY), default:"...", required:"true",
// desc:"..." for the host's settings list, and secret:"true" for a value the
// host must never show. It reads at once, so main can use the values to
// build clients before declaring tools.
//
// A missing or empty required value, or one that does not parse, does not stop
// the plugin: it is reported to the host, which keeps the plugin's tools on
// standby and tells the user which variable to fix; meanwhile the plugin
// refuses its tool calls. Context providers still run.
//
// Secret values never appear in what the SDK reports, and are blanked out of
// tool errors, panics and context text (an HTTP error quoting a URL with a
// key in it, say); so are the credentials a plain setting's URL carries (the
// password of user:pass@, the value of ?apikey= and the like: see
// redact.URL). Results are sent as the tool made them.
func (p *Plugin) Settings(ptr any) {
	if p.settings.declared {
		p.fail(errors.New("Settings called twice"))
		return
	}
	p.settings.declared = true
	if v := reflect.ValueOf(ptr); v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		p.fail(fmt.Errorf("Settings wants a pointer to a struct, got %T", ptr))
		return
	}
	prefix := strings.TrimSuffix(plugins.EnvPrefix(p.name), "_")
	vars, err := gather(prefix, ptr)
	if err != nil {
		p.fail(fmt.Errorf("settings: %w", err))
		return
	}
	st := &p.settings
	probes := make([]reflect.Value, len(vars))
	for i, v := range vars {
		st.list = append(st.list, v.describe(prefix))
		raw, set := os.LookupEnv(v.env)
		if v.secret && set && len(raw) >= minSecret {
			st.secrets = append(st.secrets, raw)
		}
		value := raw
		if !set {
			value = v.def
		}
		if !v.secret {
			// A plain URL setting may still carry credentials (user:pass@,
			// ?apikey=), and an HTTP error may quote the URL.
			for _, part := range redact.Secrets(value) {
				if len(part) >= minSecret {
					st.secrets = append(st.secrets, part)
				}
			}
		}
		if value == "" && v.required {
			// envconfig takes an empty string as a value; for a required
			// setting it is as good as none.
			st.problems = append(st.problems, v.env+" is required")
			continue
		}
		if !set && v.def == "" {
			continue
		}
		probe, err := v.probe()
		if err != nil {
			st.problems = append(st.problems, v.env+": "+parseProblem(err, v.secret))
			continue
		}
		probes[i] = probe
	}
	// Longest first, so that a secret inside another cannot leave part of
	// that one in a message.
	slices.SortStableFunc(st.secrets, func(a, b string) int { return len(b) - len(a) })
	if len(st.problems) > 0 {
		st.parseFailed = true
		// Fill what did parse, so that providers not needing the broken
		// settings keep working.
		for i, v := range vars {
			if probes[i].IsValid() {
				v.field.Set(probes[i])
			}
		}
		return
	}
	// The read that counts is envconfig's own, on the whole struct.
	if err := envconfig.Process(prefix, ptr); err != nil {
		st.problems = append(st.problems, processProblem(err, vars))
	}
	st.parseFailed = len(st.problems) > 0
}

// gather lists the variables through envconfig's usage template, so the names
// the host is told are the names envconfig reads.
func gather(prefix string, ptr any) ([]variable, error) {
	var vars []variable
	var bad error
	collect := func(key string, field reflect.Value, tags reflect.StructTag) string {
		v := variable{env: key, field: field, def: tags.Get("default"), desc: tags.Get("desc")}
		var err error
		if v.required, err = flag(tags, "required"); err != nil {
			bad = errors.Join(bad, fmt.Errorf("%s: %w", key, err))
		}
		if v.secret, err = flag(tags, "secret"); err != nil {
			bad = errors.Join(bad, fmt.Errorf("%s: %w", key, err))
		}
		vars = append(vars, v)
		return ""
	}
	tmpl := template.Must(template.New("settings").
		Funcs(template.FuncMap{"collect": collect}).
		Parse(`{{range .}}{{collect .Key .Field .Tags}}{{end}}`))
	if err := envconfig.Usaget(prefix, ptr, io.Discard, tmpl); err != nil {
		return nil, err
	}
	return vars, bad
}

func flag(tags reflect.StructTag, name string) (bool, error) {
	s := tags.Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("tag %s:%q is not a boolean", name, s)
	}
	return b, nil
}

func (v variable) describe(prefix string) *pluginpb.Setting {
	s := &pluginpb.Setting{
		Key:         strings.TrimPrefix(v.env, prefix+"_"),
		Description: v.desc,
		Required:    v.required,
		Secret:      v.secret,
	}
	if !v.secret { // a default secret is still a secret
		s.Default = v.def
	}
	return s
}

// probe parses the variable alone, with envconfig, into a fresh one-field
// struct: envconfig stops at the first bad value, and the user should learn
// about every bad value at once.
func (v variable) probe() (reflect.Value, error) {
	tag := `envconfig:` + strconv.Quote(v.env)
	if v.def != "" {
		tag += ` default:` + strconv.Quote(v.def)
	}
	typ := reflect.StructOf([]reflect.StructField{{Name: "V", Type: v.field.Type(), Tag: reflect.StructTag(tag)}})
	ptr := reflect.New(typ)
	if err := envconfig.Process("", ptr.Interface()); err != nil {
		return reflect.Value{}, err
	}
	return ptr.Elem().Field(0), nil
}

// parseProblem says what is wrong with a value, quoting it only when it is
// not a secret.
func parseProblem(err error, secret bool) string {
	if secret {
		return "invalid value (a secret, not shown)"
	}
	var pe *envconfig.ParseError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		what := map[string]string{
			"ParseInt":   "integer",
			"ParseUint":  "unsigned integer",
			"ParseFloat": "number",
			"ParseBool":  "boolean",
		}[ne.Func]
		if what == "" {
			what = "value"
		}
		if errors.Is(ne.Err, strconv.ErrRange) {
			return fmt.Sprintf("%s out of range %q", what, clip(ne.Num, 80))
		}
		return fmt.Sprintf("invalid %s %q", what, clip(ne.Num, 80))
	}
	return oneLine(strings.TrimPrefix(err.Error(), "time: "), 200)
}

// processProblem reports an error of the final envconfig read without the
// value it quotes, which may be a secret.
func processProblem(err error, vars []variable) string {
	var pe *envconfig.ParseError
	if errors.As(err, &pe) {
		for _, v := range vars {
			if v.env == pe.KeyName {
				return v.env + ": " + parseProblem(pe, v.secret)
			}
		}
		return pe.KeyName + ": invalid value"
	}
	return oneLine(err.Error(), 200) // envconfig's other errors quote no value
}

// SettingProblem reports a setting whose value parsed but cannot work (a URL
// that is not http, a key of the wrong shape). Like a missing required
// setting, it puts the plugin's tools on standby, and the daemon shows msg
// as the reason: name the full variable, never quote a secret. It is
// ignored when Settings already found a problem: a missing or unparsable
// value is the one to fix first, and its zero value would only add noise.
func (p *Plugin) SettingProblem(msg string) {
	if p.settings.parseFailed {
		return
	}
	p.settings.problems = append(p.settings.problems, msg)
}
