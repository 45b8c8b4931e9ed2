package devcmd

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execplane/execplane/internal/cli"
)

// execplaneDev runs the command in-process and returns its output and exit code, the error
// printed as cli.Main prints it.
func execplaneDev(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(t.Context(), args, &out, &errOut)
	code = cli.ExitCode(err)
	if err != nil && code != cli.ExitOK {
		errOut.WriteString("error: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), code
}

// Every command reaches its runner with its flags, whichever side of the command they are
// on (the daemon re-runs itself as `[flags] serve`); none of these starts anything.
func TestRunDispatches(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "absent")
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no command", nil, cli.ExitOK, "usage: execplane-dev up|down|status [flags]"},
		{"help", []string{"help"}, cli.ExitOK, "execplane-dev bundle [flags] DIR"},
		{"status, flags after", []string{"status", "--state-dir", dir}, cli.ExitFailure, "error: nothing running in " + dir},
		{"status, flags before", []string{"--state-dir", dir, "status"}, cli.ExitFailure, "error: nothing running in " + dir},
		{"demo without a stack", []string{"demo", "--state-dir", dir}, cli.ExitFailure, "start one with: execplane-dev up, or make demo"},
		{"an unknown command", []string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{"two commands", []string{"up", "down"}, cli.ExitUsage, "want exactly one of up, down, status, serve"},
		{"host with an argument", []string{"host", "x"}, cli.ExitUsage, "usage: execplane-dev host"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := execplaneDev(t, c.args...)
			if code != c.code || !strings.Contains(stderr, c.stderr) {
				t.Errorf("exit %d, want %d; stderr should hold %q\nstdout:\n%s\nstderr:\n%s", code, c.code, c.stderr, stdout, stderr)
			}
		})
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a command that starts nothing created %s: %v", dir, err)
	}
}

func TestBundle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	out, stderr, code := execplaneDev(t, "bundle", dir, "--client", "ci:attest", "--dns-name", "gw.example")
	if code != 0 || !strings.Contains(out, "spiffe://execplane.test/client/ci") {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the CA key: %v %v", fi, err)
	}
	if _, _, code := execplaneDev(t, "bundle", dir); code != cli.ExitFailure {
		t.Fatalf("a bundle over an existing one: exit %d", code)
	}
	if _, _, code := execplaneDev(t, "bundle", dir+"2", "--client", "x:root"); code != cli.ExitUsage {
		t.Fatalf("an unknown capability: exit %d", code)
	}
}
