package security

import (
	"errors"
	"fmt"
	"testing"
)

const (
	idCaller  ClientIdentity = "spiffe://example.org/caller"
	idAdmin   ClientIdentity = "spiffe://example.org/admin"
	idCreator ClientIdentity = "spiffe://example.org/creator"
	idOther   ClientIdentity = "spiffe://example.org/other"
)

func TestClientPolicyAdministersClient(t *testing.T) {
	tests := []struct {
		name    string
		policy  ClientPolicy
		creator ClientIdentity
		want    bool
	}{
		{"not an administrator", ClientPolicy{}, idCreator, false},
		{"attester is no administrator", ClientPolicy{MayAttestOwner: true}, idCreator, false},
		{"unscoped administrator", ClientPolicy{Administrator: true}, idCreator, true},
		{"unscoped administrator, unknown creator", ClientPolicy{Administrator: true}, "", false},
		{"scoped, in scope", ClientPolicy{Administrator: true, AdministratorFor: []ClientIdentity{idOther, idCreator}}, idCreator, true},
		{"scoped, out of scope", ClientPolicy{Administrator: true, AdministratorFor: []ClientIdentity{idOther}}, idCreator, false},
		{"scoped, unknown creator", ClientPolicy{Administrator: true, AdministratorFor: []ClientIdentity{idOther}}, "", false},
		{"scope without administrator", ClientPolicy{AdministratorFor: []ClientIdentity{idCreator}}, idCreator, false},
		{"scope matching is byte equality", ClientPolicy{Administrator: true, AdministratorFor: []ClientIdentity{idCreator}}, idCreator + "x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.AdministersClient(tt.creator); got != tt.want {
				t.Fatalf("AdministersClient(%q) = %v; want %v", tt.creator, got, tt.want)
			}
		})
	}
}

func TestClientPolicyCapabilities(t *testing.T) {
	tests := []struct {
		policy          ClientPolicy
		attest, isAdmin bool
	}{
		{ClientPolicy{}, false, false},
		{ClientPolicy{MayAttestOwner: true}, true, false},
		{ClientPolicy{Administrator: true}, false, true},
		{ClientPolicy{MayAttestOwner: true, Administrator: true}, true, true},
	}
	for _, tt := range tests {
		if tt.policy.CanAttestOwner() != tt.attest || tt.policy.IsAdministrator() != tt.isAdmin {
			t.Errorf("%+v: CanAttestOwner=%v IsAdministrator=%v", tt.policy, tt.policy.CanAttestOwner(), tt.policy.IsAdministrator())
		}
	}
}

func TestClientPolicyValidate(t *testing.T) {
	many := make([]ClientIdentity, MaxAdministratorFor+1)
	for i := range many {
		many[i] = ClientIdentity(fmt.Sprintf("spiffe://example.org/c%d", i))
	}
	tests := []struct {
		name     string
		policy   ClientPolicy
		problems int
	}{
		{"zero", ClientPolicy{}, 0},
		{"unscoped administrator", ClientPolicy{Administrator: true}, 0},
		{"scoped administrator", ClientPolicy{Administrator: true, AdministratorFor: []ClientIdentity{idCreator}}, 0},
		{"scope without administrator", ClientPolicy{AdministratorFor: []ClientIdentity{idCreator}}, 1},
		{"non-canonical scope entry", ClientPolicy{Administrator: true, AdministratorFor: []ClientIdentity{"SPIFFE://example.org/a"}}, 1},
		{"duplicate scope entry", ClientPolicy{Administrator: true, AdministratorFor: []ClientIdentity{idCreator, idCreator}}, 1},
		{"every problem at once", ClientPolicy{AdministratorFor: []ClientIdentity{idCreator, idCreator, "x"}}, 3},
		{"scope over its bound", ClientPolicy{Administrator: true, AdministratorFor: many}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			if got := countJoined(err); got != tt.problems {
				t.Fatalf("Validate() = %v (%d problems); want %d", err, got, tt.problems)
			}
			if err != nil && !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("Validate() = %v; want ErrInvalidPolicy", err)
			}
		})
	}
}

func countJoined(err error) int {
	if err == nil {
		return 0
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	return 1
}

func TestNewPolicies(t *testing.T) {
	ps, err := NewPolicies(map[ClientIdentity]ClientPolicy{
		idCaller: {MayAttestOwner: true},
		idAdmin:  {Administrator: true, AdministratorFor: []ClientIdentity{idCreator}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ps.Len() != 2 || !ps.Contains(idCaller) || ps.Contains(idOther) {
		t.Fatalf("allowlist = %v", ps.Identities())
	}
	if p, err := ps.Authorize(idAdmin); err != nil || !p.AdministersClient(idCreator) || p.AdministersClient(idOther) {
		t.Fatalf("Authorize(admin) = %+v, %v", p, err)
	}
	if _, err := ps.Authorize(idOther); !errors.Is(err, ErrNotInPolicy) || !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Authorize(other) = %v; want ErrNotInPolicy", err)
	}
	if got := ps.Identities(); len(got) != 2 || got[0] != idAdmin || got[1] != idCaller {
		t.Fatalf("Identities() = %v; want sorted", got)
	}

	_, err = NewPolicies(map[ClientIdentity]ClientPolicy{
		"https://Example.org":   {},
		idCaller:                {AdministratorFor: []ClientIdentity{idCreator}},
		idAdmin:                 {Administrator: true},
		"spiffe://example.org/": {},
	})
	if countJoined(err) != 3 || !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("NewPolicies(bad) = %v; want three problems", err)
	}
}

func TestPoliciesLookupIsACopy(t *testing.T) {
	ps, err := NewPolicies(map[ClientIdentity]ClientPolicy{idAdmin: {Administrator: true, AdministratorFor: []ClientIdentity{idCreator}}})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := ps.Lookup(idAdmin)
	p.AdministratorFor[0] = idOther
	p.Administrator = false
	if again, _ := ps.Lookup(idAdmin); !again.AdministersClient(idCreator) {
		t.Fatal("a caller's change to a looked-up policy reached the allowlist")
	}
}

func TestNilPolicies(t *testing.T) {
	var ps *Policies
	if ps.Contains(idCaller) || ps.Len() != 0 || ps.Identities() != nil {
		t.Fatal("a nil allowlist holds something")
	}
	if _, ok := ps.Lookup(idCaller); ok {
		t.Fatal("a nil allowlist found a client")
	}
}
