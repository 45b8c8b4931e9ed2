package devbundle

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"
)

// serverSpec is the server certificate of r: its names and the serverAuth usage. The
// validity is the caller's.
func serverSpec(r *Result) LeafSpec {
	return LeafSpec{
		CommonName:  "execplane server",
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    append([]string(nil), r.ServerDNSNames...),
		IPAddresses: append(r.ServerIPAddresses[:0:0], r.ServerIPAddresses...),
	}
}

// IssueServer issues a new server certificate and a new key from the bundle's CA, for the
// bundle's server names, valid from notBefore to notAfter, and returns them in PEM: what
// cert-manager writes into the certificate's Secret (tls.crt, tls.key) when it renews it,
// with a new private key as rotationPolicy Always does. Written over the bundle's
// server.crt and server.key of a bundle generated with Options.RenewableServer, a later
// notBefore than the current certificate's is a renewal the SecurityManager accepts within
// the generation, an earlier one a rollback it refuses.
func (r *Result) IssueServer(notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	if !notAfter.After(notBefore) {
		return nil, nil, errors.New("devbundle: notAfter must be after notBefore")
	}
	ca, err := LoadCA(r.CACert, r.CAKey)
	if err != nil {
		return nil, nil, err
	}
	spec := serverSpec(r)
	spec.NotBefore, spec.NotAfter = notBefore, notAfter
	cert, key, err := ca.Issue(spec)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = PrivateKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return CertificatePEM(cert), keyPEM, nil
}

// LoadCA reads a CA certificate and its PKCS#8 private key written by Generate (ca.crt,
// ca.key), to issue more certificates from it.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("devbundle: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("devbundle: %w", err)
	}
	return ParseCA(certPEM, keyPEM)
}

// ParseCA parses a PEM CA certificate and its private key: PKCS#8 (Generate's), or SEC 1 or
// PKCS#1 (cert-manager's default encoding of a CA Secret's tls.key).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" || kb == nil {
		return nil, errors.New("devbundle: the CA is not a PEM certificate and a PEM key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("devbundle: CA certificate: %w", err)
	}
	var key any
	switch kb.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		err = fmt.Errorf("a PEM block of type %q", kb.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("devbundle: CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, errors.New("devbundle: not a CA certificate with a signing key")
	}
	return &CA{Certificate: cert, Key: signer}, nil
}
