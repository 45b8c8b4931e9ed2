// Package quota is the operator's quotas file: what each client, and each owner a client
// acts for, may hold and use (docs/usage.md "Quotas"). It is strict (unknown fields,
// duplicate keys and out-of-range values are refused, every problem at once) and loaded
// again when it changes (Watch): a bad new file keeps the last good one.
//
// Invariants:
//   - A limit that is not set does not limit; a scope without limits costs no admission
//     write.
//   - The owner scope is an owner of one client: a client cannot spend another client's
//     owners' quota by attesting the same owner.
package quota

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	kjson "sigs.k8s.io/json"

	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/problem"
	"github.com/execplane/execplane/pkg/strictyaml"
)

// Bounds of a quotas file.
const (
	// MaxFileBytes bounds the file, read before decoding: a generous one is a few KiB.
	MaxFileBytes = 1 << 20
	// MaxEnvironments bounds a count limit: a scope's admitted environments are listed in
	// one object (its allocation), which must stay well under etcd's 1.5 MiB.
	MaxEnvironments = 5000
	// MaxCommands bounds the detached commands limit, for the same reason.
	MaxCommands = 5000
	// MinWindow and MaxWindow bound a time quota's rolling window: whole hours (the usage
	// ledger's windows), up to the 35 days the ledgers keep.
	MinWindow = time.Hour
	MaxWindow = 35 * 24 * time.Hour
	// maxClients bounds the clients listed.
	maxClients = 10000
)

// ErrInvalid wraps every problem of a quotas file.
var ErrInvalid = errors.New("invalid quotas")

// Action is what happens when a time quota is exceeded while environments run.
type Action string

// Actions.
const (
	// ActionReport only reports (metrics, the usage answers); nothing is refused.
	ActionReport Action = "report"
	// ActionRefuse refuses new environments, resumes and detached commands of the scope
	// until its use in the window falls under the limit.
	ActionRefuse Action = "refuse"
	// ActionSuspend refuses like ActionRefuse and suspends the scope's ready environments
	// (their workspaces kept).
	ActionSuspend Action = "suspend"
)

// TimeLimit is a limit on use over a rolling window.
type TimeLimit struct {
	// Limit in the quota's unit (core-hours, GiB-hours).
	Limit float64 `json:"limit"`
	// Window is the rolling window, whole hours (default 24h).
	Window Duration `json:"window,omitempty"`
	// Action when exceeded (default refuse).
	Action Action `json:"action,omitempty"`
}

// Limits are one scope's quotas; a nil field does not limit.
type Limits struct {
	// Environments is the most environments that may exist (not deleted).
	Environments *int64 `json:"environments,omitempty"`
	// ReadyEnvironments is the most that may be other than suspended (holding or about to
	// hold an executor).
	ReadyEnvironments *int64 `json:"readyEnvironments,omitempty"`
	// DetachedCommands is the most detached commands that may run at once.
	DetachedCommands *int64 `json:"detachedCommands,omitempty"`
	// Storage is the most workspace storage (the claims' requested sizes) that may exist.
	Storage *resource.Quantity `json:"storage,omitempty"`
	// CPUCoreHours and MemoryGiBHours limit use over a rolling window.
	CPUCoreHours   *TimeLimit `json:"cpuCoreHours,omitempty"`
	MemoryGiBHours *TimeLimit `json:"memoryGiBHours,omitempty"`
}

// IsZero reports whether l limits nothing.
func (l Limits) IsZero() bool {
	return l.Environments == nil && l.ReadyEnvironments == nil && l.DetachedCommands == nil && l.Storage == nil &&
		l.CPUCoreHours == nil && l.MemoryGiBHours == nil
}

// Counted reports whether l has a limit that admission counts in an allocation.
func (l Limits) Counted() bool {
	return l.Environments != nil || l.ReadyEnvironments != nil || l.DetachedCommands != nil || l.Storage != nil
}

// ScopeLimits are the limits of a client and of each of its owners.
type ScopeLimits struct {
	Client Limits `json:"client,omitempty"`
	Owner  Limits `json:"owner,omitempty"`
}

// File is a quotas file.
type File struct {
	// Defaults apply to every client without an entry of its own in Clients.
	Defaults ScopeLimits `json:"defaults,omitempty"`
	// Clients, by canonical client identity (the URI SAN): an entry replaces the defaults
	// for that client (fields it leaves unset do not limit).
	Clients map[string]ScopeLimits `json:"clients,omitempty"`
}

// Duration is a time.Duration written as Go's duration text ("24h").
type Duration struct{ time.Duration }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("a duration must be a string such as \"24h\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Quotas are a parsed, validated quotas file. The zero value limits nothing.
type Quotas struct {
	file File
	// byHash are the clients' entries by client hash (environments store no identity).
	byHash map[string]ScopeLimits
}

// ForHash returns the limits of the client of hash (hex SHA-256 of its identity).
func (q *Quotas) ForHash(clientHash string) ScopeLimits {
	if q == nil {
		return ScopeLimits{}
	}
	if l, ok := q.byHash[clientHash]; ok {
		return l
	}
	return q.file.Defaults
}

// For returns the limits of client (its entry, or the defaults).
func (q *Quotas) For(client string) ScopeLimits {
	if q == nil {
		return ScopeLimits{}
	}
	if l, ok := q.file.Clients[client]; ok {
		return l
	}
	return q.file.Defaults
}

// Empty reports whether nothing is limited.
func (q *Quotas) Empty() bool {
	if q == nil {
		return true
	}
	if !q.file.Defaults.Client.IsZero() || !q.file.Defaults.Owner.IsZero() {
		return false
	}
	for _, l := range q.file.Clients {
		if !l.Client.IsZero() || !l.Owner.IsZero() {
			return false
		}
	}
	return true
}

// Load reads and parses the quotas file at path.
func Load(path string) (*Quotas, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	q, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("quotas file %s: %w", path, err)
	}
	return q, nil
}

// Parse decodes a quotas document strictly and validates it; every problem at once.
func Parse(data []byte) (*Quotas, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrInvalid, MaxFileBytes)
	}
	doc, err := strictyaml.Document(data, "quotas")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var pre problem.List
	precheck(doc, &pre)
	if err := pre.Err(ErrInvalid); err != nil {
		return nil, err
	}
	var f File
	if doc != nil {
		strict, err := kjson.UnmarshalStrict(raw, &f)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if len(strict) > 0 {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(strict...))
		}
	}
	var p problem.List
	validateScope(&p, "defaults", &f.Defaults)
	if len(f.Clients) > maxClients {
		p.Add("clients", "at most %d", maxClients)
	}
	for id, l := range f.Clients {
		if !strings.Contains(id, "://") || len(id) > 2048 || strings.TrimSpace(id) != id {
			p.Add("clients", "%q is not a client identity (a URI SAN such as spiffe://domain/client/name)", id)
		}
		validateScope(&p, "clients["+id+"]", &l)
		f.Clients[id] = l
	}
	if err := p.Err(ErrInvalid); err != nil {
		return nil, err
	}
	q := &Quotas{file: f, byHash: map[string]ScopeLimits{}}
	for id, l := range f.Clients {
		q.byHash[ident.ClientHash(id)] = l
	}
	return q, nil
}

// precheck names the values a typed decode would refuse without their place (a window
// that is no duration, a storage that is no quantity), walking the document's known shape.
func precheck(doc any, p *problem.List) {
	top, _ := doc.(map[string]any)
	limits := func(at string, v any) {
		l, _ := v.(map[string]any)
		if q, ok := l["storage"]; ok {
			text := fmt.Sprint(q)
			if _, isMap := q.(map[string]any); isMap || len(text) > 64 {
				p.Add(at+".storage", "must be a quantity such as 500Gi")
			} else if _, err := resource.ParseQuantity(text); err != nil {
				p.Add(at+".storage", "must be a quantity such as 500Gi")
			}
		}
		for _, field := range []string{"cpuCoreHours", "memoryGiBHours"} {
			t, _ := l[field].(map[string]any)
			if w, ok := t["window"]; ok {
				if text, isText := w.(string); !isText {
					p.Add(at+"."+field+".window", "must be a duration string such as \"24h\"")
				} else if _, err := time.ParseDuration(text); err != nil {
					p.Add(at+"."+field+".window", "must be a duration string such as \"24h\"")
				}
			}
		}
	}
	scopes := func(at string, v any) {
		m, _ := v.(map[string]any)
		limits(at+".client", m["client"])
		limits(at+".owner", m["owner"])
	}
	scopes("defaults", top["defaults"])
	clients, _ := top["clients"].(map[string]any)
	for id, v := range clients {
		scopes("clients["+id+"]", v)
	}
}

func validateScope(p *problem.List, at string, s *ScopeLimits) {
	validateLimits(p, at+".client", &s.Client)
	validateLimits(p, at+".owner", &s.Owner)
}

func validateLimits(p *problem.List, at string, l *Limits) {
	count := func(field string, v *int64, limit int64) {
		if v != nil && (*v < 0 || *v > limit) {
			p.Add(at+"."+field, "must be between 0 and %d", limit)
		}
	}
	count("environments", l.Environments, MaxEnvironments)
	count("readyEnvironments", l.ReadyEnvironments, MaxEnvironments)
	count("detachedCommands", l.DetachedCommands, MaxCommands)
	if l.Storage != nil && l.Storage.Sign() < 0 {
		p.Add(at+".storage", "must not be negative")
	}
	for field, t := range map[string]*TimeLimit{"cpuCoreHours": l.CPUCoreHours, "memoryGiBHours": l.MemoryGiBHours} {
		if t == nil {
			continue
		}
		if t.Limit < 0 || t.Limit > 1e9 {
			p.Add(at+"."+field+".limit", "must be between 0 and 1e9")
		}
		if t.Window.Duration == 0 {
			t.Window.Duration = 24 * time.Hour
		}
		if w := t.Window.Duration; w < MinWindow || w > MaxWindow || w%time.Hour != 0 {
			p.Add(at+"."+field+".window", "must be whole hours between %s and %s", MinWindow, MaxWindow)
		}
		switch t.Action {
		case "":
			t.Action = ActionRefuse
		case ActionReport, ActionRefuse, ActionSuspend:
		default:
			p.Add(at+"."+field+".action", "must be report, refuse or suspend")
		}
	}
}

// Equal reports whether two parsed files say the same (a reload that changes nothing).
func (q *Quotas) Equal(o *Quotas) bool {
	a, _ := json.Marshal(q.fileOrZero())
	b, _ := json.Marshal(o.fileOrZero())
	return bytes.Equal(a, b)
}

func (q *Quotas) fileOrZero() File {
	if q == nil {
		return File{}
	}
	return q.file
}

// Source is the current quotas, loaded again by Watch when the file changes. A Source of
// no file limits nothing.
type Source struct {
	path string
	cur  atomic.Pointer[Quotas]
	last []byte
}

// NewSource loads path ("" for none); a bad file is an error at start.
func NewSource(path string) (*Source, error) {
	s := &Source{path: path}
	s.cur.Store(&Quotas{})
	if path == "" {
		return s, nil
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	q, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("quotas file %s: %w", path, err)
	}
	s.cur.Store(q)
	s.last = data
	return s, nil
}

// Current returns the quotas in force.
func (s *Source) Current() *Quotas {
	if s == nil {
		return nil
	}
	return s.cur.Load()
}

// Watch reads the file every interval until ctx ends and puts a changed, valid one in
// force; a changed, invalid one is reported to bad and the last good one stays.
func (s *Source) Watch(ctx context.Context, every time.Duration, loaded func(), bad func(error)) {
	if s.path == "" {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := readFile(s.path)
		if err == nil && bytes.Equal(data, s.last) {
			continue
		}
		var q *Quotas
		if err == nil {
			q, err = Parse(data)
		}
		if err != nil {
			bad(err)
			continue
		}
		s.last = data
		s.cur.Store(q)
		loaded()
	}
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("quotas file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("quotas file %s: %w", path, err)
	}
	return data, nil
}
