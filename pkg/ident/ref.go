package ident

import (
	"crypto/sha256"
	"encoding/hex"
)

// EnvironmentRef names one incarnation of an environment: its name and resource UID. A
// re-created environment of the same name has another UID, so a reference (or a grant) of
// the old one never reaches the new one.
type EnvironmentRef struct {
	// Name is the ExecutionEnvironment's name, a DNS-1123 label.
	Name string
	// UID is the resource UID, a canonical lowercase UUID.
	UID string
}

// Valid reports whether r is well-formed: a DNS-1123 label and a canonical UUID.
func (r EnvironmentRef) Valid() bool { return IsDNSLabel(r.Name) && IsUUID(r.UID) }

// ClientHash is the lowercase hex SHA-256 of a client identity (the canonical URI SAN of
// its certificate): the form in which environments and grants carry it, a fixed 64 bytes
// whatever the URI's length, never the identity in clear.
func ClientHash(client string) string {
	sum := sha256.Sum256([]byte(client))
	return hex.EncodeToString(sum[:])
}
