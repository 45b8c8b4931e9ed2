// Package grant issues and verifies execplane's grants: short-lived Ed25519-signed JWTs
// (golang-jwt/jwt/v5, alg EdDSA, a kid header, a typed claims struct) that bind a client, an
// owner, a binding and one environment incarnation (environment grants), plus an epoch, a
// run and a run claim (run grants). It also holds the signing keys' rotation rules as pure
// predicates. docs/grants.md explains the choices.
//
// Invariants:
//   - Verification performs no I/O. Keys live in an in-memory KeySet; jku, x5u, jwk and x5c
//     headers are never read, and no key embedded in a token is ever used.
//   - A token longer than MaxTokenBytes is refused before a byte of it is decoded; a token
//     that is not exactly three unpadded base64url segments is refused before parsing.
//   - Member names are unique at every depth and written without escapes, in the header and
//     the payload alike; the payload carries only the claims the signer writes, under their
//     exact names (unknown claims are refused, unknown header parameters ignored). The
//     payload is decoded once, strictly, and only after the signature over its exact bytes
//     verified (decode.go).
//   - Only EdDSA verifies. The kid is checked against a strict charset and length before the
//     in-memory lookup, and a key verifies only inside its window (Key.Verifies).
//   - exp, iat, iss, aud, jti and a purpose are required; exp - iat never exceeds the
//     verifier's ceiling (at most MaxLifetime); clock leeway is Leeway; a grant of one
//     purpose never verifies as the other.
//   - Every binding claim is compared with a caller-supplied expectation (client, owner
//     hash, binding, environment name and UID, grant generation; for run grants also run
//     id, epoch and claim id). An empty expectation field never matches: the signer refuses
//     empty claims and the verifier refuses payloads that lack them.
//   - Exactly one error is reported, by the documented precedence (Verifier.VerifyRun):
//     nothing about the claims of a token whose signature does not verify is reported.
//   - Errors, and the String form of an Issued grant, never contain a token, a key or a
//     claim value; a MismatchError names the claim only.
//   - Signers and verifiers are immutable after construction and safe for concurrent use;
//     constructors refuse unsafe configuration (bad key size, a public half that does not
//     match the seed, an ill-formed kid, a lifetime outside MinLifetime..MaxLifetime).
//   - Every token the signer can produce from valid inputs fits in MaxTokenBytes: the client
//     identity is carried as its SHA-256, and every other claim is bounded.
//   - Rotation (CheckRotation): a key is published verify-only at least MaxReloadDelay
//     before it signs, and a key that stops signing keeps verifying for RetirementDelay.
package grant
