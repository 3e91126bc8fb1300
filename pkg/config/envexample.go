package config

import (
	"fmt"
	"io"

	"github.com/kelseyhightower/envconfig"
)

// EnvExampleRegenerate is the command that rewrites the committed example,
// named by the test that finds it stale.
const EnvExampleRegenerate = "go run ./cmd/mmcpd config --env-example > deploy/mmcpd.env.example"

const envExampleHeader = `# mmcpd settings, for systemd's EnvironmentFile= (deploy/mmcpd.service) and
# compose's env_file (deploy/compose.yaml). Every variable the daemon reads is
# here, commented out, with its default: uncomment a line to change it.
#
# Generated from pkg/config by "mmcpd config --env-example"; do not edit the
# copy in the repository by hand (its test fails when it differs), regenerate:
#   %s
#
# The systemd unit and the container image set MMCP_DATA_DIR and
# MMCP_PLUGINS_DIR themselves, and the image MMCP_LISTEN_ADDR=0.0.0.0:8787;
# a line here overrides them.
# Listening on anything but loopback requires MMCP_API_TOKEN (the daemon
# refuses to start without it), and a name clients call the daemon by, other
# than localhost or an IP address, must be listed in MMCP_ALLOWED_HOSTS.
#
# Each plugin reads its own MMCP_PLUGIN_<SLUG>_<KEY> variables, listed in
# docs/plugins.md, for example:
#   MMCP_PLUGIN_TMDB_API_KEY=
#   MMCP_PLUGIN_RADARR_URL=http://radarr:7878
#   MMCP_PLUGIN_RADARR_API_KEY=
`

// One block per variable: the description (with the type, which the
// description does not always make plain), then the assignment, commented.
const envExampleFormat = `{{range .}}
# {{usage_description .}}{{with usage_type .}}{{if ne . "String"}} ({{.}}){{end}}{{end}}
#{{usage_key .}}={{usage_default .}}
{{end}}`

// EnvExample writes every variable as a commented line with its default and
// description, in the order of Config's fields: the settings file that
// deploy/ ships, made from the same struct tags Load reads so that it cannot
// fall behind them.
func EnvExample(w io.Writer) error {
	if _, err := fmt.Fprintf(w, envExampleHeader, EnvExampleRegenerate); err != nil {
		return fmt.Errorf("writing the env example: %w", err)
	}
	if err := envconfig.Usagef(prefix, &Config{}, w, envExampleFormat); err != nil {
		return fmt.Errorf("writing the env example: %w", err)
	}
	return nil
}
