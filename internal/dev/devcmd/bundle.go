package devcmd

import (
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/dev/devbundle"
)

// runBundle writes a development security bundle: a CA, a server certificate, a caller, an
// administrator, the gateway's identity towards the controller, an Ed25519 grant key and the
// manifest naming them — for trying execplane outside `make demo`, never for production.
func runBundle(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("execplane-dev bundle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dns, ips, clients multi
	fs.Var(&dns, "dns-name", "another server certificate DNS name beside localhost (repeatable)")
	fs.Var(&ips, "ip", "another server certificate IP address beside 127.0.0.1 and ::1 (repeatable)")
	fs.Var(&clients, "client", "another client NAME[:attest][:admin] (repeatable): attest may attest owners, admin administers")
	validity := fs.Duration("validity", devbundle.DefaultValidity, "certificate lifetime (at most 90 days)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: execplane-dev bundle [flags] DIR\n\nWrites a development security bundle into DIR (new or empty): CA, server and client\ncertificates, a grant key and the manifest. Development only: the CA key is in DIR.\n\nExample:\n  execplane-dev bundle ./bundle --dns-name gateway.local --client ci:attest\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, cli.Interspersed(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return cli.Usagef("want the bundle directory")
	}
	opts := devbundle.Options{DNSNames: dns, Validity: *validity}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return cli.Usagef("--ip %q: not an IP address", s)
		}
		opts.IPAddresses = append(opts.IPAddresses, ip)
	}
	for _, c := range clients {
		parts := strings.Split(c, ":")
		x := devbundle.ExtraClient{Name: parts[0]}
		for _, cap := range parts[1:] {
			switch cap {
			case "attest":
				x.MayAttestOwner = true
			case "admin":
				x.Administrator = true
			default:
				return cli.Usagef("--client %q: capability %q is neither attest nor admin", c, cap)
			}
		}
		opts.Extra = append(opts.Extra, x)
	}
	b, err := devbundle.Generate(fs.Arg(0), opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "manifest   %s (generation %d)\nCA         %s\nserver     %s\ncaller     %s (%s)\nadmin      %s (%s)\ngateway    %s (%s)\n",
		b.Manifest, b.Generation, b.CACert, b.ServerCert, b.Caller.CertFile, b.Caller.Identity, b.Administrator.CertFile, b.Administrator.Identity,
		b.Gateway.CertFile, b.Gateway.Identity)
	for _, x := range opts.Extra {
		c := b.Extra[x.Name]
		fmt.Fprintf(stdout, "%-10s %s (%s)\n", x.Name, c.CertFile, c.Identity)
	}
	return nil
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }
