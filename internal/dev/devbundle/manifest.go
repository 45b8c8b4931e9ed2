package devbundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// manifest renders the security manifest for r (docs/security.md). Strings are written as
// JSON strings, which are valid YAML double-quoted scalars, so no value needs YAML escaping
// rules of its own.
func (g *generator) manifest(r *Result) []byte {
	o := g.opts
	var b bytes.Buffer
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# execplane development security bundle, generated %s. For development only.", o.Now.UTC().Format(time.RFC3339))
	line("version: 1")
	line("generation: %d", o.Generation)
	pinned := []string{ServerCertFile, ServerKeyFile, CACertFile, GrantPublicFile, GrantKeyFile, RecordKeyFile}
	if o.RenewableServer {
		// Renewable in place: the issuer and the names are fixed, the certificate and key not
		// pinned (docs/security.md "Renewal in place").
		line("serverCertificate:")
		line("  certFile: %s", q(ServerCertFile))
		line("  keyFile: %s", q(ServerKeyFile))
		line("  renewal:")
		line("    issuerCABundle: %s", q(ServerIssuerFile))
		line("    dnsNames: [%s]", qList(r.ServerDNSNames, strings.ToLower))
		ips := make([]string, len(r.ServerIPAddresses))
		for i, ip := range r.ServerIPAddresses {
			ips[i] = ip.String()
		}
		line("    ipAddresses: [%s]", qList(ips, nil))
		pinned = []string{ServerIssuerFile, CACertFile, GrantPublicFile, GrantKeyFile, RecordKeyFile}
	} else {
		line("serverCertificate: {certFile: %s, keyFile: %s}", q(ServerCertFile), q(ServerKeyFile))
	}
	line("clientCABundle: %s", q(CACertFile))
	line("grantKeys:")
	line("  - id: %s", q(GrantKeyID))
	line("    state: signing")
	line("    publicKeyFile: %s", q(GrantPublicFile))
	line("    privateKeyFile: %s", q(GrantKeyFile))
	line("    verifyFrom: %s", q(o.Now.Add(-backdate).UTC().Truncate(time.Second).Format(time.RFC3339)))
	line("recordKeys:")
	line("  - {id: %s, file: %s}", q(RecordKeyID), q(RecordKeyFile))
	line("issuer: %s", q(DefaultIssuer))
	line("audience: %s", q(DefaultIssuer))
	line("grantLifetimes: {environment: %s, run: %s}", q(EnvironmentGrantLifetime.String()), q(RunGrantLifetime.String()))
	line("clients:")
	line("  - uri: %s", q(r.Caller.Identity))
	line("    mayAttestOwner: true")
	line("  - uri: %s", q(r.Administrator.Identity))
	line("    administrator: true")
	line("  - uri: %s", q(r.Gateway.Identity))
	for _, x := range o.Extra {
		line("  - uri: %s", q(r.Extra[x.Name].Identity))
		line("    mayAttestOwner: %t", x.MayAttestOwner)
		line("    administrator: %t", x.Administrator)
		if len(x.AdministratorFor) > 0 {
			line("    administratorFor:")
			for _, id := range x.AdministratorFor {
				line("      - %s", q(id))
			}
		}
	}
	line("fileDigests:")
	for _, name := range pinned {
		line("  %s: %s", q(name), q(digest(g.files[name])))
	}
	return b.Bytes()
}

// qList quotes each of ss (mapped by f when set) and joins them for a YAML flow sequence.
func qList(ss []string, f func(string) string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		if f != nil {
			s = f(s)
		}
		out[i] = q(s)
	}
	return strings.Join(out, ", ")
}

// q quotes s as a JSON string, a valid YAML double-quoted scalar.
func q(s string) string {
	out, err := json.Marshal(s)
	if err != nil {
		panic(err) // a string always marshals
	}
	return string(out)
}
