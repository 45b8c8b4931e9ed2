package security

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"net/url"
	"strings"
)

// ClientIdentity is a client's identity: the single URI SAN of its certificate, in the
// canonical form ParseClientIdentity accepts. Policies are keyed by it and matched by byte
// equality, and grants carry its SHA-256 (ident.ClientHash).
type ClientIdentity string

// String returns the identity's URI.
func (id ClientIdentity) String() string { return string(id) }

// Identity schemes.
const (
	schemeSPIFFE = "spiffe"
	schemeHTTPS  = "https"
	// defaultHTTPSPort is omitted from canonical https identities (RFC 3986 §6.2.3).
	defaultHTTPSPort = "443"
)

// oidSubjectAltName is the SubjectAltName extension (RFC 5280 §4.2.1.6).
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// sanURITag is the GeneralName choice uniformResourceIdentifier [6] IA5String.
const sanURITag = 6

// IdentityFromCertificate returns the identity of a client certificate: its one URI SAN,
// which must be in canonical form. Zero URI SANs answer ErrNoIdentity, several
// ErrAmbiguousIdentity, a non-canonical one ErrNonCanonicalIdentity. Other SAN types (DNS
// names, IP addresses, e-mail addresses) are allowed and ignored.
//
// The URI is taken from the certificate's encoded SubjectAltName extension, byte for byte,
// not from the parsed cert.URIs: net/url normalises (it lowercases the scheme, for one),
// and a non-canonical URI must be refused, never silently normalised.
func IdentityFromCertificate(cert *x509.Certificate) (ClientIdentity, error) {
	if cert == nil {
		return "", fmt.Errorf("%w: no certificate", ErrNoIdentity)
	}
	uris, err := rawURISANs(cert.Extensions)
	if err != nil {
		return "", err
	}
	switch {
	case len(uris) == 0:
		return "", ErrNoIdentity
	case len(uris) > 1 || len(cert.URIs) != 1:
		// The second condition only holds if crypto/x509 read the extension differently.
		return "", ErrAmbiguousIdentity
	}
	return ParseClientIdentity(uris[0])
}

// rawURISANs returns the URI entries of the SubjectAltName extension as encoded.
func rawURISANs(exts []pkix.Extension) ([]string, error) {
	var uris []string
	seen := false
	for _, ext := range exts {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		if seen {
			return nil, fmt.Errorf("%w: several SubjectAltName extensions", ErrAmbiguousIdentity)
		}
		seen = true
		var err error
		if uris, err = parseURISANs(ext.Value); err != nil {
			return nil, err
		}
	}
	return uris, nil
}

// parseURISANs decodes a SubjectAltName extension value (a SEQUENCE OF GeneralName) and
// returns its URI entries. It is strict: trailing bytes or a non-sequence are errors.
func parseURISANs(der []byte) ([]string, error) {
	var seq asn1.RawValue
	rest, err := asn1.Unmarshal(der, &seq)
	if err != nil || len(rest) != 0 || seq.Class != asn1.ClassUniversal || seq.Tag != asn1.TagSequence || !seq.IsCompound {
		return nil, fmt.Errorf("%w: malformed SubjectAltName extension", ErrNoIdentity)
	}
	var uris []string
	for rest = seq.Bytes; len(rest) > 0; {
		var name asn1.RawValue
		if rest, err = asn1.Unmarshal(rest, &name); err != nil {
			return nil, fmt.Errorf("%w: malformed SubjectAltName extension", ErrNoIdentity)
		}
		if name.Class == asn1.ClassContextSpecific && name.Tag == sanURITag && !name.IsCompound {
			uris = append(uris, string(name.Bytes))
		}
	}
	return uris, nil
}

// ParseClientIdentity checks that s is a client identity in canonical form and returns it.
// Nothing is normalised: an identity that is not canonical is refused with
// ErrNonCanonicalIdentity, naming the rule it breaks (never echoing the value).
//
// The canonical form:
//   - at most MaxIdentityBytes bytes of printable ASCII (0x21..0x7e): no spaces, no control
//     characters, no raw non-ASCII;
//   - scheme "spiffe" or "https", lowercase, followed by "://";
//   - no userinfo, no query, no fragment;
//   - host: lowercase, dot-separated non-empty labels of at most 63 bytes, at most 253
//     bytes, no trailing dot. spiffe: labels of [a-z0-9._-] (the SPIFFE trust-domain
//     charset); https: DNS labels of [a-z0-9-] not starting or ending with "-", and a last
//     label that is not all digits (no IPv4 literals; IPv6 literals are refused too);
//   - port: none for spiffe; for https, optional, decimal without leading zeros, 1..65535,
//     and never 443 (the default port is omitted);
//   - path: spiffe requires one, https may have none ("https://host"); either way every
//     segment is non-empty (no "//", no trailing "/") and neither "." nor "..";
//     spiffe segments are [A-Za-z0-9._-] (SPIFFE: no percent-encoding at all); https
//     segments are RFC 3986 pchars with percent-encoding only where required: "%XX" has
//     uppercase hex digits and encodes a byte that may not appear literally in a segment
//     (never an unreserved character, a sub-delimiter, ":" or "@"), and never a control
//     character;
//   - and, as a cross-check, net/url parses it and prints it back unchanged.
func ParseClientIdentity(s string) (ClientIdentity, error) {
	if err := checkCanonical(s); err != nil {
		return "", err
	}
	// Cross-check with net/url: a disagreement between the two parsers is refused rather
	// than resolved in anyone's favour.
	u, err := url.Parse(s)
	if err != nil || u.String() != s || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", nonCanonical("not reproduced exactly by net/url")
	}
	return ClientIdentity(s), nil
}

func nonCanonical(rule string) error {
	return fmt.Errorf("%w: %s", ErrNonCanonicalIdentity, rule)
}

// checkCanonical is ParseClientIdentity's own parser, without the net/url cross-check.
func checkCanonical(s string) error {
	switch {
	case s == "":
		return nonCanonical("empty")
	case len(s) > MaxIdentityBytes:
		return nonCanonical(fmt.Sprintf("longer than %d bytes", MaxIdentityBytes))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return nonCanonical("only printable ASCII without spaces is allowed")
		}
	}
	if strings.ContainsRune(s, '?') {
		return nonCanonical("a query is not allowed")
	}
	if strings.ContainsRune(s, '#') {
		return nonCanonical("a fragment is not allowed")
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nonCanonical(`must be scheme "://" host [path]`)
	}
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if strings.ContainsRune(authority, '@') {
		return nonCanonical("userinfo is not allowed")
	}
	switch scheme {
	case schemeSPIFFE:
		return checkSPIFFE(authority, path)
	case schemeHTTPS:
		return checkHTTPS(authority, path)
	}
	if strings.EqualFold(scheme, schemeSPIFFE) || strings.EqualFold(scheme, schemeHTTPS) {
		return nonCanonical("the scheme must be lowercase")
	}
	return nonCanonical(`the scheme must be "spiffe" or "https"`)
}

func checkSPIFFE(host, path string) error {
	if strings.ContainsRune(host, ':') {
		return nonCanonical("a SPIFFE ID has no port")
	}
	if err := checkHost(host, isTrustDomainByte); err != nil {
		return err
	}
	if path == "" {
		return nonCanonical("a SPIFFE workload ID needs a path")
	}
	return checkPath(path, checkSPIFFESegment)
}

func checkHTTPS(authority, path string) error {
	if strings.HasPrefix(authority, "[") {
		return nonCanonical("IP literals are not allowed as host")
	}
	host, port, hasPort := strings.Cut(authority, ":")
	if err := checkHost(host, isDNSLabelByte); err != nil {
		return err
	}
	for label := range strings.SplitSeq(host, ".") {
		if strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
			return nonCanonical("a host label may not start or end with '-'")
		}
	}
	if last := host[strings.LastIndexByte(host, '.')+1:]; strings.Trim(last, "0123456789") == "" {
		return nonCanonical("IP addresses are not allowed as host")
	}
	if hasPort {
		if err := checkPort(port); err != nil {
			return err
		}
	}
	if path == "" {
		return nil
	}
	return checkPath(path, checkHTTPSSegment)
}

// checkHost checks the labels of a host: lowercase, non-empty, bounded, of allowed bytes.
func checkHost(host string, allowed func(byte) bool) error {
	switch {
	case host == "":
		return nonCanonical("the host is empty")
	case len(host) > maxHostBytes:
		return nonCanonical(fmt.Sprintf("the host is longer than %d bytes", maxHostBytes))
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" {
			return nonCanonical("the host has an empty label (or a trailing dot)")
		}
		if len(label) > maxLabelBytes {
			return nonCanonical(fmt.Sprintf("a host label is longer than %d bytes", maxLabelBytes))
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if 'A' <= c && c <= 'Z' {
				return nonCanonical("the host must be lowercase")
			}
			if !allowed(c) {
				return nonCanonical("the host has a character that is not allowed")
			}
		}
	}
	return nil
}

func checkPort(port string) error {
	switch {
	case port == "":
		return nonCanonical("an empty port is not allowed")
	case port == defaultHTTPSPort:
		return nonCanonical("the default port 443 must be omitted")
	case port[0] == '0':
		return nonCanonical("the port has a leading zero")
	case len(port) > 5:
		return nonCanonical("the port is out of range")
	}
	n := 0
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return nonCanonical("the port is not a decimal number")
		}
		n = n*10 + int(port[i]-'0')
	}
	if n > 65535 {
		return nonCanonical("the port is out of range")
	}
	return nil
}

// checkPath checks a path that starts with "/": every segment non-empty, not a dot
// segment, and accepted by segment.
func checkPath(path string, segment func(string) error) error {
	for seg := range strings.SplitSeq(path[1:], "/") {
		switch seg {
		case "":
			return nonCanonical("the path has an empty segment or a trailing slash")
		case ".", "..":
			return nonCanonical("the path has a dot segment")
		}
		if err := segment(seg); err != nil {
			return err
		}
	}
	return nil
}

func checkSPIFFESegment(seg string) error {
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if !isUnreservedNoTilde(c) {
			if c == '%' {
				return nonCanonical("percent-encoding is not allowed in a SPIFFE ID")
			}
			return nonCanonical("a SPIFFE path segment allows only [A-Za-z0-9._-]")
		}
	}
	return nil
}

func checkHTTPSSegment(seg string) error {
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case isPathByte(c):
		case c == '%':
			if i+2 >= len(seg) || !isUpperHex(seg[i+1]) || !isUpperHex(seg[i+2]) {
				return nonCanonical("percent-encoding must be '%' and two uppercase hex digits")
			}
			b := unhex(seg[i+1])<<4 | unhex(seg[i+2])
			if isPathByte(b) {
				return nonCanonical("percent-encoding of a character allowed literally")
			}
			if b < 0x20 || b == 0x7f {
				return nonCanonical("an encoded control character is not allowed")
			}
			i += 2
		default:
			return nonCanonical("the path has a character that must be percent-encoded")
		}
	}
	return nil
}

// isPathByte reports whether c may appear literally in an RFC 3986 path segment (pchar
// without pct-encoded): unreserved, sub-delims, ":" and "@".
func isPathByte(c byte) bool {
	if isUnreservedNoTilde(c) || c == '~' || c == ':' || c == '@' {
		return true
	}
	return strings.IndexByte("!$&'()*+,;=", c) >= 0
}

func isUnreservedNoTilde(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_'
}

func isTrustDomainByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

func isDNSLabelByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-'
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}
