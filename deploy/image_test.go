package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mmcpd/mmcpd/internal/needs"
)

// instruction is one Dockerfile line, continuations joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

type stage struct {
	name, base string
	body       []instruction
}

// parseDockerfile splits a Dockerfile into its stages. It knows what these
// checks need (comments, continuations, FROM ... AS name), not the whole
// grammar: no linter for Dockerfiles can be installed on this project's
// machines.
func parseDockerfile(t *testing.T, path string) (args map[string]string, stages []stage) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		if s := strings.TrimSpace(cur.String()); s != "" {
			lines = append(lines, s)
		}
		cur.Reset()
	}
	args = map[string]string{}
	for _, l := range lines {
		cmd, rest, _ := strings.Cut(l, " ")
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(rest)}
		switch {
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			st := stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
		case len(stages) == 0 && in.cmd == "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
		case len(stages) > 0:
			stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
		}
	}
	return args, stages
}

func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.body {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// TestDockerfile checks the image's rules: a build stage and small runtime
// images, each running as a user other than root, with the data folder as a
// volume, the port, the settings a container needs and a health check that
// needs no shell.
func TestDockerfile(t *testing.T) {
	args, stages := parseDockerfile(t, "../Dockerfile")
	if len(stages) < 2 {
		t.Fatalf("%d stages; the image must be built in one and run from another", len(stages))
	}
	if stages[0].name != "build" {
		t.Errorf("the first stage is %q, want build", stages[0].name)
	}
	build := strings.Join(stages[0].all("RUN"), "\n")
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/mmcpd", "plugins/*/", "mmcp-plugin-$name", "-X main.version=", "-X main.commit="} {
		if !strings.Contains(build, want) {
			t.Errorf("the build stage does not have %q", want)
		}
	}
	// The default target is the last stage: the small one.
	last := stages[len(stages)-1]
	if last.base != "${RUNTIME_IMAGE}" || !strings.HasPrefix(args["RUNTIME_IMAGE"], "gcr.io/distroless/static") {
		t.Errorf("the default image is based on %s (RUNTIME_IMAGE=%s), want distroless static", last.base, args["RUNTIME_IMAGE"])
	}
	for _, s := range stages[1:] {
		t.Run(s.name, func(t *testing.T) { checkRuntimeStage(t, s) })
	}
	if !slices.ContainsFunc(stages, func(s stage) bool { return s.name == "node" && s.base == "${NODE_IMAGE}" }) {
		t.Error("no node stage: MCP servers run with npx need Node.js")
	}
}

func checkRuntimeStage(t *testing.T, s stage) {
	users := s.all("USER")
	if len(users) == 0 {
		t.Fatal("no USER: the image would run as root")
	}
	if u, _, _ := strings.Cut(users[len(users)-1], ":"); u == "root" || u == "0" {
		t.Errorf("USER %s", users[len(users)-1])
	}
	if v := s.all("VOLUME"); !slices.Contains(v, "/data") {
		t.Errorf("VOLUME %q, want /data", v)
	}
	if e := s.all("EXPOSE"); !slices.Contains(e, "8787") {
		t.Errorf("EXPOSE %q, want 8787", e)
	}
	env := map[string]string{}
	for _, e := range s.all("ENV") {
		for _, kv := range strings.Fields(e) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	for k, v := range map[string]string{"MMCP_LISTEN_ADDR": "0.0.0.0:8787", "MMCP_DATA_DIR": "/data", "MMCP_PLUGINS_DIR": "/usr/local/lib/mmcpd/plugins"} {
		if env[k] != v {
			t.Errorf("ENV %s=%q, want %q", k, env[k], v)
		}
	}
	// The plugins folder and the data folder come from the build stage; the
	// data folder owned by the user, so that a fresh volume is writable.
	copies := strings.Join(s.all("COPY"), "\n")
	if !strings.Contains(copies, "--from=build /out/usr/local /usr/local") {
		t.Errorf("the binaries are not copied from the build stage:\n%s", copies)
	}
	if !strings.Contains(copies, "--from=build --chown=65532:65532 /out/data /data") {
		t.Errorf("/data is not created for the user:\n%s", copies)
	}
	// Exec form: the distroless image has no shell to run a string.
	hc := s.all("HEALTHCHECK")
	if len(hc) != 1 || !strings.Contains(hc[0], `CMD ["/usr/local/bin/mmcpd", "health"]`) {
		t.Errorf("HEALTHCHECK %q, want the exec form of mmcpd health", hc)
	}
	if ep := s.all("ENTRYPOINT"); len(ep) != 1 || ep[0] != `["/usr/local/bin/mmcpd"]` {
		t.Errorf("ENTRYPOINT %q", ep)
	}
}

// TestCompose has docker-compose check the file against the compose schema
// and resolve it, then reads the result: the services share one network,
// mmcpd gets the token and reaches Ollama by name, and Open WebUI's
// connection points at mmcpd with the same token.
func TestCompose(t *testing.T) {
	compose := needs.Program(t, "docker-compose", "docker-compose")
	dir := filepath.Join(t.TempDir(), "deploy")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"compose.yaml", "mmcpd.env.example"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	example, _ := os.ReadFile(filepath.Join(dir, "mmcpd.env.example"))
	const token = "0123456789abcdef-token"
	envFile := append(example, []byte("MMCP_API_TOKEN="+token+"\nMMCP_ALLOWED_HOSTS=media.example.com\n")...)
	if err := os.WriteFile(filepath.Join(dir, "mmcpd.env"), envFile, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(compose, args...)
		cmd.Dir = dir
		// Nothing of this machine's environment may fill the file in.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// As the README says to run it; the README's step that makes the token
	// is what this stands for.
	out, err := run("--env-file", "mmcpd.env", "--profile", "webui", "config")
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	for _, want := range []string{
		"MMCP_API_TOKEN: " + token,
		"MMCP_OLLAMA_HOST: http://ollama:11434",
		"MMCP_ALLOWED_HOSTS: mmcpd,media.example.com",
		"OPENAI_API_BASE_URL: http://mmcpd:8787/v1",
		"OPENAI_API_KEY: " + token,
		"- mmcpd-data:/data",
		"published: 8787",
		"condition: service_healthy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the resolved file lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "      mmcpd: null"); n != 3 {
		t.Errorf("%d services on the mmcpd network, want 3:\n%s", n, out)
	}
	if !regexp.MustCompile(`(?m)^    profiles:\n    - webui$`).MatchString(out) {
		t.Errorf("Open WebUI is not behind the webui profile:\n%s", out)
	}

	// Without --env-file there is no token: compose must stop and say so,
	// not start a daemon that refuses to run.
	out, err = run("config")
	if err == nil || !strings.Contains(out, "set MMCP_API_TOKEN in mmcpd.env") {
		t.Errorf("compose without the token: %v\n%s", err, out)
	}
}
