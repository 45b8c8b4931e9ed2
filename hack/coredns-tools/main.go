// Command coredns is the local cluster's DNS server: CoreDNS (pinned by this module) with
// the plugins the cluster's Corefile uses and no others (internal/dev/devcluster/dns.go).
// Built by hack/build-dns-bins.sh into the CoreDNS image the real node pulls.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	// In CoreDNS's own order (core/dnsserver/zdirectives.go), which is the order a query
	// passes through them.
	dnsserver.Directives = []string{"ready", "health", "errors", "cache", "kubernetes"}
	coremain.Run()
}
