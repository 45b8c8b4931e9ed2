// Package devbundle generates a complete development security bundle: a CA, a server
// certificate, client certificates for a caller (may attest owners), an administrator and
// the gateway-to-controller identity, an Ed25519 grant signing key, and the security
// manifest naming and pinning them all, loadable by security.LoadBundle. Tests and
// `make demo` use it. It is for development only: the CA key is written beside the rest so
// that more client certificates can be issued, and nothing is protected beyond file modes.
//
// Invariants:
//   - Only the standard library: crypto/x509 (ECDSA P-256 certificates), crypto/ed25519
//     (the grant key), encoding/pem, encoding/json (to quote YAML scalars).
//   - Private keys are written with mode 0600 into a directory created with mode 0700; the
//     target directory must be new or empty, so nothing is ever overwritten.
//   - The manifest is written last, so an interrupted run leaves no loadable bundle.
//   - Every certificate's validity starts a few minutes in the past (clock skew between
//     the generating and the loading machine) and lasts Options.Validity (the server's
//     Options.ServerValidity when set).
//   - With Options.RenewableServer the manifest makes the server certificate renewable in
//     place, and Result.IssueServer issues what cert-manager would write on a renewal (same
//     CA and names, a new key, the validity asked for): tests renew, or roll back, with it.
package devbundle
