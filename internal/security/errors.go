package security

import (
	"errors"
	"fmt"

	"github.com/execplane/execplane/pkg/apierror"
)

// Errors about client identities (IdentityFromCertificate, ParseClientIdentity). Messages
// name the rule that was broken, never the value: a hostile certificate's contents do not
// reach logs through them.
var (
	// ErrNoIdentity: the certificate carries no URI SAN.
	ErrNoIdentity = errors.New("security: no URI SAN identity")
	// ErrAmbiguousIdentity: the certificate carries more than one URI SAN.
	ErrAmbiguousIdentity = errors.New("security: several URI SANs")
	// ErrNonCanonicalIdentity: the URI is not in canonical form (identity.go lists the rules).
	// It is refused, never normalised, so that policy matching is byte equality.
	ErrNonCanonicalIdentity = errors.New("security: identity not in canonical form")
)

// Errors of authentication, at the handshake and on every RPC. Every one of them matches
// ErrUnauthenticated with errors.Is: the vocabulary's class (pkg/apierror), UNAUTHENTICATED.
var (
	// ErrUnauthenticated: the peer is not an authenticated client in the current policy.
	ErrUnauthenticated = apierror.ErrUnauthenticated
	// ErrNoClientCertificate: the peer presented no client certificate.
	ErrNoClientCertificate = fmt.Errorf("%w: no client certificate", ErrUnauthenticated)
	// ErrCertificateRejected: a presented certificate breaks a rule checked before chain
	// building (count, size, key type or size), or the leaf is a CA, lacks the clientAuth
	// extended key usage or carries no single canonical URI SAN.
	ErrCertificateRejected = fmt.Errorf("%w: client certificate rejected", ErrUnauthenticated)
	// ErrUntrusted: the chain does not verify against the current client CA bundle.
	ErrUntrusted = fmt.Errorf("%w: client certificate not trusted", ErrUnauthenticated)
	// ErrCertificateExpired: the client certificate (or a certificate of its chain) is
	// expired or not yet valid.
	ErrCertificateExpired = fmt.Errorf("%w: client certificate expired or not yet valid", ErrUnauthenticated)
	// ErrNotInPolicy: the identity is well-formed and verified but not in the current policy.
	ErrNotInPolicy = fmt.Errorf("%w: identity not in policy", ErrUnauthenticated)
)

// ErrUnavailable: there is no valid security material (no bundle loaded, or the current one
// was withdrawn). Handshakes fail and RPCs answer UNAVAILABLE: the service fails closed.
var ErrUnavailable = fmt.Errorf("%w: security material", apierror.ErrUnavailable)

// Errors of the RPC limiter. Both match ErrResourceExhausted, the vocabulary's ErrBusy
// (RESOURCE_EXHAUSTED, retryable).
var (
	// ErrResourceExhausted: a concurrency limit is reached; the call was refused without
	// waiting.
	ErrResourceExhausted = apierror.ErrBusy
	// ErrGlobalLimit: the replica's global limit of in-flight RPCs is reached.
	ErrGlobalLimit = fmt.Errorf("%w: replica at its in-flight RPC limit", ErrResourceExhausted)
	// ErrClientLimit: the calling client's limit of in-flight RPCs is reached.
	ErrClientLimit = fmt.Errorf("%w: client at its in-flight RPC limit", ErrResourceExhausted)
	// ErrConnectionLimit: the client's cap of open connections is reached (a ConnAdmitter's
	// refusal, at the handshake).
	ErrConnectionLimit = fmt.Errorf("%w: client at its open-connection limit", ErrResourceExhausted)
)

// Errors of configuration and security material.
var (
	// ErrInvalidPolicy: a client policy is inconsistent (AdministratorFor without
	// Administrator, a malformed or duplicate identity, a list over its bound).
	ErrInvalidPolicy = errors.New("security: invalid client policy")
	// ErrInvalidBundle: the manifest or a file it names is unreadable, malformed or
	// inconsistent. LoadBundle reports every problem at once, joined, each wrapping it.
	ErrInvalidBundle = errors.New("security: invalid security bundle")
	// ErrUnsafeTransition: a bundle may not replace the current one (CheckTransition): a lower
	// generation, the same generation with other content, or an unsafe grant-key rotation.
	ErrUnsafeTransition = errors.New("security: unsafe security-material transition")
	// ErrInvalidConfig: a constructor was given unsafe or incomplete settings.
	ErrInvalidConfig = errors.New("security: invalid configuration")
)
