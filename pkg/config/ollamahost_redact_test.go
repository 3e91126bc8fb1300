package config

import (
	"strings"
	"testing"
)

// TestOllamaHostQueryNotEchoed: a refused MMCP_OLLAMA_HOST is quoted in the
// error (it is logged) with its secret-looking query values masked.
func TestOllamaHostQueryNotEchoed(t *testing.T) {
	const key = "ollama-key-2c8e"
	tests := []struct{ in, want string }{
		{"http://gpu-box:11434/?api_key=" + key, `"http://gpu-box:11434/?api_key=***"`},
		{"http://gpu-box:bad/?token=" + key, `"http://gpu-box:bad/?token=***"`},
	}
	for _, tc := range tests {
		_, err := normalizeOllamaHost(tc.in)
		if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("normalizeOllamaHost(%q) error = %v, want one quoting %s", tc.in, err, tc.want)
		}
	}
}
