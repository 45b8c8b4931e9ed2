package helper

import (
	"errors"
	"testing"

	"github.com/execplane/execplane/internal/cli"
)

func TestRootFromEnvironment(t *testing.T) {
	env := map[string]string{RootEnv: "/data/ws"}
	if got := DefaultConfig(func(k string) string { return env[k] }).Root; got != "/data/ws" {
		t.Fatalf("root = %q", got)
	}
	if got := DefaultConfig(func(string) string { return "" }).Root; got != DefaultRoot {
		t.Fatalf("default root = %q", got)
	}
}

func TestValidateRefusesUnconfinedRoots(t *testing.T) {
	for _, root := range []string{"", "/", "//", "relative", "/workspace/../", "/a/./b"} {
		if err := (Config{Root: root, HeartbeatInterval: defaultHeartbeat}).Validate(); !errors.Is(err, cli.ErrInvalidConfig) {
			t.Errorf("root %q accepted: %v", root, err)
		}
	}
	for _, root := range []string{"/workspace", "/tmp/x"} {
		if err := (Config{Root: root, HeartbeatInterval: defaultHeartbeat}).Validate(); err != nil {
			t.Errorf("root %q refused: %v", root, err)
		}
	}
}
