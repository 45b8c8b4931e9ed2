// Package profile loads, validates and digests the operator's execution profiles: the YAML
// file whose top-level "profiles" map names each ProfileSpec (image, storage, resources,
// scheduling, data-plane limits). docs/profiles.md describes the file, every rule and the
// canonical encoding.
//
// Invariants:
//   - Decoding is strict and bounded: the input is refused above MaxProfilesFileBytes before
//     any parsing; it must be exactly one YAML document with string mapping keys; duplicate
//     keys, unknown fields, keys differing only in case and values of the wrong type are
//     errors, never silently dropped or merged.
//   - Validation reports every problem at once, each naming its field path
//     (profiles.python.cpuLimit), joined and wrapping ErrInvalidProfile. Nothing partial is
//     ever returned: a file with one bad profile yields no registry.
//   - Every bound is a named constant (validate.go) with the reason for its value.
//   - A Registry is immutable once built. Its methods return copies, so no caller can change
//     what another caller sees; a reload builds a new Registry.
//   - A profile's digest is "sha256:" and 64 lowercase hex digits over its canonical
//     encoding, which depends only on the effective meaning of the spec: key order,
//     quantity spelling ("1Gi" or "1024Mi"), duration spelling ("1h" or "60m"), absent versus
//     empty optional fields, an omitted versus explicit default helperPath and capability
//     order do not change it; any change of meaning does. The profile name is not part of it.
//   - The executor ServiceAccount is registry-wide deployment configuration, not part of any
//     profile or digest.
package profile
