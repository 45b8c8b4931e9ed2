package helper

import (
	"flag"
	"path/filepath"
	"time"

	"github.com/execplane/execplane/internal/cli"
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

	// refuseKeys is set by Run, not a flag: this process was dumpable from its exec (its
	// binary readable by its user), so record keys given to it are refused.
	refuseKeys bool
}

// DefaultConfig returns the defaults, with the root taken from RootEnv when set.
func DefaultConfig(getenv func(string) string) Config {
	c := Config{Root: DefaultRoot, HeartbeatInterval: defaultHeartbeat}
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
	return p.Err()
}
