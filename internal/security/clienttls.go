package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ClientFiles names a caller's TLS material: its certificate chain and key (PEM), and the CA
// bundle that signs the server's certificate.
type ClientFiles struct {
	// CertFile is the client's certificate chain (PEM, leaf first).
	CertFile string
	// KeyFile is the client's private key (PEM).
	KeyFile string
	// CAFile holds the CA certificates the server's chain must verify against (PEM).
	CAFile string
	// ServerName is the name expected in the server's certificate; empty means the host
	// the caller dials (gRPC fills it in from the target).
	ServerName string
}

// LoadClientTLSConfig reads files (each within its size cap; certificates and keys strictly
// PEM) and returns ClientTLSConfig's configuration. Errors name the file, never its content.
//
// The files are read one after the other. When they come from one Secret in a volume that
// the kubelet updates (cert-manager's tls.crt, tls.key and ca.crt, renewed in place with a
// new key every time), a read may straddle its ..data swap and pair the new certificate with
// the old key. A mismatched pair is therefore read once more before it is reported: the swap
// is atomic, so the second read sees one snapshot unless a second swap follows at once.
func LoadClientTLSConfig(files ClientFiles) (*tls.Config, error) {
	cfg, err := loadClientTLSConfig(files)
	if errors.Is(err, errKeyMismatch) {
		cfg, err = loadClientTLSConfig(files)
	}
	return cfg, err
}

// errKeyMismatch marks a key that does not match its certificate (or does not parse).
var errKeyMismatch = errors.New("the key does not match the certificate or does not parse")

func loadClientTLSConfig(files ClientFiles) (*tls.Config, error) {
	var errs []error
	read := func(name string, limit int64) []byte {
		if name == "" {
			errs = append(errs, fmt.Errorf("%w: a client TLS file is not set", ErrInvalidConfig))
			return nil
		}
		data, err := readFileCapped(name, limit)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, name, err))
		}
		return data
	}
	certPEM := read(files.CertFile, MaxCertificateFileBytes)
	keyPEM := read(files.KeyFile, MaxKeyFileBytes)
	caPEM := read(files.CAFile, MaxCABundleBytes)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if _, err := pemBlocks(certPEM, MaxPeerCertificates, pemCertificate); err != nil {
		errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, files.CertFile, err))
	}
	if _, err := pemBlocks(keyPEM, 1, pemPrivateKey, pemECPrivateKey, pemRSAPrivateKey); err != nil {
		errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, files.KeyFile, err))
	}
	cas, err := parseCertificates(caPEM, MaxClientCAs)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, files.CAFile, err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s does not match %s or does not parse: %w", ErrInvalidConfig, files.KeyFile, files.CertFile, errKeyMismatch)
	}
	roots := x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	return ClientTLSConfig(cert, roots, files.ServerName), nil
}

// ClientTLSConfig returns a client configuration: TLS 1.3 only, the given client
// certificate, the server verified against roots (and serverName, when set). There is no
// session cache, so no session is ever resumed.
func ClientTLSConfig(cert tls.Certificate, roots *x509.CertPool, serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      roots,
		ServerName:   serverName,
	}
}

// readFileCapped reads a file by path within limit bytes; only regular files. Symbolic
// links are resolved first: these are the caller's own files, wherever they live.
func readFileCapped(name string, limit int64) ([]byte, error) {
	resolved, err := filepath.EvalSymlinks(name)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(filepath.Dir(resolved))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return readCapped(root, filepath.Base(resolved), limit)
}
