package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/execplane/execplane/pkg/ident"
)

// NamePrefix starts every environment's name.
const NamePrefix = "xenv-"

// nameHashBytes is how much of the SHA-256 names carry: 80 bits, so that the name stays a
// short DNS label and collisions need ~2^40 environments.
const nameHashBytes = 10

// OwnerHash is the lowercase hex SHA-256 of an owner; owners are never stored in clear. The
// encoding is length-prefixed, so no two owners share it.
func OwnerHash(o Owner) string { return hashFields("owner", o.Issuer, o.Subject) }

// EnvironmentName is the deterministic name of a binding's environment: one per (client,
// owner, binding), so that concurrent Ensure calls converge on one object.
func EnvironmentName(client string, ownerHash, bindingID string) string {
	sum := sha256.Sum256([]byte(hashFields("name", ident.ClientHash(client), ownerHash, bindingID)))
	return NamePrefix + hex.EncodeToString(sum[:nameHashBytes])
}

// hashFields is the hex SHA-256 of a domain tag and fields, each length-prefixed.
func hashFields(domain string, fields ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range append([]string{domain}, fields...) {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}
