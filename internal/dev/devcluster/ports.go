package devcluster

import (
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Ports handed to the processes a cluster, test or demo starts come from below the kernel's
// ephemeral range (32768–60999 by default; net.ipv4.ip_local_port_range), not from it: a
// port taken from the ephemeral range is free only until the next outgoing connection —
// and a gateway's helper sessions open many — picks it as its source port, between our
// check and the process's bind ("address already in use").
//
// A port that was free a moment ago is free only until its process binds it, a second or so
// later; meanwhile another pick — of this process (a test starting fourteen gateways in a
// row) or of another (go test runs the cluster packages side by side) — would find it free
// too. So every port handed out is also claimed: a file named after it under portClaimDir,
// created exclusively, that every pick of every process honours for portClaimTTL.
const (
	minServicePort = 20000
	maxServicePort = 32767
	// portTries bounds the random picks (most are free: few listeners live down there).
	portTries = 1000
	// portClaimTTL is how long a handed-out port is kept from other picks: far longer than a
	// process takes to bind it, short enough that the claims of a crashed run expire.
	portClaimTTL = 2 * time.Minute
)

// portClaimDir holds the claims of handed-out ports, shared by every process on the machine.
var portClaimDir = filepath.Join(os.TempDir(), "execplane-port-claims")

// freePorts returns n distinct loopback ports, below the ephemeral range, that were free a
// moment ago and that no other pick on this machine handed out in the last portClaimTTL:
// each was listened on and claimed, and all are released together.
func freePorts(n int) ([]int, error) {
	if err := os.MkdirAll(portClaimDir, 0o777); err != nil {
		return nil, fmt.Errorf("devcluster: port claims: %w", err)
	}
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for try := 0; len(ports) < n; try++ {
		if try == portTries {
			return nil, fmt.Errorf("devcluster: no free port in %d..%d after %d tries", minServicePort, maxServicePort, portTries)
		}
		p := minServicePort + mathrand.IntN(maxServicePort-minServicePort+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken: another pick
		}
		if !claimPort(p) {
			l.Close()
			continue // handed out a moment ago, not bound yet
		}
		listeners = append(listeners, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// claimPort claims port p for portClaimTTL, reporting false when a live claim holds it. An
// expired claim is taken over.
func claimPort(p int) bool {
	name := filepath.Join(portClaimDir, strconv.Itoa(p))
	for range 2 {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err == nil {
			f.Close()
			return true
		}
		info, statErr := os.Stat(name)
		if statErr != nil || time.Since(info.ModTime()) < portClaimTTL {
			return false
		}
		// Expired: remove it and try once more (a racing taker wins, and we pick again).
		os.Remove(name)
	}
	return false
}

// FreeAddrs returns n distinct loopback addresses (host:port) that were free a moment ago,
// for the processes a test, benchmark or demo starts.
func FreeAddrs(n int) ([]string, error) {
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(ports))
	for i, p := range ports {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return addrs, nil
}
