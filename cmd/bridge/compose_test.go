package main

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/fnbridge/fnbridge/bridge"
)

type composeService struct {
	Image       string            `yaml:"image"`
	Build       string            `yaml:"build"`
	User        string            `yaml:"user"`
	Command     []string          `yaml:"command"`
	Volumes     []string          `yaml:"volumes"`
	Expose      []string          `yaml:"expose"`
	Ports       []string          `yaml:"ports"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   dependsOn         `yaml:"depends_on"`
	Restart     string            `yaml:"restart"`
	StopGrace   string            `yaml:"stop_grace_period"`
}

// dependsOn maps a service to its condition; compose's short list form
// means service_started.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, name := range names {
			(*d)[name] = "service_started"
		}
		return nil
	}
	var long map[string]struct {
		Condition string `yaml:"condition"`
	}
	if err := n.Decode(&long); err != nil {
		return err
	}
	for name, v := range long {
		(*d)[name] = v.Condition
	}
	return nil
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

// Docker does not run on our machines, so this test checks what it can of
// docker-compose.yaml and the Dockerfile against the real CLI and files:
// pinned images, the bridge command's flags, mounted paths, the port the
// registration targets, request signing end to end, and the non-root user.
func TestDockerComposeMatchesCLIAndFiles(t *testing.T) {
	repo := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(repo, "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose composeFile
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}
	for name, svc := range compose.Services {
		if svc.Image != "" && !regexp.MustCompile(`:[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(svc.Image) {
			t.Errorf("service %s: image %q is not pinned to a version", name, svc.Image)
		}
	}
	if img := compose.Services["restate"].Image; !strings.HasSuffix(img, "restatedev/restate:1.7.12") {
		t.Errorf("restate image %q is not the official 1.7.12 image", img)
	}

	bridgeSvc := compose.Services["bridge"]
	if bridgeSvc.Build != "." {
		t.Errorf("bridge builds from %q, want the repository's Dockerfile", bridgeSvc.Build)
	}
	cmd := parseCommand(t, "bridge", bridgeSvc.Command, "serve")
	configInContainer := flagValue(t, cmd, "config")
	listen := flagValue(t, cmd, "listen")
	keysFile := flagValue(t, cmd, "identity-keys-file")

	// The config file named in the container must come from a mounted
	// repository directory and exist there.
	mounts := volumeMounts(t, repo, compose, "bridge")
	host, rel := mountOf(mounts, configInContainer)
	if host == "" || !strings.HasPrefix(host, ".") {
		t.Fatalf("--config %s is not inside a mounted repository directory", configInContainer)
	}
	cfgPath := filepath.Join(repo, host, rel)

	// Request signing: keygen writes the pair into two named volumes;
	// restate-server reads the private key from the one only it and keygen
	// mount, the bridge the public key from the other.
	keygenSvc := compose.Services["keygen"]
	if keygenSvc.Build != "." {
		t.Errorf("keygen builds from %q, want the bridge image", keygenSvc.Build)
	}
	kg := parseCommand(t, "keygen", keygenSvc.Command, "keygen")
	if flagValue(t, kg, "reuse") != "true" {
		t.Errorf("keygen runs without --reuse: a second `docker compose up` would fail on the existing key")
	}
	kgMounts := volumeMounts(t, repo, compose, "keygen")
	privVol, privRel := mountOf(kgMounts, flagValue(t, kg, "out"))
	pubVol, pubRel := mountOf(kgMounts, flagValue(t, kg, "public-out"))
	if privVol == "" || pubVol == "" || privVol == pubVol || strings.HasPrefix(privVol, ".") || strings.HasPrefix(pubVol, ".") {
		t.Fatalf("keygen must write the private and public keys into two different named volumes, got %q and %q", privVol, pubVol)
	}
	if v, r := mountOf(mounts, keysFile); v != pubVol || r != pubRel {
		t.Errorf("bridge --identity-keys-file %s is not the public key keygen writes (%s/%s)", keysFile, pubVol, pubRel)
	}
	for _, m := range bridgeSvc.Volumes {
		if strings.HasPrefix(m, privVol+":") {
			t.Errorf("the bridge mounts the private key volume %s", privVol)
		}
	}
	restateSvc := compose.Services["restate"]
	pemInRestate := restateSvc.Environment["RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE"]
	if v, r := mountOf(volumeMounts(t, repo, compose, "restate"), pemInRestate); v != privVol || r != privRel {
		t.Errorf("restate-server's RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE %q is not the private key keygen writes (%s/%s)", pemInRestate, privVol, privRel)
	}
	for _, svc := range []string{"restate", "bridge"} {
		if c := compose.Services[svc].DependsOn["keygen"]; c != "service_completed_successfully" {
			t.Errorf("%s does not wait for keygen to complete (depends_on condition %q)", svc, c)
		}
	}

	// With the public key keygen would write, the bridge's command passes
	// serve's exposure check on a reachable address.
	if bridge.IsLoopback(listen) {
		t.Errorf("bridge listens on loopback %s: restate-server in another container cannot reach it", listen)
	}
	pub := filepath.Join(t.TempDir(), "restate-identity.pem")
	if _, err := bridge.Keygen(bridge.KeygenOptions{Out: pub}); err != nil {
		t.Fatal(err)
	}
	served, err := loadServeConfig(cfgPath, listen, pub+".pub")
	if err != nil {
		t.Fatalf("bridge serve with the mounted config, --listen %s and keygen's public key would not start: %v", listen, err)
	}
	// docker stop's SIGKILL must come after the drain (shutdown_timeout),
	// unregistering (3 s) and the last spans' export (5 s): docs/scaling.md.
	if grace, err := time.ParseDuration(bridgeSvc.StopGrace); err != nil || grace <= served.ShutdownTimeout.Std()+8*time.Second {
		t.Errorf("bridge stop_grace_period %q is not above shutdown_timeout (%s) + 8s: docker stop would kill the drain", bridgeSvc.StopGrace, served.ShutdownTimeout.Std())
	}
	if r := bridgeSvc.Restart; r != "unless-stopped" && r != "always" && r != "on-failure" {
		t.Errorf("bridge restart policy %q: a bridge that exits on a failure stays down", r)
	}
	if _, err := loadServeConfig(cfgPath, listen, ""); err == nil {
		t.Errorf("without --identity-keys-file the bridge would serve unsigned on %s: the check above proves nothing", listen)
	}

	// The registration must target the bridge's listen port.
	port := listen[strings.LastIndex(listen, ":")+1:]
	reg := strings.Join(compose.Services["register"].Command, " ")
	if !strings.Contains(reg, "http://bridge:"+port) || !strings.Contains(reg, "http://restate:9070/deployments") {
		t.Errorf("register command %q does not register http://bridge:%s with restate's admin API", reg, port)
	}
	if !contains(bridgeSvc.Expose, port) {
		t.Errorf("bridge does not expose its listen port %s", port)
	}
	for _, svc := range []string{"bridge", "keygen"} {
		if u := compose.Services[svc].User; u != "" && (u == "root" || strings.HasPrefix(u, "0")) {
			t.Errorf("%s runs as %q, overriding the image's unprivileged user", svc, u)
		}
	}

	checkDockerfile(t, repo, append(dirsOf(kgMounts), path.Dir(keysFile)))
}

// checkDockerfile checks the Dockerfile: what it copies exists, its final
// stage runs as a non-root user it creates and that owns keyDirs, and its
// default command parses and would pass serve's exposure check.
func checkDockerfile(t *testing.T, repo string, keyDirs []string) {
	df, err := os.ReadFile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(df), "\n")
	var final []string // lines of the last stage
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "COPY" && !strings.HasPrefix(f[1], "--") {
			for _, src := range f[1 : len(f)-1] {
				if _, err := os.Stat(filepath.Join(repo, src)); src != "." && err != nil {
					t.Errorf("Dockerfile copies %s, which does not exist", src)
				}
			}
		}
		if len(f) > 0 && f[0] == "FROM" {
			final = nil
		}
		final = append(final, line)
	}
	stage := strings.Join(final, "\n")
	var user, cmdJSON string
	for _, line := range final {
		if u, ok := strings.CutPrefix(line, "USER "); ok {
			user = strings.TrimSpace(u)
		}
		if c, ok := strings.CutPrefix(line, "CMD "); ok {
			cmdJSON = c
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	switch {
	case user == "":
		t.Errorf("the Dockerfile's final stage has no USER: the bridge and its functions would run as root")
	case uid == "0" || uid == "root":
		t.Errorf("the Dockerfile's final stage runs as %s", user)
	case !regexp.MustCompile(`useradd [^\n]*--uid ` + regexp.QuoteMeta(uid) + `\b`).MatchString(stage):
		t.Errorf("USER %s is not created with useradd --uid %s in the final stage", user, uid)
	}
	for _, dir := range keyDirs {
		if !regexp.MustCompile(`chown [^\n]*` + regexp.QuoteMeta(dir) + `\b`).MatchString(stage) {
			t.Errorf("the image does not chown %s to its user: keygen could not write into a fresh volume there", dir)
		}
	}

	var args []string
	if err := json.Unmarshal([]byte(cmdJSON), &args); err != nil {
		t.Fatalf("Dockerfile CMD %q is not a JSON array: %v", cmdJSON, err)
	}
	cmd := parseCommand(t, "Dockerfile CMD", args, "serve")
	if flagValue(t, cmd, "config") != "/etc/fnbridge/bridge.yaml" {
		t.Errorf("Dockerfile CMD does not serve /etc/fnbridge/bridge.yaml, where examples/ is copied")
	}
	listen := flagValue(t, cmd, "listen")
	if !bridge.IsLoopback(listen) && flagValue(t, cmd, "identity-keys-file") == "" {
		t.Errorf("Dockerfile CMD listens on %s without --identity-keys-file: serve would refuse to start", listen)
	}
}

// parseCommand resolves a container command with the real CLI.
func parseCommand(t *testing.T, what string, args []string, want string) *cobra.Command {
	t.Helper()
	cmd, rest, err := newRootCmd().Find(args)
	if err != nil || cmd.Name() != want {
		t.Fatalf("%s command %v does not resolve to %q: %v", what, args, want, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("%s command flags %v: %v", what, rest, err)
	}
	return cmd
}

// volumeMounts maps a service's container paths to what is mounted there:
// a repository directory (checked to exist) or a declared named volume.
func volumeMounts(t *testing.T, repo string, c composeFile, service string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range c.Services[service].Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("%s: volume %q is not source:container", service, v)
		}
		src, ctr := parts[0], parts[1]
		if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
			if st, err := os.Stat(filepath.Join(repo, src)); err != nil || !st.IsDir() {
				t.Errorf("%s: mounted host path %s does not exist in the repository", service, src)
			}
		} else if _, ok := c.Volumes[src]; !ok {
			t.Errorf("%s: named volume %s is not declared under volumes", service, src)
		}
		out[ctr] = src
	}
	return out
}

// mountOf returns the source mounted over file and file's path inside it.
func mountOf(mounts map[string]string, file string) (source, rel string) {
	for ctr, src := range mounts {
		if r, ok := strings.CutPrefix(file, ctr+"/"); ok {
			return src, r
		}
	}
	return "", ""
}

func dirsOf(mounts map[string]string) []string {
	var out []string
	for ctr := range mounts {
		out = append(out, ctr)
	}
	return out
}

func flagValue(t *testing.T, cmd *cobra.Command, name string) string {
	t.Helper()
	f := cmd.Flags().Lookup(name)
	if f == nil {
		t.Fatalf("%s has no --%s flag", cmd.Name(), name)
	}
	return f.Value.String()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
