package profile

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func twoProfiles(t *testing.T) *Registry {
	t.Helper()
	r, err := build(map[string]ProfileSpec{"zeta": validSpec(), "alpha": validSpec()}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegistryNamesSorted(t *testing.T) {
	if got := twoProfiles(t).Names(); !reflect.DeepEqual(got, []string{"alpha", "zeta"}) {
		t.Errorf("Names() = %v", got)
	}
}

func TestRegistryGet(t *testing.T) {
	r := twoProfiles(t)
	e, ok := r.Get("alpha")
	if !ok || e.Name != "alpha" || !digestPattern.MatchString(e.Digest) {
		t.Fatalf("Get(alpha) = %+v, %v", e, ok)
	}
	if got := strings.Join(e.Spec.Capabilities, ","); got != "gpu,network-egress" {
		t.Errorf("capabilities = %s, want sorted", got)
	}
	if _, ok := r.Get("absent"); ok {
		t.Error("Get(absent) found something")
	}
	if _, ok := r.Profile("absent"); ok {
		t.Error("Profile(absent) found something")
	}
}

func TestRegistryProfile(t *testing.T) {
	r := twoProfiles(t)
	e, _ := r.Get("alpha")
	p, ok := r.Profile("alpha")
	if !ok {
		t.Fatal("Profile(alpha) missing")
	}
	want := Profile{
		Name:               "alpha",
		Digest:             e.Digest,
		MaxFileBytes:       16 << 20,
		MaxCommandBytes:    1 << 20,
		MaxCommandDuration: 10 * time.Minute,
		Capabilities:       []string{"gpu", "network-egress"},
		Commands:           DefaultCommands,
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("Profile(alpha) = %+v, want %+v", p, want)
	}
}

// TestRegistryReturnsCopies: nothing a caller does to a returned value reaches the registry.
func TestRegistryReturnsCopies(t *testing.T) {
	r := twoProfiles(t)
	before, _ := r.Get("alpha")
	beforeProfile, _ := r.Profile("alpha")

	names := r.Names()
	names[0] = "mutated"
	e, _ := r.Get("alpha")
	e.Spec.Image = "mutated"
	e.Spec.StorageSize.Add(*q("1Gi"))
	e.Spec.CPULimit.Add(*q("1"))
	e.Spec.ImagePullSecrets[0] = "mutated"
	e.Spec.NodeSelector["pool"] = "mutated"
	e.Spec.Tolerations[0].Key = "mutated"
	*e.Spec.Tolerations[1].TolerationSeconds = 1
	e.Spec.Capabilities[0] = "mutated"
	p, _ := r.Profile("alpha")
	p.Capabilities[0] = "mutated"

	after, _ := r.Get("alpha")
	if !reflect.DeepEqual(before, after) {
		t.Errorf("registry changed through a returned Entry:\nbefore %+v\nafter  %+v", before, after)
	}
	if got, _ := r.Profile("alpha"); !reflect.DeepEqual(got, beforeProfile) {
		t.Errorf("registry changed through a returned Profile: %+v", got)
	}
	if got := r.Names(); got[0] != "alpha" {
		t.Errorf("registry changed through Names(): %v", got)
	}
	if d := mustDigest(t, after.Spec); d != before.Digest {
		t.Errorf("re-digesting the returned spec gives %s, registry says %s", d, before.Digest)
	}
}

// TestRegistryDoesNotAliasInput: the specs a registry is built from stay the caller's.
func TestRegistryDoesNotAliasInput(t *testing.T) {
	s := validSpec()
	r, err := build(map[string]ProfileSpec{"p": s}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := r.Get("p")
	s.NodeSelector["pool"] = "mutated"
	s.Tolerations[0].Key = "mutated"
	s.Capabilities[0] = "mutated"
	s.MemoryLimit.Add(*q("1Gi"))
	if after, _ := r.Get("p"); !reflect.DeepEqual(before, after) {
		t.Error("registry changed through the caller's spec")
	}
	if s.Capabilities[1] != "gpu" {
		t.Error("building the registry sorted the caller's capabilities in place")
	}
}

// TestRegistryConcurrentReads runs under -race: readers share nothing writable.
func TestRegistryConcurrentReads(t *testing.T) {
	r := twoProfiles(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				for _, n := range r.Names() {
					e, _ := r.Get(n)
					_ = e.Spec.MemoryLimit.String() // String caches into the Quantity: must be a copy
					e.Spec.Tolerations[0].Effect = corev1.TaintEffectNoExecute
					_, _ = r.Profile(n)
				}
			}
		})
	}
	wg.Wait()
}

func TestWithExecutorServiceAccount(t *testing.T) {
	r := twoProfiles(t)
	if r.ExecutorServiceAccount() != "" {
		t.Errorf("fresh registry has ServiceAccount %q", r.ExecutorServiceAccount())
	}
	r2, err := r.WithExecutorServiceAccount("execplane-executor")
	if err != nil {
		t.Fatal(err)
	}
	if r2.ExecutorServiceAccount() != "execplane-executor" {
		t.Errorf("ServiceAccount = %q", r2.ExecutorServiceAccount())
	}
	if r.ExecutorServiceAccount() != "" {
		t.Error("WithExecutorServiceAccount changed the receiver")
	}
	e1, _ := r.Get("alpha")
	e2, _ := r2.Get("alpha")
	if !reflect.DeepEqual(e1, e2) || !reflect.DeepEqual(r.Names(), r2.Names()) {
		t.Error("the new registry's profiles differ")
	}
	for _, bad := range []string{"", "Executor", "exec_utor", "a/b", strings.Repeat("a", 254)} {
		if _, err := r.WithExecutorServiceAccount(bad); !errors.Is(err, ErrInvalidServiceAccount) {
			t.Errorf("%q: err = %v, want ErrInvalidServiceAccount", bad, err)
		}
	}
}
