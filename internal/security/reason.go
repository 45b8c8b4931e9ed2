package security

import (
	"errors"
	"strings"
)

// Reason is a bounded classification of a refusal, for metric labels and logs. The set is
// closed.
type Reason string

// Refusal reasons.
const (
	// ReasonNoCertificate: the client presented no certificate.
	ReasonNoCertificate Reason = "no_certificate"
	// ReasonCertificateRejected: a bound, the key, the extended key usage or the CA flag.
	ReasonCertificateRejected Reason = "certificate_rejected"
	// ReasonBadIdentity: zero, several or non-canonical URI SANs.
	ReasonBadIdentity Reason = "bad_identity"
	// ReasonUntrusted: the chain does not verify against the current client CA bundle.
	ReasonUntrusted Reason = "untrusted"
	// ReasonExpired: a certificate is expired or not yet valid.
	ReasonExpired Reason = "expired"
	// ReasonNotInPolicy: the identity is not in the current policy.
	ReasonNotInPolicy Reason = "not_in_policy"
	// ReasonUnauthenticated: any other authentication failure.
	ReasonUnauthenticated Reason = "unauthenticated"
	// ReasonUnavailable: no valid security material.
	ReasonUnavailable Reason = "unavailable"
	// ReasonGlobalLimit: the replica's in-flight limit.
	ReasonGlobalLimit Reason = "global_limit"
	// ReasonClientLimit: the client's in-flight limit.
	ReasonClientLimit Reason = "client_limit"
	// ReasonConnectionLimit: the client's open-connection cap.
	ReasonConnectionLimit Reason = "connection_limit"
	// ReasonHandshake is any other handshake failure: a protocol version below TLS 1.3, no
	// common cipher or ALPN, a bad CertificateVerify signature, a timeout, a reset.
	ReasonHandshake Reason = "handshake"
)

// tlsNoCertificate is how crypto/tls reports a client that sent no certificate to a server
// requiring one (it has no sentinel error); TestAuthNoClientCertificate notices if it changes.
const tlsNoCertificate = "tls: client didn't provide a certificate"

// ReasonOf classifies err, most specific first.
func ReasonOf(err error) Reason {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrUnavailable):
		return ReasonUnavailable
	case errors.Is(err, ErrNoClientCertificate), strings.Contains(err.Error(), tlsNoCertificate):
		return ReasonNoCertificate
	case errors.Is(err, ErrNoIdentity), errors.Is(err, ErrAmbiguousIdentity), errors.Is(err, ErrNonCanonicalIdentity):
		return ReasonBadIdentity
	case errors.Is(err, ErrCertificateRejected):
		return ReasonCertificateRejected
	case errors.Is(err, ErrCertificateExpired):
		return ReasonExpired
	case errors.Is(err, ErrUntrusted):
		return ReasonUntrusted
	case errors.Is(err, ErrNotInPolicy):
		return ReasonNotInPolicy
	case errors.Is(err, ErrUnauthenticated):
		return ReasonUnauthenticated
	case errors.Is(err, ErrGlobalLimit):
		return ReasonGlobalLimit
	case errors.Is(err, ErrClientLimit):
		return ReasonClientLimit
	case errors.Is(err, ErrConnectionLimit):
		return ReasonConnectionLimit
	}
	return ReasonHandshake
}
