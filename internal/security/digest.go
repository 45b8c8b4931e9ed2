package security

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"strings"
)

// digestDomain separates the bundle digest from every other SHA-256 in the system and names
// its construction's version.
const digestDomain = "execplane security bundle v1\x00"

// digestPrefix starts every digest string (file pins and the bundle digest).
const digestPrefix = "sha256:"

// FileDigest returns the pin of a file's content as the manifest's fileDigests writes it:
// "sha256:" and 64 lowercase hex digits.
func FileDigest(content []byte) string {
	sum := sha256.Sum256(content)
	return digestPrefix + hex.EncodeToString(sum[:])
}

func validFileDigest(d string) bool {
	h, ok := strings.CutPrefix(d, digestPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// bundleDigest is the full-bundle digest recorded in the high-water mark (docs/security.md,
// "Digest"):
//
//	SHA-256( "execplane security bundle v1" 0x00
//	         ‖ entry("", manifest bytes)
//	         ‖ entry(name, content) for every referenced file, by name in byte order )
//	entry(name, content) = uint64be(len(name)) ‖ name ‖ uint64be(len(content)) ‖ content
//
// written "sha256:" and 64 lowercase hex digits. Every length is framed, so no two
// different bundles share an encoding; the manifest is the one entry with an empty name
// (file names are never empty), and the names are the manifest's own, so the digest does not
// depend on where the bundle is mounted.
func bundleDigest(manifest []byte, files map[string][]byte) string {
	h := sha256.New()
	h.Write([]byte(digestDomain))
	writeEntry(h, "", manifest)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		writeEntry(h, name, files[name])
	}
	return digestPrefix + hex.EncodeToString(h.Sum(nil))
}

func writeEntry(h hash.Hash, name string, content []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(name)))
	h.Write(n[:])
	h.Write([]byte(name))
	binary.BigEndian.PutUint64(n[:], uint64(len(content)))
	h.Write(n[:])
	h.Write(content)
}
