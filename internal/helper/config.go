package helper

import (
	"flag"
	"path/filepath"
	"time"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/helper/fileops"
)

// RootEnv names the environment variable that carries the workspace root. The executor Pod
// spec sets it, and so does the local cluster's node exec endpoint, which maps /workspace
// to a directory on the test machine.
const RootEnv = "EXECPLANE_WORKSPACE_ROOT"

// DefaultRoot is where the executor Pod mounts the workspace PVC.
const DefaultRoot = "/workspace"

// Bounds on the heartbeat interval: often enough for idle timeouts of 30 s or more, rarely
// enough not to matter.
const (
	minHeartbeat     = 100 * time.Millisecond
	maxHeartbeat     = time.Minute
	defaultHeartbeat = 10 * time.Second
)

// Config is the helper's configuration.
type Config struct {
	// Root is the workspace root every path is resolved beneath. Never empty, never "/".
	Root string
	// HeartbeatInterval is how often a running command reports progress.
	HeartbeatInterval time.Duration
	// Pause makes the helper the executor container's idle main process: it waits for
	// SIGTERM and reaps orphans, and serves no request (see pause.go).
	Pause bool
	// Session serves many requests over the one stream (protocol version 2, session.go)
	// instead of exactly one.
	Session bool
	// Terminal runs one command on a pseudo-terminal, its input and output framed over
	// stdin and stdout (terminal.go).
	Terminal bool
	// Supervise makes the helper a durable command's supervisor (internal/helper/supervisor):
	// started by another helper with its start on descriptor 3, never by the gateway.
	Supervise bool
	// Install, when set, copies the helper to this path and exits (install.go): the helper
	// image's init container.
	Install string
	// Mirror, when set, makes Root equal to the tree at this path and exits (mirror.go):
	// the one-shot Pod that copies a workspace into a snapshot or a snapshot into a new
	// workspace.
	Mirror string
	// Quiesce, when set, stops the Pod's processes for at most this long, or until stdin
	// ends, while a snapshot is cut (quiesce.go).
	Quiesce time.Duration
	// MirrorMaxEntries bounds the entries a mirror visits.
	MirrorMaxEntries int
	// MirrorReport, when set, is where the mirror's result goes too (a container's
	// termination message file, read by the controller).
	MirrorReport string

	// refuseKeys is set by Run, not a flag: this process was dumpable from its exec (its
	// binary readable by its user), so record keys given to it are refused.
	refuseKeys bool
}

// DefaultConfig returns the defaults, with the root taken from RootEnv when set.
func DefaultConfig(getenv func(string) string) Config {
	c := Config{Root: DefaultRoot, HeartbeatInterval: defaultHeartbeat, MirrorMaxEntries: fileops.DefaultMirrorEntries}
	if v := getenv(RootEnv); v != "" {
		c.Root = v
	}
	return c
}

// RegisterFlags binds every field to a flag on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Root, "root", c.Root, "workspace root (default from $"+RootEnv+", else "+DefaultRoot+")")
	fs.BoolVar(&c.Session, "session", false, "serve many framed requests over stdin/stdout (protocol version 2) until stdin ends")
	fs.BoolVar(&c.Terminal, "terminal", false, "run one command on a pseudo-terminal, its input and output framed over stdin/stdout, until it ends")
	fs.BoolVar(&c.Supervise, "supervise", false, "supervise one durable command handed over on descriptor 3 (started by the helper itself)")
	fs.BoolVar(&c.Pause, "pause", false, "run as the executor container's idle main process until SIGTERM")
	fs.StringVar(&c.Install, "install", "", "copy this helper to the given absolute path (mode 0555) and exit: the helper image's init container")
	fs.StringVar(&c.Mirror, "mirror", "", "make the workspace root equal to the tree at this absolute path and exit (a snapshot's copy Pod)")
	fs.DurationVar(&c.Quiesce, "quiesce", 0, "stop the executor's processes for at most this long, or until stdin ends, and exit (a snapshot's cut)")
	fs.IntVar(&c.MirrorMaxEntries, "mirror-max-entries", fileops.DefaultMirrorEntries, "bound on the entries a mirror visits (a larger tree is refused)")
	fs.StringVar(&c.MirrorReport, "mirror-report", "", "also write the mirror's result to this file (the container's termination message)")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "interval of heartbeat frames while a command runs")
}

// Validate refuses a root that would confine nothing: empty, relative, unclean or "/".
func (c Config) Validate() error {
	var p cli.Problems
	p.AbsolutePath("root", c.Root, false)
	if c.Root != "" && filepath.Clean(c.Root) == "/" {
		p.Addf("root", "the file system root cannot be the workspace root")
	}
	p.DurationBetween("heartbeat-interval", c.HeartbeatInterval, minHeartbeat, maxHeartbeat)
	if c.Quiesce != 0 {
		p.DurationBetween("quiesce", c.Quiesce, time.Second, maxQuiesce)
	}
	if c.Mirror != "" {
		p.AbsolutePath("mirror", c.Mirror, false)
		if filepath.Clean(c.Mirror) == filepath.Clean(c.Root) {
			p.Addf("mirror", "the source and the workspace root are the same directory")
		}
		if c.MirrorMaxEntries < 1 {
			p.Addf("mirror-max-entries", "must be at least 1")
		}
	}
	return p.Err()
}
