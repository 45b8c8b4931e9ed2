package store_test

import (
	"regexp"
	"testing"

	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/store"
)

// Snapshot names and owner keys: deterministic, DNS labels of a fixed shape, different for
// every field that differs, and never an environment's name for the same fields.
func TestSnapshotNamesAndOwnerKeys(t *testing.T) {
	alice, bob := store.OwnerHash(store.Owner{Issuer: "https://idp", Subject: "alice"}), store.OwnerHash(store.Owner{Issuer: "https://idp", Subject: "bob"})
	name := store.SnapshotName("spiffe://a", alice, "before")
	if !regexp.MustCompile(`^xsnap-[0-9a-f]{20}$`).MatchString(name) || !ident.IsDNSLabel(name) {
		t.Fatalf("snapshot name %q", name)
	}
	if store.SnapshotName("spiffe://a", alice, "before") != name {
		t.Fatal("not deterministic")
	}
	for what, other := range map[string]string{
		"another client": store.SnapshotName("spiffe://b", alice, "before"),
		"another owner":  store.SnapshotName("spiffe://a", bob, "before"),
		"another name":   store.SnapshotName("spiffe://a", alice, "after"),
	} {
		if other == name {
			t.Errorf("%s: the same name", what)
		}
	}
	if store.EnvironmentName("spiffe://a", alice, "before")[len("xenv-"):] == name[len("xsnap-"):] {
		t.Fatal("a snapshot's hash is an environment's")
	}
	key := store.OwnerKey("spiffe://a", alice)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(key) || key == store.OwnerKey("spiffe://a", bob) || key == store.OwnerKey("spiffe://b", alice) {
		t.Fatalf("owner keys %q", key)
	}
}
