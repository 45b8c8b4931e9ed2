package profile

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/execplane/execplane/pkg/problem"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Registry holds the validated profiles of one profiles file. It is immutable: every method
// returns copies, so a *Registry may be shared between goroutines without locking and a
// reload builds a new one.
type Registry struct {
	entries map[string]entry
	names   []string
	// serviceAccount is the token-less ServiceAccount executor Pods run as; empty until
	// WithExecutorServiceAccount sets it.
	serviceAccount string
}

// entry is the registry's own, never shared, copy of one profile.
type entry struct {
	spec   ProfileSpec
	digest string
}

// Entry is one profile as loaded: its name, digest and effective spec (defaults filled,
// capabilities sorted). It is a copy; changing it changes nothing in the registry.
type Entry struct {
	// Name is the profile's name, a DNS-1123 label.
	Name string
	// Digest is "sha256:" and 64 lowercase hex digits over Spec's canonical encoding.
	Digest string
	// Spec is what executor Pods and workspaces are built from.
	Spec ProfileSpec
}

// Profile is the externally visible part of a profile, as the public API's Profile
// message carries it.
type Profile struct {
	// Name is the profile's name, a DNS-1123 label.
	Name string
	// Digest is "sha256:" and 64 lowercase hex digits over the canonical encoding.
	Digest string
	// MaxFileBytes is the largest file a single read or write moves.
	MaxFileBytes int64
	// MaxCommandBytes is the most output kept per stream of a command, and the most stdin a
	// command accepts.
	MaxCommandBytes int64
	// MaxCommandDuration is the longest a command may run.
	MaxCommandDuration time.Duration
	// Capabilities the profile grants, sorted.
	Capabilities []string
	// Commands are the durable commands' bounds, defaults filled in.
	Commands Commands
}

// newRegistry validates and normalises specs and computes each profile's digest. p holds
// the problems decoding found already; every problem is reported at once.
func newRegistry(specs map[string]ProfileSpec, o ParseOptions, p *problem.List) (*Registry, error) {
	if len(specs) == 0 && p.Len() == 0 {
		p.Add("profiles", "at least one profile is required")
	}
	names := make([]string, 0, len(specs))
	for name := range specs {
		names = append(names, name)
	}
	sort.Strings(names)

	normalized := make(map[string]ProfileSpec, len(specs))
	for _, name := range names {
		path := profilePath(name)
		if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
			p.Add(path, "profile name %q is not a DNS-1123 label: %s", name, strings.Join(msgs, "; "))
		}
		s := specs[name]
		s = s.DeepCopy() // the caller's maps and slices stay the caller's
		validateSpec(p, path, &s, o)
		normalize(&s)
		normalized[name] = s
	}
	if err := p.Err(ErrInvalidProfile); err != nil {
		return nil, err
	}

	r := &Registry{entries: make(map[string]entry, len(specs)), names: names}
	for _, name := range names {
		s := normalized[name]
		d, err := digest(&s)
		if err != nil {
			return nil, fmt.Errorf("%w: profiles.%s: digest: %w", ErrInvalidProfile, name, err)
		}
		r.entries[name] = entry{spec: s, digest: d}
	}
	return r, nil
}

// Names returns the profile names, sorted.
func (r *Registry) Names() []string {
	return slices.Clone(r.names)
}

// Get returns a copy of the named profile.
func (r *Registry) Get(name string) (Entry, bool) {
	e, ok := r.entries[name]
	if !ok {
		return Entry{}, false
	}
	return Entry{Name: name, Digest: e.digest, Spec: e.spec.DeepCopy()}, true
}

// Profile returns the externally visible part of the named profile.
func (r *Registry) Profile(name string) (Profile, bool) {
	e, ok := r.entries[name]
	if !ok {
		return Profile{}, false
	}
	return Profile{
		Name:               name,
		Digest:             e.digest,
		MaxFileBytes:       e.spec.MaxFileBytes,
		MaxCommandBytes:    e.spec.MaxCommandBytes,
		MaxCommandDuration: e.spec.MaxCommandDuration.Duration,
		Capabilities:       slices.Clone(e.spec.Capabilities),
		Commands:           commandsOf(e.spec.Commands),
	}, true
}

// ErrInvalidServiceAccount is returned by WithExecutorServiceAccount for a name that is not
// a valid ServiceAccount name.
var ErrInvalidServiceAccount = errors.New("invalid executor ServiceAccount name")

// WithExecutorServiceAccount returns a new registry with the same profiles whose executor
// Pods run as the ServiceAccount called name (a DNS-1123 subdomain). That ServiceAccount is
// expected to carry no token: executor Pods never mount one. The receiver is unchanged.
func (r *Registry) WithExecutorServiceAccount(name string) (*Registry, error) {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, fmt.Errorf("%w: %q: %s", ErrInvalidServiceAccount, name, strings.Join(msgs, "; "))
	}
	c := *r // entries and names are never written after construction, so sharing is safe
	c.serviceAccount = name
	return &c, nil
}

// ExecutorServiceAccount returns the ServiceAccount executor Pods run as, or "" when none was
// set with WithExecutorServiceAccount.
func (r *Registry) ExecutorServiceAccount() string {
	return r.serviceAccount
}

// Commands are a profile's effective bounds on durable commands (docs/commands.md).
type Commands struct {
	MaxDetached   int
	SpoolBytes    int64
	MaxDuration   time.Duration
	RetainRecords int
	RetainFor     time.Duration
}

// DefaultCommands are the bounds of a profile that does not set them: a few background
// servers or builds at once, 64 MiB kept per stream, a day's run, a week of history.
var DefaultCommands = Commands{MaxDetached: 4, SpoolBytes: 64 << 20, MaxDuration: 24 * time.Hour, RetainRecords: 100, RetainFor: 7 * 24 * time.Hour}

func commandsOf(c *CommandsSpec) Commands {
	out := DefaultCommands
	if c == nil {
		return out
	}
	if c.MaxDetached != 0 {
		out.MaxDetached = int(c.MaxDetached)
	}
	if c.SpoolBytes != 0 {
		out.SpoolBytes = c.SpoolBytes
	}
	if c.MaxDuration != nil {
		out.MaxDuration = c.MaxDuration.Duration
	}
	if c.RetainRecords != 0 {
		out.RetainRecords = int(c.RetainRecords)
	}
	if c.RetainFor != nil {
		out.RetainFor = c.RetainFor.Duration
	}
	return out
}
