package security

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// ClientPolicy is what one client may do (docs/api.md, "Identity and authorisation"). The
// zero value is a client that may call the API for nothing beyond its own environments
// without attesting owners: every capability is opt-in.
type ClientPolicy struct {
	// MayAttestOwner lets the client act for owners it attests (Owner{issuer, subject}).
	MayAttestOwner bool
	// Administrator allows the administrative RPCs.
	Administrator bool
	// AdministratorFor, when non-empty, restricts Administrator to environments created by
	// the clients listed; empty means every client. It requires Administrator. The
	// identities need not be in the policy: an administrator may still manage the
	// environments of a client that has since been removed.
	AdministratorFor []ClientIdentity
}

// CanAttestOwner reports whether the client may act for owners it attests.
func (p ClientPolicy) CanAttestOwner() bool { return p.MayAttestOwner }

// IsAdministrator reports whether the client may call administrative RPCs at all. Whether it
// may act on a given environment is AdministersClient's answer.
func (p ClientPolicy) IsAdministrator() bool { return p.Administrator }

// AdministersClient reports whether the client may administer environments created by
// creator: it is an administrator, and either unscoped (AdministratorFor empty) or creator
// is in its scope. An empty creator is administered by nobody: an environment whose creator
// is unknown fails closed.
func (p ClientPolicy) AdministersClient(creator ClientIdentity) bool {
	if !p.Administrator || creator == "" {
		return false
	}
	return len(p.AdministratorFor) == 0 || slices.Contains(p.AdministratorFor, creator)
}

// Validate reports every problem with p at once, each wrapping ErrInvalidPolicy:
// AdministratorFor without Administrator, a scope entry that is not a canonical identity,
// duplicates, more than MaxAdministratorFor entries.
func (p ClientPolicy) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidPolicy}, args...)...))
	}
	if len(p.AdministratorFor) > 0 && !p.Administrator {
		bad("administratorFor requires administrator")
	}
	if len(p.AdministratorFor) > MaxAdministratorFor {
		bad("administratorFor has %d entries, at most %d", len(p.AdministratorFor), MaxAdministratorFor)
	}
	seen := make(map[ClientIdentity]bool, len(p.AdministratorFor))
	for i, id := range p.AdministratorFor {
		if _, err := ParseClientIdentity(string(id)); err != nil {
			bad("administratorFor[%d]: %w", i, err)
		} else if seen[id] {
			bad("administratorFor[%d]: duplicate identity", i)
		}
		seen[id] = true
	}
	return errors.Join(errs...)
}

// clone returns p with its own copy of AdministratorFor.
func (p ClientPolicy) clone() ClientPolicy {
	p.AdministratorFor = slices.Clone(p.AdministratorFor)
	return p
}

// Policies is the client policy: the allowlist of identities and what each may do. It is
// immutable once built and safe for concurrent use; a reload builds a new one. A nil
// *Policies holds no client.
type Policies struct {
	byID map[ClientIdentity]ClientPolicy
}

// NewPolicies validates every identity (canonical form) and policy, and builds the
// allowlist. It reports every problem at once, wrapping ErrInvalidPolicy; at most
// MaxClients identities.
func NewPolicies(policies map[ClientIdentity]ClientPolicy) (*Policies, error) {
	var errs []error
	if len(policies) > MaxClients {
		return nil, fmt.Errorf("%w: %d clients, at most %d", ErrInvalidPolicy, len(policies), MaxClients)
	}
	byID := make(map[ClientIdentity]ClientPolicy, len(policies))
	for _, id := range slices.Sorted(maps.Keys(policies)) {
		if _, err := ParseClientIdentity(string(id)); err != nil {
			errs = append(errs, fmt.Errorf("%w: client identity: %w", ErrInvalidPolicy, err))
			continue
		}
		p := policies[id]
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		byID[id] = p.clone()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Policies{byID: byID}, nil
}

// Lookup returns the policy of id, and whether id is in the allowlist. The policy is a copy.
func (ps *Policies) Lookup(id ClientIdentity) (ClientPolicy, bool) {
	if ps == nil {
		return ClientPolicy{}, false
	}
	p, ok := ps.byID[id]
	return p.clone(), ok
}

// Authorize returns the policy of id, or ErrNotInPolicy.
func (ps *Policies) Authorize(id ClientIdentity) (ClientPolicy, error) {
	p, ok := ps.Lookup(id)
	if !ok {
		return ClientPolicy{}, ErrNotInPolicy
	}
	return p, nil
}

// Contains reports whether id is in the allowlist.
func (ps *Policies) Contains(id ClientIdentity) bool {
	if ps == nil {
		return false
	}
	_, ok := ps.byID[id]
	return ok
}

// Len returns the number of clients in the allowlist.
func (ps *Policies) Len() int {
	if ps == nil {
		return 0
	}
	return len(ps.byID)
}

// Identities returns the allowlisted identities, sorted.
func (ps *Policies) Identities() []ClientIdentity {
	if ps == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(ps.byID))
}
