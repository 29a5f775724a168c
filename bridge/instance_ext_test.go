package bridge_test

import (
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
)

// instance: in the file is checked and normalised; left out, the identity
// is the hostname; a bad one is an error naming the field.
func TestConfigInstance(t *testing.T) {
	cfg, err := bridge.LoadConfig(writeConfig(t, "instance: Replica-A\n"+validConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Instance != "replica-a" || cfg.InstanceFrom != bridge.InstanceFromConfig {
		t.Errorf("instance %q from %q, want replica-a from the file", cfg.Instance, cfg.InstanceFrom)
	}
	cfg, err = bridge.LoadConfig(writeConfig(t, validConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Instance != bridge.DefaultInstance() || cfg.InstanceFrom != bridge.InstanceFromHostname {
		t.Errorf("instance %q from %q, want the hostname's %q", cfg.Instance, cfg.InstanceFrom, bridge.DefaultInstance())
	}
	_, err = bridge.LoadConfig(writeConfig(t, "instance: \"my pod\"\n"+validConfig))
	if err == nil || !strings.Contains(err.Error(), `instance: "my pod" is not allowed`) {
		t.Fatalf("err = %v, want one naming the instance field", err)
	}
}

// SetInstance (--instance, FNBRIDGE_INSTANCE) replaces the identity and
// says where it came from; a bad value names its source and changes
// nothing.
func TestSetInstance(t *testing.T) {
	cfg, err := bridge.LoadConfig(writeConfig(t, "instance: from-file\n"+validConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.SetInstance("pod/1", bridge.InstanceFromFlag); err == nil || !strings.HasPrefix(err.Error(), "--instance: ") {
		t.Fatalf("err = %v, want one naming --instance", err)
	}
	if cfg.Instance != "from-file" {
		t.Fatalf("a refused --instance changed the identity to %q", cfg.Instance)
	}
	if err := cfg.SetInstance("fnbridge-0", bridge.InstanceFromEnv); err != nil || cfg.Instance != "fnbridge-0" || cfg.InstanceFrom != bridge.InstanceFromEnv {
		t.Fatalf("SetInstance: %v; instance %q from %q", err, cfg.Instance, cfg.InstanceFrom)
	}
}
