package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const canary = "canary-7f3a9c1e"

func TestSecretFromEnv(t *testing.T) {
	cleanEnv(t)
	t.Setenv("MMCP_API_TOKEN", canary)
	c := mustLoad(t)
	if got := c.APIToken.Reveal(); got != canary {
		t.Errorf("Reveal() = %q, want %q", got, canary)
	}
}

func TestSecretNeverPrinted(t *testing.T) {
	s := Secret(canary)
	c := defaults
	c.APIToken = s

	var outputs []string
	for _, verb := range []string{"%v", "%s", "%+v", "%#v", "%q", "%x", "%X", "%d", "%10s", "%-10v", "%T %v"} {
		for _, arg := range []any{s, &s, c, &c, []Secret{s}, map[string]any{"k": s}} {
			outputs = append(outputs, fmt.Sprintf(verb, arg))
		}
	}
	outputs = append(outputs, fmt.Sprint(s, c), fmt.Sprintln(s, c), s.String(), s.GoString())

	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		log := slog.New(h(&b))
		log.Info("loaded", "config", c, "ptr", &c, "token", s, slog.Any("any", s), slog.Group("g", "token", s))
		log.With("token", s).Info("with")
		outputs = append(outputs, b.String())
	}

	for _, v := range []any{c, &c, s, map[string]Secret{"token": s}} {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(j))
	}

	var eff bytes.Buffer
	if err := c.Effective(&eff); err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, eff.String())

	for _, out := range outputs {
		if strings.Contains(out, canary) {
			t.Errorf("secret leaked: %s", out)
		}
	}
	if !strings.Contains(eff.String(), "MMCP_API_TOKEN="+mask+"\n") {
		t.Errorf("Effective() does not show the mask:\n%s", eff.String())
	}
}

func TestSecretForms(t *testing.T) {
	tests := []struct {
		s                         Secret
		str, gostr, json, logText string
	}{
		{Secret(canary), mask, `"` + mask + `"`, `"` + mask + `"`, "token=" + mask},
		{"", "", `""`, `""`, `token=""`},
	}
	for _, tc := range tests {
		if got := fmt.Sprintf("%v|%s", tc.s, tc.s); got != tc.str+"|"+tc.str {
			t.Errorf("%%v|%%s = %q, want %q", got, tc.str+"|"+tc.str)
		}
		if got := fmt.Sprintf("%#v", tc.s); got != tc.gostr {
			t.Errorf("%%#v = %q, want %q", got, tc.gostr)
		}
		if got, _ := json.Marshal(tc.s); string(got) != tc.json {
			t.Errorf("json = %s, want %s", got, tc.json)
		}
		if got, _ := tc.s.MarshalText(); string(got) != tc.str {
			t.Errorf("MarshalText = %q, want %q", got, tc.str)
		}
		var b bytes.Buffer
		slog.New(slog.NewTextHandler(&b, nil)).Info("m", "token", tc.s)
		if !strings.Contains(b.String(), tc.logText+"\n") {
			t.Errorf("slog text = %q, want it to end with %q", b.String(), tc.logText)
		}
		if got := tc.s.Reveal(); got != string(tc.s) {
			t.Errorf("Reveal() = %q, want %q", got, string(tc.s))
		}
	}
}
