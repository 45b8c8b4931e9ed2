package integration_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/precondition"
	"github.com/execplane/execplane/pkg/profile/profiletest"
)

// pane is a tmux session of its own (its own server socket) running one command in a
// window of a given size: a real terminal for execctl, driven by keys and read from the
// screen.
type pane struct {
	t    *testing.T
	tmux string
	sock string
	env  []string
}

func newPane(t *testing.T, env []string, columns, rows int, command string) *pane {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		precondition.Missing(t, "tmux: %v (hack/install-node-packages.sh installs it)", err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g status off\nset -g remain-on-exit on\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &pane{t: t, tmux: bin, sock: filepath.Join(dir, "sock"), env: append(env, "TERM=xterm-256color")}
	p.must("-f", conf, "new-session", "-d", "-s", "t", "-x", strconv.Itoa(columns), "-y", strconv.Itoa(rows), command)
	t.Cleanup(func() { _ = p.cmd("kill-server").Run() })
	return p
}

func (p *pane) cmd(args ...string) *exec.Cmd {
	c := exec.Command(p.tmux, append([]string{"-S", p.sock}, args...)...)
	c.Env = p.env
	return c
}

func (p *pane) must(args ...string) string {
	p.t.Helper()
	out, err := p.cmd(args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keys types into the pane (tmux key names: Enter, C-c).
func (p *pane) keys(keys ...string) {
	p.t.Helper()
	p.must(append([]string{"send-keys", "-t", "t"}, keys...)...)
}

// screen is what the pane shows, its history included.
func (p *pane) screen() string {
	p.t.Helper()
	return p.must("capture-pane", "-p", "-J", "-S", "-200", "-t", "t")
}

// waitFor waits until the pane shows want n times.
func (p *pane) waitFor(want string, n int) {
	p.t.Helper()
	var s string
	if !clustertest.Poll(30*time.Second, func() bool { s = p.screen(); return strings.Count(s, want) >= n }) {
		p.t.Fatalf("the terminal never showed %q %d times; it shows:\n%s", want, n, s)
	}
}

// `execctl exec -it ENV -- sh` in a real terminal (tmux): the remote shell sees the local
// window's size and follows its changes, keys reach it as typed — ^C interrupting its
// foreground job — and execctl exits with the shell's status, the local terminal given
// back as it was.
func TestCLITerminal(t *testing.T) {
	sys := startSystem(t, 1)
	caller := sys.cli(t, "caller")
	id := caller.ensureAndAcquire(t, "tty-1")
	p := newPane(t, caller.env, 100, 30, execctlBin+" exec -it "+id+" -- sh; echo execctl-exit=$?; stty -a | grep -c -- ' icanon' ; sleep 600")
	p.keys("PS1='remote$ '; stty size; echo $((6*7))", "Enter")
	p.waitFor("30 100", 1)
	p.waitFor("42", 1)
	p.must("resize-window", "-t", "t", "-x", "120", "-y", "40")
	p.keys("stty size", "Enter")
	p.waitFor("40 120", 1)
	long := strconv.FormatInt(1_000_000+time.Now().UnixNano()%1_000_000, 10)
	p.keys("sleep "+long+"; echo sl''ept", "Enter")
	clustertest.Eventually(t, 20*time.Second, "the job running", func() bool { return len(processesWith(t, "sleep\x00"+long)) == 1 })
	p.keys("C-c")
	p.keys("echo after-$((1+1))", "Enter")
	p.waitFor("after-2", 1)
	p.keys("exit 4", "Enter")
	p.waitFor("execctl-exit=4", 1)
	// The local terminal is cooked again (icanon on, as stty -a shows it: one line).
	// stty runs after execctl has printed its exit: wait for its answer, not just for the
	// line before it (CI once captured the screen in between).
	var s string
	var after []string
	clustertest.Eventually(t, 20*time.Second, "stty's answer after execctl's exit", func() bool {
		s = p.screen()
		after = strings.Fields(s[strings.Index(s, "execctl-exit=4"):])
		return len(after) >= 2
	})
	if strings.Contains(s, "\nslept") {
		t.Fatalf("the interrupted job went on:\n%s", s)
	}
	if after[1] != "1" {
		t.Fatalf("the local terminal was not given back in canonical mode:\n%s", s)
	}
}

// ensureAndAcquire ensures the binding's environment and acquires a run on it, through
// execctl, and returns the environment's id.
func (c *cli) ensureAndAcquire(t *testing.T, binding string) string {
	t.Helper()
	var env struct {
		Ref   struct{ ID, Revision string }
		Ready bool
	}
	if err := json.Unmarshal([]byte(c.must(0, "env", "ensure", binding, "--profile", profiletest.Name, "-o", "json")), &env); err != nil || !env.Ready {
		t.Fatalf("env ensure: %+v %v", env, err)
	}
	c.must(0, "run", "acquire", binding, env.Ref.ID, "--revision", env.Ref.Revision, "--run-id", "turn-1")
	return env.Ref.ID
}
