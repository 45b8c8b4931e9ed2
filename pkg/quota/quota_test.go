package quota_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/quota"
)

// Watch runs a goroutine of the caller's: it must end with its context.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	ciClient    = "spiffe://example.org/client/ci"
	otherClient = "spiffe://example.org/client/other"
)

func ptr[T any](v T) *T { return &v }

func quantity(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func day(h int) quota.Duration { return quota.Duration{Duration: time.Duration(h) * time.Hour} }

// equalQuantities compares quantities by value ("2Ti" and "2048Gi" are the same limit).
var equalQuantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

const validFile = `
defaults:
  client:
    environments: 1000
    readyEnvironments: 200
    storage: 2Ti
  owner:
    environments: 20
    detachedCommands: 5000
    cpuCoreHours: {limit: 48, window: 48h, action: suspend}
    memoryGiBHours: {limit: 200}
clients:
  spiffe://example.org/client/ci:
    client: {environments: 5000}
    owner: {environments: 100, memoryGiBHours: {limit: 0, window: 840h, action: report}}
`

func TestParseValid(t *testing.T) {
	q, err := quota.Parse([]byte(validFile))
	if err != nil {
		t.Fatal(err)
	}
	defaults := quota.ScopeLimits{
		Client: quota.Limits{Environments: ptr[int64](1000), ReadyEnvironments: ptr[int64](200), Storage: quantity("2Ti")},
		Owner: quota.Limits{
			Environments: ptr[int64](20), DetachedCommands: ptr[int64](quota.MaxCommands),
			CPUCoreHours: &quota.TimeLimit{Limit: 48, Window: day(48), Action: quota.ActionSuspend},
			// Window and action left out: 24h and refuse.
			MemoryGiBHours: &quota.TimeLimit{Limit: 200, Window: day(24), Action: quota.ActionRefuse},
		},
	}
	// The entry replaces the defaults wholesale: what it leaves out does not limit.
	ci := quota.ScopeLimits{
		Client: quota.Limits{Environments: ptr[int64](5000)},
		Owner: quota.Limits{Environments: ptr[int64](100),
			MemoryGiBHours: &quota.TimeLimit{Limit: 0, Window: day(840), Action: quota.ActionReport}},
	}
	for _, c := range []struct {
		name   string
		client string
		want   quota.ScopeLimits
	}{
		{"listed client", ciClient, ci},
		{"unlisted client", otherClient, defaults},
		// The key is the identity exactly as spelled: another spelling is another client.
		{"listed client spelled otherwise", ciClient + "/", defaults},
	} {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, q.For(c.client), equalQuantities); diff != "" {
				t.Errorf("For (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.want, q.ForHash(ident.ClientHash(c.client)), equalQuantities); diff != "" {
				t.Errorf("ForHash (-want +got):\n%s", diff)
			}
		})
	}
	// ForHash is keyed by the identity's hash, never by the identity itself.
	if diff := cmp.Diff(defaults, q.ForHash(ciClient), equalQuantities); diff != "" {
		t.Errorf("ForHash of the plain identity (-want +got):\n%s", diff)
	}
	if q.Empty() {
		t.Error("a file with limits is Empty")
	}
}

func TestParseBounds(t *testing.T) {
	// The bounds themselves are accepted.
	for _, in := range []string{
		"defaults: {owner: {environments: 0, readyEnvironments: 5000, detachedCommands: 0, storage: 0}}",
		"defaults: {client: {environments: 5000, detachedCommands: 5000}}",
		"defaults: {owner: {cpuCoreHours: {limit: 0, window: 1h}, memoryGiBHours: {limit: 1e9, window: 840h}}}",
		"defaults: {owner: {cpuCoreHours: {limit: 0.5, window: 2h0m0s}}}",
		"", // no file content: limits nothing
		"{}",
	} {
		if _, err := quota.Parse([]byte(in)); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		// want are the texts the error must hold: the field path, and what is wrong.
		want []string
	}{
		{"unknown top-level field", "limits: {}", []string{`unknown field "limits"`}},
		{"unknown field in defaults", "defaults: {clients: {}}", []string{`unknown field "defaults.clients"`}},
		{"unknown field in limits", "defaults: {owner: {environment: 3}}", []string{`unknown field "defaults.owner.environment"`}},
		{"unknown field in a time limit", "defaults: {owner: {cpuCoreHours: {limit: 1, windw: 1h}}}", []string{`unknown field "defaults.owner.cpuCoreHours.windw"`}},
		{"unknown field in a client entry", "clients: {'spiffe://x.org/c': {owner: {foo: 1}}}", []string{"unknown field", "spiffe://x.org/c", "owner.foo"}},
		{"duplicate key", "defaults:\n  owner:\n    environments: 1\n    environments: 2\n", []string{`"environments" already set`}},
		{"duplicate client", "clients:\n  spiffe://x.org/c: {}\n  spiffe://x.org/c: {}\n", []string{`"spiffe://x.org/c" already set`}},
		{"negative environments", "defaults: {client: {environments: -1}}", []string{"defaults.client.environments: must be between 0 and 5000"}},
		{"negative readyEnvironments", "defaults: {owner: {readyEnvironments: -1}}", []string{"defaults.owner.readyEnvironments: must be between 0 and 5000"}},
		{"negative detachedCommands", "defaults: {owner: {detachedCommands: -1}}", []string{"defaults.owner.detachedCommands: must be between 0 and 5000"}},
		{"environments over MaxEnvironments", "defaults: {client: {environments: 5001}}", []string{"defaults.client.environments: must be between 0 and 5000"}},
		{"readyEnvironments over MaxEnvironments", "defaults: {client: {readyEnvironments: 5001}}", []string{"defaults.client.readyEnvironments"}},
		{"detachedCommands over MaxCommands", "defaults: {client: {detachedCommands: 5001}}", []string{"defaults.client.detachedCommands"}},
		{"a count that is no integer", "defaults: {client: {environments: 1.5}}", []string{"defaults.client.environments"}},
		{"window not whole hours", "defaults: {owner: {cpuCoreHours: {limit: 1, window: 90m}}}", []string{"defaults.owner.cpuCoreHours.window: must be whole hours"}},
		{"window under 1h", "defaults: {owner: {cpuCoreHours: {limit: 1, window: 30m}}}", []string{"defaults.owner.cpuCoreHours.window"}},
		{"window negative", "defaults: {owner: {cpuCoreHours: {limit: 1, window: -24h}}}", []string{"defaults.owner.cpuCoreHours.window"}},
		{"window over 35 days", "defaults: {owner: {memoryGiBHours: {limit: 1, window: 841h}}}", []string{"defaults.owner.memoryGiBHours.window"}},
		{"unknown action", "defaults: {owner: {cpuCoreHours: {limit: 1, action: pause}}}", []string{"defaults.owner.cpuCoreHours.action: must be report, refuse or suspend"}},
		{"negative time limit", "defaults: {owner: {cpuCoreHours: {limit: -1}}}", []string{"defaults.owner.cpuCoreHours.limit"}},
		{"time limit over 1e9", "defaults: {owner: {cpuCoreHours: {limit: 1.5e9}}}", []string{"defaults.owner.cpuCoreHours.limit"}},
		{"negative storage", "defaults: {client: {storage: -1Gi}}", []string{"defaults.client.storage: must not be negative"}},
		{"client key no URI", "clients: {ci: {}}", []string{`clients: "ci" is not a client identity`}},
		{"client key with spaces", "clients: {' spiffe://x.org/c': {}}", []string{`clients: " spiffe://x.org/c" is not a client identity`}},
		// An explicit key: YAML's implicit keys stop at 1024 characters.
		{"client key over 2048 bytes", "clients:\n  ? 'spiffe://x.org/" + strings.Repeat("c", 2048) + "'\n  : {}\n", []string{"clients:", "is not a client identity"}},
		{"problem in a client entry", "clients: {'spiffe://x.org/c': {owner: {environments: -1}}}", []string{"clients[spiffe://x.org/c].owner.environments: must be between"}},
		{"second YAML document", "defaults: {}\n---\nclients: {}\n", []string{"more than one YAML document"}},
		{"non-string key", "clients: {1: {}}", []string{"not a string"}},
		{"every problem at once", "defaults: {client: {environments: -1}, owner: {cpuCoreHours: {limit: 1, window: 90m}}}\nclients: {ci: {}}",
			[]string{"defaults.client.environments", "defaults.owner.cpuCoreHours.window", `"ci" is not a client identity`}},
		{"over MaxFileBytes", "# " + strings.Repeat("x", quota.MaxFileBytes), []string{"over 1048576 bytes"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, err := quota.Parse([]byte(c.in))
			if !errors.Is(err, quota.ErrInvalid) {
				t.Fatalf("err = %v (quotas %v), want one wrapping ErrInvalid", err, q)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q missing from %v", w, err)
				}
			}
		})
	}
}

// A value its type cannot decode (a duration, a quantity) is refused; the refusal should say
// where, as every other does: a file has many windows and storages.
func TestParseNamesMalformedValues(t *testing.T) {
	for _, c := range []struct {
		name, in, path string
	}{
		{"window no duration", "defaults: {owner: {memoryGiBHours: {limit: 1, window: a day}}}", "defaults.owner.memoryGiBHours.window"},
		{"window no string", "defaults: {owner: {memoryGiBHours: {limit: 1, window: 24}}}", "defaults.owner.memoryGiBHours.window"},
		{"storage no quantity", "defaults: {client: {storage: lots}}", "defaults.client.storage"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := quota.Parse([]byte(c.in))
			if !errors.Is(err, quota.ErrInvalid) {
				t.Fatalf("err = %v, want one wrapping ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.path) {
				t.Errorf("%q missing from %v", c.path, err)
			}
		})
	}
}

func TestEmpty(t *testing.T) {
	for _, c := range []struct {
		in    string
		empty bool
	}{
		{"", true},
		{"{}", true},
		{"defaults: {client: {}, owner: {}}\nclients: {'spiffe://x.org/c': {}}", true},
		{"defaults: {owner: {environments: 0}}", false}, // a limit of 0 limits (everything)
		{"defaults: {client: {cpuCoreHours: {limit: 5, action: report}}}", false},
		{"clients: {'spiffe://x.org/c': {owner: {storage: 1Gi}}}", false},
	} {
		q, err := quota.Parse([]byte(c.in))
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if q.Empty() != c.empty {
			t.Errorf("%q: Empty() = %v, want %v", c.in, q.Empty(), c.empty)
		}
	}
	var none *quota.Quotas
	if !none.Empty() {
		t.Error("nil quotas are not Empty")
	}
	if diff := cmp.Diff(quota.ScopeLimits{}, none.For(ciClient), equalQuantities); diff != "" {
		t.Errorf("nil quotas For (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(quota.ScopeLimits{}, none.ForHash(ident.ClientHash(ciClient)), equalQuantities); diff != "" {
		t.Errorf("nil quotas ForHash (-want +got):\n%s", diff)
	}
}

func TestLimitsIsZeroCounted(t *testing.T) {
	tl := &quota.TimeLimit{Limit: 1, Window: day(24), Action: quota.ActionRefuse}
	for _, c := range []struct {
		name          string
		l             quota.Limits
		zero, counted bool
	}{
		{"nothing", quota.Limits{}, true, false},
		{"environments", quota.Limits{Environments: ptr[int64](0)}, false, true},
		{"readyEnvironments", quota.Limits{ReadyEnvironments: ptr[int64](3)}, false, true},
		{"detachedCommands", quota.Limits{DetachedCommands: ptr[int64](3)}, false, true},
		{"storage", quota.Limits{Storage: quantity("1Gi")}, false, true},
		// Time quotas are checked against the ledgers, not counted in an allocation.
		{"cpuCoreHours alone", quota.Limits{CPUCoreHours: tl}, false, false},
		{"memoryGiBHours alone", quota.Limits{MemoryGiBHours: tl}, false, false},
		{"time and count", quota.Limits{CPUCoreHours: tl, Environments: ptr[int64](1)}, false, true},
	} {
		if got := c.l.IsZero(); got != c.zero {
			t.Errorf("%s: IsZero() = %v, want %v", c.name, got, c.zero)
		}
		if got := c.l.Counted(); got != c.counted {
			t.Errorf("%s: Counted() = %v, want %v", c.name, got, c.counted)
		}
	}
}

func TestEqual(t *testing.T) {
	parse := func(in string) *quota.Quotas {
		t.Helper()
		q, err := quota.Parse([]byte(in))
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		return q
	}
	base := "defaults: {client: {storage: 2Ti, environments: 3}, owner: {cpuCoreHours: {limit: 1}}}\nclients: {'spiffe://x.org/c': {}}"
	for _, c := range []struct {
		name  string
		a, b  *quota.Quotas
		equal bool
	}{
		{"the same file", parse(base), parse(base), true},
		{"spelled otherwise", parse(base),
			parse("clients: {'spiffe://x.org/c': {client: {}}}\ndefaults: {owner: {cpuCoreHours: {action: refuse, window: 24h, limit: 1.0}}, client: {environments: 3, storage: 2048Gi}}"), true},
		{"a limit changed", parse(base), parse(strings.Replace(base, "environments: 3", "environments: 4", 1)), false},
		{"a default action written", parse(base), parse(strings.Replace(base, "limit: 1}", "limit: 1, action: suspend}", 1)), false},
		// A client listed with nothing no longer gets the defaults: that is a change.
		{"a client added", parse(base), parse(strings.Replace(base, "'spiffe://x.org/c': {}", "'spiffe://x.org/c': {}, 'spiffe://x.org/d': {}", 1)), false},
		{"a client renamed", parse(base), parse(strings.Replace(base, "x.org/c", "x.org/d", 1)), false},
		{"nil and an empty file", nil, parse(""), true},
		{"nil and limits", nil, parse(base), false},
		{"an empty file and empty sections", parse(""), parse("defaults: {}\nclients: {}"), true},
	} {
		if got := c.a.Equal(c.b); got != c.equal {
			t.Errorf("%s: a.Equal(b) = %v, want %v", c.name, got, c.equal)
		}
		if got := c.b.Equal(c.a); got != c.equal {
			t.Errorf("%s: b.Equal(a) = %v, want %v", c.name, got, c.equal)
		}
	}
}

// writeFile replaces path's content in one step (a rename), as a ConfigMap update does, so
// that a Watch never reads half a file.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestNewSource(t *testing.T) {
	s, err := quota.NewSource("")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Current().Empty() {
		t.Error("the Source of no file limits something")
	}
	if diff := cmp.Diff(quota.ScopeLimits{}, s.Current().For(ciClient), equalQuantities); diff != "" {
		t.Errorf("For (-want +got):\n%s", diff)
	}
	// Watch of no file returns at once.
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Watch(t.Context(), time.Millisecond, func() { t.Error("loaded") }, func(err error) { t.Errorf("bad: %v", err) })
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch of no file did not return")
	}

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "defaults: {client: {environments: -1}}")
	if _, err := quota.NewSource(bad); !errors.Is(err, quota.ErrInvalid) || !strings.Contains(err.Error(), bad) {
		t.Errorf("a bad file: err = %v, want ErrInvalid naming the file", err)
	}
	if _, err := quota.NewSource(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: err = %v", err)
	}
	if _, err := quota.Load(bad); !errors.Is(err, quota.ErrInvalid) {
		t.Errorf("Load of a bad file: err = %v", err)
	}

	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, validFile)
	s, err = quota.NewSource(good)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := quota.Parse([]byte(validFile))
	if !s.Current().Equal(want) {
		t.Error("the Source's quotas are not the file's")
	}
}

// poll waits until cond holds, failing the test at the deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quotas.yaml")
	writeFile(t, path, "defaults: {owner: {environments: 1}}")
	s, err := quota.NewSource(path)
	if err != nil {
		t.Fatal(err)
	}
	envs := func() int64 {
		if l := s.Current().For(ciClient).Owner.Environments; l != nil {
			return *l
		}
		return -1
	}
	var loaded, bad atomic.Int32
	var lastBad atomic.Pointer[error]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Watch(ctx, 10*time.Millisecond, func() { loaded.Add(1) }, func(err error) { lastBad.Store(&err); bad.Add(1) })
	}()

	// A changed, valid file is put in force.
	writeFile(t, path, "defaults: {owner: {environments: 2}}")
	poll(t, "the changed file to be loaded", func() bool { return loaded.Load() == 1 && envs() == 2 })

	// A bad edit is reported and the last good file stays.
	writeFile(t, path, "defaults: {owner: {environments: -2}}")
	poll(t, "the bad file to be reported", func() bool { return bad.Load() > 0 })
	if err := *lastBad.Load(); !errors.Is(err, quota.ErrInvalid) || !strings.Contains(err.Error(), "defaults.owner.environments") {
		t.Errorf("bad reported %v", err)
	}
	if got := envs(); got != 2 || loaded.Load() != 1 {
		t.Errorf("after a bad edit: environments %d (want the last good 2), loaded %d times (want 1)", got, loaded.Load())
	}

	// A removed file is reported too, and the last good one stays.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	n := bad.Load()
	poll(t, "the missing file to be reported", func() bool {
		err := lastBad.Load()
		return bad.Load() > n && errors.Is(*err, os.ErrNotExist)
	})
	if envs() != 2 {
		t.Errorf("after a removal: environments %d, want the last good 2", envs())
	}

	// A fixed file is loaded again; the same content again is no reload.
	writeFile(t, path, "defaults: {owner: {environments: 3}}")
	poll(t, "the fixed file to be loaded", func() bool { return loaded.Load() == 2 && envs() == 3 })
	writeFile(t, path, "defaults: {owner: {environments: 3}}")
	writeFile(t, path, "defaults: {owner: {environments: 4}}")
	poll(t, "the next change to be loaded", func() bool { return envs() == 4 })
	if got := loaded.Load(); got != 3 {
		t.Errorf("loaded %d times, want 3 (an unchanged file is no reload)", got)
	}

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return when its context ended")
	}
}
