package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGetFillsEveryField(t *testing.T) {
	info := Get()
	if info.Version == "" || info.Commit == "" || info.GoVersion != runtime.Version() || info.Platform == "" {
		t.Fatalf("incomplete version info: %+v", info)
	}
}

func TestLinkTimeValuesWin(t *testing.T) {
	oldV, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })
	Version, Commit = "v9.9.9", "abc123"
	got := Get()
	if got.Version != "v9.9.9" || got.Commit != "abc123" {
		t.Fatalf("link-time values ignored: %+v", got)
	}
	if s := got.String(); !strings.HasPrefix(s, "v9.9.9 (commit abc123, ") {
		t.Fatalf("String() = %q", s)
	}
}
