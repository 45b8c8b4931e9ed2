package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// TLSConfig returns a server configuration for fixed material: TLS 1.3 only, session
// tickets off, a client certificate required and verified against clientCAs by
// verifyClient (bounded checks before chain building, clientAuth usage, no CA as leaf, one
// canonical URI SAN). There is no policy: any identity that verifies is accepted, so servers
// with a client policy use ServerTLSConfig instead.
func TLSConfig(server tls.Certificate, clientCAs *x509.CertPool) *tls.Config {
	return newServerConfig(server, clientCAs, nil)
}

// ServerTLSConfig returns a server configuration that takes the current bundle from current
// on every handshake (GetConfigForClient), so a new server certificate, CA bundle or client
// policy applies to the next handshake without a restart. Each bundle's configuration is
// TLSConfig's plus its policy: an identity not in it fails the handshake. When current
// reports no bundle, the handshake fails with ErrUnavailable: no valid material, no
// connection.
func ServerTLSConfig(current func() (*Bundle, bool)) *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: true,
		ClientAuth:             tls.RequireAnyClientCert,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			b, ok := current()
			if !ok || b == nil || b.serverTLS == nil {
				return nil, ErrUnavailable
			}
			return b.serverTLS, nil
		},
		// Never reached while GetConfigForClient answers; fails closed if it ever is.
		VerifyConnection: func(tls.ConnectionState) error { return ErrUnavailable },
	}
}

// newServerConfig is the server configuration of one set of material. policies nil means
// no policy check (TLSConfig).
//
// crypto/tls is told to request any client certificate (RequireAnyClientCert) rather than to
// verify it, so that verifyClient runs the bounded checks before any chain is built; the
// verification it then does is the one crypto/tls would have done, plus what it does not
// check (explicit clientAuth usage, no CA as leaf, identity, policy).
func newServerConfig(server tls.Certificate, clientCAs *x509.CertPool, policies *Policies) *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: true,
		Certificates:           []tls.Certificate{server},
		ClientAuth:             tls.RequireAnyClientCert,
		// Sent to clients as the acceptable CA names, so that one holding several
		// certificates picks the right one; crypto/tls does not verify with it here.
		ClientCAs: clientCAs,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyClient(cs, clientCAs, policies, time.Now())
			return err
		},
	}
}

// verifyClient authenticates the client of a handshake and returns its identity. In order,
// cheapest first, and everything before chain building bounded by constants:
//
//  1. TLS 1.3, not resumed;
//  2. 1..MaxPeerCertificates certificates, each at most MaxPeerCertificateBytes, each with
//     an accepted key type and size (checkPublicKey);
//  3. the leaf is not a CA (no CA basic constraint, no certificate-signing key usage) and
//     lists the clientAuth extended key usage explicitly;
//  4. the leaf has exactly one URI SAN, in canonical form;
//  5. the chain verifies against roots at now, with the presented intermediates and the
//     clientAuth usage throughout;
//  6. the identity is in policies (when policies is not nil).
func verifyClient(cs tls.ConnectionState, roots *x509.CertPool, policies *Policies, now time.Time) (ClientIdentity, error) {
	if cs.Version != tls.VersionTLS13 {
		return "", fmt.Errorf("%w: TLS 1.3 is required", ErrUnauthenticated)
	}
	if cs.DidResume {
		return "", fmt.Errorf("%w: session resumption is not allowed", ErrUnauthenticated)
	}
	certs := cs.PeerCertificates
	if len(certs) == 0 {
		return "", ErrNoClientCertificate
	}
	if len(certs) > MaxPeerCertificates {
		return "", fmt.Errorf("%w: %d certificates presented, at most %d", ErrCertificateRejected, len(certs), MaxPeerCertificates)
	}
	for i, c := range certs {
		if len(c.Raw) > MaxPeerCertificateBytes {
			return "", fmt.Errorf("%w: certificate %d larger than %d bytes", ErrCertificateRejected, i, MaxPeerCertificateBytes)
		}
		if err := checkPublicKey(c.PublicKey); err != nil {
			return "", fmt.Errorf("%w: certificate %d: %v", ErrCertificateRejected, i, err)
		}
	}
	leaf := certs[0]
	if isCA(leaf) || leaf.KeyUsage&x509.KeyUsageCertSign != 0 {
		return "", fmt.Errorf("%w: a CA certificate cannot be a client certificate", ErrCertificateRejected)
	}
	if !hasExtKeyUsage(leaf, x509.ExtKeyUsageClientAuth) {
		return "", fmt.Errorf("%w: the clientAuth extended key usage is required", ErrCertificateRejected)
	}
	id, err := IdentityFromCertificate(leaf)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrCertificateRejected, err)
	}
	if roots == nil {
		return "", ErrUnavailable
	}
	intermediates := x509.NewCertPool()
	for _, c := range certs[1:] {
		intermediates.AddCert(c)
	}
	_, err = leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: intermediates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return "", classifyVerifyError(err)
	}
	if policies != nil && !policies.Contains(id) {
		return "", ErrNotInPolicy
	}
	return id, nil
}

// classifyVerifyError maps a crypto/x509 verification error to this package's errors. The
// library's text is dropped: it quotes subject names from the (unauthenticated) chain.
func classifyVerifyError(err error) error {
	var invalid x509.CertificateInvalidError
	if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
		return ErrCertificateExpired
	}
	if errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage {
		return fmt.Errorf("%w: the chain does not allow client authentication", ErrUntrusted)
	}
	return fmt.Errorf("%w: the chain does not verify against the current client CA bundle", ErrUntrusted)
}
