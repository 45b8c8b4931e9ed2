package devcluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The real node changes this machine in ways a process of its own cannot contain: kernel
// settings, an address, network links, mounts, cgroups and a few well-known directories.
// HostState is what of the machine those changes touch, so that a stop (or a test) can show
// that every one was undone.

// hostSysctls are the kernel settings the kubelet (setupKernelTunables), the CNI bridge
// plugin and the node's network (nodeSysctls) may change.
var hostSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
	"net.ipv4.ip_forward", "net.ipv4.conf.all.forwarding", "net.ipv6.conf.all.forwarding",
	"net.bridge.bridge-nf-call-iptables",
}

// hostPaths are directories outside the node's state directory that containerd, libcni or
// the kubelet create at fixed places whatever their configuration says: the shims' sockets
// (/run/containerd/s), libcni's result cache, the kubelet's legacy container-log links.
var hostPaths = []string{
	"/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/log/pods",
	"/var/lib/kubelet", "/var/lib/containerd", "/opt/containerd", "/var/run/nri", "/run/netns",
	nodeDataDir,
}

// cgroupFS is where the machine's cgroup hierarchies are mounted.
const cgroupFS = "/sys/fs/cgroup"

// nodeProgramNames are the commands of the node's processes, containers' runtime included.
var nodeProgramNames = []string{"containerd", "containerd-shim", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "runc", "pause"}

// HostState is a snapshot of the parts of the machine the real node changes.
type HostState struct {
	Sysctls   map[string]string `json:"sysctls"`
	Addresses []string          `json:"addresses"` // "link addr/prefix"
	Links     []string          `json:"links"`
	Mounts    []string          `json:"mounts"`    // outside the temporary directory
	Paths     []string          `json:"paths"`     // the hostPaths that exist
	Cgroups   []string          `json:"cgroups"`   // "hierarchy/name" of every top-level cgroup
	Processes []string          `json:"processes"` // the commands of running node programs
	Firewall  string            `json:"firewall"`  // iptables-save and ip6tables-save, rules only
	Tables    []string          `json:"tables"`    // "family name" of every nftables table
}

// SnapshotHost reads the machine's HostState.
func SnapshotHost() (HostState, error) {
	s := HostState{Sysctls: map[string]string{}}
	var errs []error
	for _, k := range hostSysctls {
		v, err := readSysctl(k)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		s.Sysctls[k] = v
	}
	ifaces, err := net.Interfaces()
	errs = append(errs, err)
	for _, ifc := range ifaces {
		s.Links = append(s.Links, ifc.Name)
		addrs, err := ifc.Addrs()
		errs = append(errs, err)
		for _, a := range addrs {
			s.Addresses = append(s.Addresses, ifc.Name+" "+a.String())
		}
	}
	mounts, err := mountPoints()
	errs = append(errs, err)
	// Mounts beneath the temporary directory come and go with other tests on this machine
	// (tmpfs mounts of the helper's); the node's own, beneath its state directory, are
	// checked by unmountBeneath.
	tmp := filepath.Clean(os.TempDir())
	for _, m := range mounts {
		if !strings.HasPrefix(m, tmp+"/") {
			s.Mounts = append(s.Mounts, m)
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			s.Paths = append(s.Paths, p)
		}
	}
	hierarchies, err := cgroupHierarchies()
	errs = append(errs, err)
	for _, h := range hierarchies {
		entries, err := os.ReadDir(h)
		errs = append(errs, err)
		for _, e := range entries {
			if e.IsDir() {
				s.Cgroups = append(s.Cgroups, filepath.Base(h)+"/"+e.Name())
			}
		}
	}
	procs, err := os.ReadDir("/proc")
	errs = append(errs, err)
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		if name, ok := liveProcess(p.Name()); ok && slices.Contains(nodeProgramNames, name) {
			s.Processes = append(s.Processes, name)
		}
	}
	s.Firewall = firewallRules()
	s.Tables, err = nftTables()
	errs = append(errs, err)
	for _, l := range [][]string{s.Addresses, s.Links, s.Mounts, s.Paths, s.Cgroups, s.Processes, s.Tables} {
		sort.Strings(l)
	}
	return s, errors.Join(errs...)
}

// Diff lists, one line each, what differs from before to s; empty means the machine is as
// it was.
func (s HostState) Diff(before HostState) []string {
	var d []string
	for _, k := range hostSysctls {
		if before.Sysctls[k] != s.Sysctls[k] {
			d = append(d, fmt.Sprintf("sysctl %s: %q, was %q", k, s.Sysctls[k], before.Sysctls[k]))
		}
	}
	set := func(what string, was, now []string) {
		for _, x := range now {
			if !slices.Contains(was, x) {
				d = append(d, fmt.Sprintf("%s added: %s", what, x))
			}
		}
		for _, x := range was {
			if !slices.Contains(now, x) {
				d = append(d, fmt.Sprintf("%s gone: %s", what, x))
			}
		}
	}
	set("address", before.Addresses, s.Addresses)
	set("link", before.Links, s.Links)
	set("mount", before.Mounts, s.Mounts)
	set("path", before.Paths, s.Paths)
	set("cgroup", before.Cgroups, s.Cgroups)
	set("process", before.Processes, s.Processes)
	set("nftables table", before.Tables, s.Tables)
	if before.Firewall != s.Firewall {
		d = append(d, fmt.Sprintf("firewall rules changed:\n%s\nwere:\n%s", s.Firewall, before.Firewall))
	}
	return d
}

// liveProcess returns the command of process pid, unless it has exited (a zombie not yet
// reaped by its parent has: it holds nothing but its exit status).
func liveProcess(pid string) (string, bool) {
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "", false // exited meanwhile
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses; it ends at the last ')'.
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open || end+2 >= len(stat) {
		return "", false
	}
	if state := stat[end+2]; state == 'Z' || state == 'X' {
		return "", false
	}
	return string(stat[open+1 : end]), true
}

// owned is the part of s that the node recorded in l would have changed: the kernel settings
// the node sets, the node's address, bridge, mounts, cgroup root and kube-proxy's nftables
// tables, the fixed directories.
// A node's stop compares only that, so that what other programs did to the machine meanwhile
// (a container runtime's links, a firewall rule) does not fail it; its processes are checked
// by the sweeps themselves. Tests compare whole snapshots under the lock.
func (s HostState) owned(l *nodeLedger) HostState {
	o := HostState{Sysctls: map[string]string{}, Paths: s.Paths}
	for k := range nodeSysctls {
		o.Sysctls[k] = s.Sysctls[k]
	}
	keep := func(in []string, f func(string) bool) []string {
		var out []string
		for _, x := range in {
			if f(x) {
				out = append(out, x)
			}
		}
		return out
	}
	o.Addresses = keep(s.Addresses, func(a string) bool { return a == "lo "+l.Address })
	o.Links = keep(s.Links, func(n string) bool { return n == l.Bridge })
	o.Mounts = keep(s.Mounts, l.isOurs)
	o.Cgroups = keep(s.Cgroups, func(c string) bool { return filepath.Base(c) == l.CgroupRoot })
	o.Tables = keep(s.Tables, func(t string) bool { return slices.Contains(l.NFTables, t) })
	return o
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

func readSysctl(key string) (string, error) {
	data, err := os.ReadFile(sysctlPath(key))
	return strings.TrimSpace(string(data)), err
}

func writeSysctl(key, value string) error {
	return os.WriteFile(sysctlPath(key), []byte(value+"\n"), 0o644)
}

// mountPoints lists the mount points of this mount namespace.
func mountPoints() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var points []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 4 {
			points = append(points, unescapeMount(f[4]))
		}
	}
	return points, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers and the unified
// one), each once.
func cgroupHierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, err
	}
	var hs []string
	for _, e := range entries {
		if e.IsDir() && e.Type()&os.ModeSymlink == 0 {
			hs = append(hs, filepath.Join(cgroupFS, e.Name()))
		}
	}
	return hs, nil
}

// firewallRules returns the machine's iptables rules (both families, counters and comments
// removed), or "" where iptables is not installed.
func firewallRules() string {
	var b strings.Builder
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			continue
		}
		out, err := exec.Command(path).Output()
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", tool, err)
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if strings.HasPrefix(line, ":") { // ":CHAIN POLICY [packets:bytes]"
				if i := strings.LastIndex(line, " ["); i > 0 {
					line = line[:i]
				}
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// nftTables lists the machine's nftables tables as "family name" (nft list tables), or none
// where nft is not installed.
func nftTables() ([]string, error) {
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, nil
	}
	out, err := exec.Command(path, "list", "tables").Output()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w", err)
	}
	var tables []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables, nil
}
