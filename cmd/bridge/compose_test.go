package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// Docker does not run on our machines, so this test checks what it can of
// docker-compose.yaml and the Dockerfile against the real CLI and files:
// pinned images, the bridge command's flags, mounted paths, and the port
// the registration targets.
func TestDockerComposeMatchesCLIAndFiles(t *testing.T) {
	repo := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(repo, "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image   string   `yaml:"image"`
			Build   string   `yaml:"build"`
			Command []string `yaml:"command"`
			Volumes []string `yaml:"volumes"`
			Expose  []string `yaml:"expose"`
			Ports   []string `yaml:"ports"`
		} `yaml:"services"`
	}
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
	// The command must parse with the real CLI.
	root := newRootCmd()
	cmd, rest, err := root.Find(bridgeSvc.Command)
	if err != nil || cmd.Name() != "serve" {
		t.Fatalf("bridge command %v does not resolve to 'serve': %v", bridgeSvc.Command, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("bridge command flags %v: %v", rest, err)
	}
	configInContainer := flagValue(t, cmd, "config")
	listen := flagValue(t, cmd, "listen")

	// The config file named in the container must come from a mounted
	// repository directory and exist there.
	found := false
	for _, v := range bridgeSvc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("volume %q is not host:container", v)
		}
		host, ctr := parts[0], parts[1]
		if st, err := os.Stat(filepath.Join(repo, host)); err != nil || !st.IsDir() {
			t.Errorf("mounted host path %s does not exist in the repository", host)
		}
		if rel, ok := strings.CutPrefix(configInContainer, ctr+"/"); ok {
			found = true
			cfgPath := filepath.Join(repo, host, rel)
			if _, err := loadConfig(cfgPath, listen); err != nil {
				t.Errorf("mounted config %s does not load: %v", cfgPath, err)
			}
		}
	}
	if !found {
		t.Errorf("--config %s is not inside any mounted volume", configInContainer)
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

	// The Dockerfile's default command must parse too, and what it copies
	// must exist.
	df, err := os.ReadFile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(df), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "COPY" && !strings.HasPrefix(f[1], "--") {
			for _, src := range f[1 : len(f)-1] {
				if _, err := os.Stat(filepath.Join(repo, src)); src != "." && err != nil {
					t.Errorf("Dockerfile copies %s, which does not exist", src)
				}
			}
		}
	}
	if !strings.Contains(string(df), `"--config", "/etc/fnbridge/bridge.yaml"`) {
		t.Errorf("Dockerfile CMD does not serve /etc/fnbridge/bridge.yaml, where examples/ is copied")
	}
}

func flagValue(t *testing.T, cmd *cobra.Command, name string) string {
	t.Helper()
	f := cmd.Flags().Lookup(name)
	if f == nil {
		t.Fatalf("serve has no --%s flag", name)
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
