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

// SnapshotPrefix starts every snapshot's name.
const SnapshotPrefix = "xsnap-"

// SnapshotName is the deterministic name of an owner's snapshot: one per (client, owner,
// the caller's name), so that a repeated CreateSnapshot finds it without a list and the
// name says nothing of its owner. Its domain tag keeps it apart from environment names.
func SnapshotName(client string, ownerHash, name string) string {
	sum := sha256.Sum256([]byte(hashFields("snapshot", ident.ClientHash(client), ownerHash, name)))
	return SnapshotPrefix + hex.EncodeToString(sum[:nameHashBytes])
}

// ownerKeyBytes is how much of the SHA-256 an owner key carries: 64 bits, short enough for
// a storage object's name beside the snapshot's id.
const ownerKeyBytes = 8

// OwnerKey is the short key of (client, owner) that a snapshot's storage name and the
// claims restored from it carry, for the admission policy to compare (docs/snapshots.md
// "Names, owners and admission"). Not a secret: it only needs to differ between owners.
func OwnerKey(client string, ownerHash string) string {
	sum := sha256.Sum256([]byte(hashFields("owner-key", ident.ClientHash(client), ownerHash)))
	return hex.EncodeToString(sum[:ownerKeyBytes])
}
