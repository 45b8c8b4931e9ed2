package devbundle

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	line("serverCertificate: {certFile: %s, keyFile: %s}", q(ServerCertFile), q(ServerKeyFile))
	line("clientCABundle: %s", q(CACertFile))
	line("grantKeys:")
	line("  - id: %s", q(GrantKeyID))
	line("    state: signing")
	line("    publicKeyFile: %s", q(GrantPublicFile))
	line("    privateKeyFile: %s", q(GrantKeyFile))
	line("    verifyFrom: %s", q(o.Now.Add(-backdate).UTC().Truncate(time.Second).Format(time.RFC3339)))
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
	for _, name := range []string{ServerCertFile, ServerKeyFile, CACertFile, GrantPublicFile, GrantKeyFile} {
		line("  %s: %s", q(name), q(digest(g.files[name])))
	}
	return b.Bytes()
}

// q quotes s as a JSON string, a valid YAML double-quoted scalar.
func q(s string) string {
	out, err := json.Marshal(s)
	if err != nil {
		panic(err) // a string always marshals
	}
	return string(out)
}
