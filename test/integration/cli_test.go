package integration_test

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/profile/profiletest"
)

// cli runs the execctl binary as a named client of gateway 0 and returns stdout and the exit
// code.
type cli struct {
	t     *testing.T
	env   []string
	stdin string
}

func (s *system) cli(t *testing.T, name string) *cli {
	files, err := s.ClientFiles(name)
	if err != nil {
		t.Fatal(err)
	}
	return &cli{t: t, env: append(os.Environ(), "EXECPLANE_ADDRESS="+s.gateways[0].Listen, "EXECPLANE_CA="+files.CAFile,
		"EXECPLANE_CERT="+files.CertFile, "EXECPLANE_KEY="+files.KeyFile, "EXECPLANE_SERVER_NAME=localhost",
		"EXECPLANE_ISSUER=https://idp.example", "EXECPLANE_OWNER=alice", "EXECPLANE_STATE_DIR="+t.TempDir())}
}

func (c *cli) run(args ...string) (string, int) {
	c.t.Helper()
	cmd := exec.Command(execctlBin, args...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(c.stdin)
	c.stdin = ""
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		c.t.Fatalf("execctl %v: %v", args, err)
	}
	code := cmd.ProcessState.ExitCode()
	if code != 0 {
		c.t.Logf("execctl %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(stderr.String()))
	}
	return string(out), code
}

// must runs execctl and fails the test unless it exits with want.
func (c *cli) must(want int, args ...string) string {
	c.t.Helper()
	out, code := c.run(args...)
	if code != want {
		c.t.Fatalf("execctl %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}

// A session through the execctl binary against the real processes: exit codes scripts can
// branch on, JSON they can parse, and a run kept between invocations.
func TestCLISession(t *testing.T) {
	sys := startSystem(t, 1)
	caller, admin := sys.cli(t, "caller"), sys.cli(t, "admin")

	var profile struct {
		Name, Digest string
	}
	if err := json.Unmarshal([]byte(caller.must(0, "profiles", "get", profiletest.Name, "-o", "json")), &profile); err != nil || profile.Digest == "" {
		t.Fatalf("profiles get: %+v %v", profile, err)
	}
	caller.must(3, "profiles", "get", "absent")
	caller.must(0, "refs", "list") // every owner's intents (no --owner)

	var env struct {
		Ref           struct{ ID, Revision string }
		Epoch, PvcUID string
		Lifecycle     string
		Ready         bool
	}
	if err := json.Unmarshal([]byte(caller.must(0, "env", "ensure", "conv-1", "--profile", profiletest.Name, "-o", "json")), &env); err != nil || !env.Ready {
		t.Fatalf("env ensure: %+v %v", env, err)
	}
	id, rev := env.Ref.ID, env.Ref.Revision
	caller.must(3, "fs", "ls", id) // no run held yet
	caller.must(0, "run", "acquire", "conv-1", id, "--revision", rev, "--run-id", "turn-1")

	caller.stdin = "hello from the cli\n"
	caller.must(0, "fs", "put", id, "-", "notes/hello.txt", "--parents")
	if got := caller.must(0, "fs", "cat", id, "notes/hello.txt"); got != "hello from the cli\n" {
		t.Fatalf("fs cat: %q", got)
	}
	var entries []struct{ Path, Type string }
	if err := json.Unmarshal([]byte(caller.must(0, "fs", "ls", id, "notes", "-o", "json")), &entries); err != nil || len(entries) != 1 || entries[0].Path != "hello.txt" {
		t.Fatalf("fs ls: %+v %v", entries, err)
	}
	caller.stdin = "x"
	caller.must(4, "fs", "put", id, "-", "notes/hello.txt", "--if-version", "v1-stale")
	caller.must(3, "fs", "stat", id, "missing.txt")
	if out := caller.must(3, "exec", id, "--", "sh", "-c", "cat notes/hello.txt; exit 3"); out != "hello from the cli\n" {
		t.Fatalf("exec stdout: %q", out)
	}
	caller.must(124, "exec", id, "--timeout", "1s", "--", "sleep", "10")
	var result struct {
		State  string
		Stdout struct{ Head string }
	}
	if err := json.Unmarshal([]byte(caller.must(0, "exec", id, "-o", "json", "--shell", "pwd >/dev/null; echo ok")), &result); err != nil || result.State != "SUCCEEDED" || result.Stdout.Head != "ok\n" {
		t.Fatalf("exec -o json: %+v %v", result, err)
	}
	caller.must(0, "run", "release", id)
	caller.must(3, "fs", "ls", id)

	// Administration: the caller is denied; the administrator retires with the exact epoch,
	// then deletes the retired environment.
	if err := json.Unmarshal([]byte(caller.must(0, "env", "attach", "conv-1", id, "--revision", rev, "-o", "json")), &env); err != nil {
		t.Fatal(err)
	}
	epoch, _ := strconv.ParseUint(env.Epoch, 10, 64)
	caller.must(7, "admin", "retire", id, "--revision", rev, "--epoch", env.Epoch)
	admin.must(4, "admin", "retire", id, "--revision", rev, "--epoch", strconv.FormatUint(epoch+5, 10))
	admin.must(0, "admin", "retire", id, "--revision", rev, "--epoch", env.Epoch, "--reason", "cli test")
	clustertest.Eventually(t, 60*time.Second, "retired", func() bool {
		out, code := caller.run("env", "attach", "conv-1", id, "--revision", rev, "-o", "json")
		return code == 0 && json.Unmarshal([]byte(out), &env) == nil && env.Lifecycle == "LIFECYCLE_STATE_RETIRED"
	})
	admin.must(0, "admin", "delete-retired", id, "--revision", rev, "--pvc-uid", env.PvcUID)
	clustertest.Eventually(t, 60*time.Second, "deleted", func() bool {
		_, code := caller.run("env", "attach", "conv-1", id, "--revision", rev)
		return code == 3
	})
}

// Usage through the execctl binary: a command run with execctl is counted in the
// environment's ledger (usage get, as JSON and as a table), and the billing export (CSV)
// sums it. Windows close only after the settle time, so the export takes open ones too.
func TestCLIUsage(t *testing.T) {
	sys := startSystemWith(t, systemOptions{gateways: 1, controllerArgs: usageArgs})
	caller := sys.cli(t, "caller")
	var env struct {
		Ref   struct{ ID, Revision string }
		Ready bool
	}
	if err := json.Unmarshal([]byte(caller.must(0, "env", "ensure", "conv-usage-cli", "--profile", profiletest.Name, "-o", "json")), &env); err != nil || !env.Ready {
		t.Fatalf("env ensure: %+v %v", env, err)
	}
	id, rev := env.Ref.ID, env.Ref.Revision
	caller.must(0, "run", "acquire", "conv-usage-cli", id, "--revision", rev, "--run-id", "turn-1")
	caller.must(0, "exec", id, "--", "true")
	caller.must(0, "run", "release", id)
	caller.must(3, "usage", "get", "xenv-absent")
	caller.must(2, "usage", "get", id, "--since", "yesterday")

	clustertest.Eventually(t, time.Minute, "usage get counting the command", func() bool {
		out, code := caller.run("usage", "get", id, "--revision", rev, "-o", "json")
		var u struct {
			Environment struct{ ID, Revision string }
			Totals      struct{ Commands string } // int64: a string in protojson, absent when 0
		}
		if code != 0 || json.Unmarshal([]byte(out), &u) != nil || u.Environment.Revision != rev {
			return false
		}
		n, err := strconv.ParseInt(u.Totals.Commands, 10, 64)
		return err == nil && n >= 1
	})
	if out := caller.must(0, "usage", "get", id, "--granularity", "day"); !strings.Contains(out, id) || !strings.Contains(out, "total") {
		t.Fatalf("usage get's table:\n%s", out)
	}

	var rows [][]string
	clustertest.Eventually(t, time.Minute, "the export's commands column summing to at least one", func() bool {
		out, code := caller.run("usage", "export", "--format", "csv", "--closed-only=false", "--since", "2h")
		var err error
		if rows, err = csv.NewReader(strings.NewReader(out)).ReadAll(); code != 0 || err != nil || len(rows) == 0 {
			t.Fatalf("usage export: exit %d, %v:\n%s", code, err, out)
		}
		col := map[string]int{}
		for i, name := range rows[0] {
			col[name] = i
		}
		var commands int64
		for _, r := range rows[1:] {
			if r[col["environment"]] != id || r[col["revision"]] != rev {
				continue
			}
			n, err := strconv.ParseInt(r[col["commands"]], 10, 64)
			if err != nil {
				t.Fatalf("commands %q: %v", r[col["commands"]], err)
			}
			commands += n
		}
		return commands >= 1
	})
	if rows[0][0] != "window_start" || rows[0][len(rows[0])-1] != "bytes_out" {
		t.Fatalf("the export's header: %v", rows[0])
	}
}
