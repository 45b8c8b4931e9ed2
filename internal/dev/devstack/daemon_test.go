package devstack

import (
	"slices"
	"testing"
)

func TestWithoutCommandKeepsFlags(t *testing.T) {
	got := withoutCommand([]string{"--state-dir", "/s", "up", "--nodes", "2"})
	if !slices.Equal(got, []string{"--state-dir", "/s", "--nodes", "2"}) {
		t.Fatalf("got %v", got)
	}
}
