package devcluster

import (
	"bytes"
	"context"
	"encoding/json"
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
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// One real node per machine: its address, bridge, cgroup root and the kernel settings it
// changes are the machine's, not a test's. A lock serialises real nodes, and a ledger,
// written before each change is made, lets the next start undo what a crashed run left.
// Both live under /run, which a reboot empties together with every change they describe.
const (
	nodeRunDir     = "/run/execplane"
	nodeLockPath   = nodeRunDir + "/devnode.lock"
	nodeLedgerPath = nodeRunDir + "/devnode.json"
	// nodeDataDir holds the node's state (containerd's store, the kubelet's root, sockets),
	// at a short path: a unix socket's path is limited to 108 bytes, which a test's state
	// directory would exceed. Its logs go to the cluster's state directory.
	nodeDataDir = nodeRunDir + "/devnode"
	// nodeLockPoll is how often a start waiting for another real node retries the lock.
	nodeLockPoll = 250 * time.Millisecond
	// sweepTimeout bounds waiting for killed processes to be gone.
	sweepTimeout = 30 * time.Second
)

// nodeLedger records every change a real node makes to the machine, with what to restore.
type nodeLedger struct {
	// PID started the node.
	PID int `json:"pid"`
	// StateDir holds the node's files; every mount beneath it is the node's. LogDir holds
	// its logs (the Pods' too: the kubelet links them from /var/log/containers).
	StateDir string `json:"stateDir"`
	LogDir   string `json:"logDir,omitempty"`
	// BinDir holds containerd, its shim and the kubelet: a process running a program from
	// there is the node's.
	BinDir string `json:"binDir"`
	// CSIBinDir holds the CSI sidecars (csi.go), when the node runs them: likewise the node's.
	CSIBinDir string `json:"csiBinDir,omitempty"`
	// Sysctls are the values before the node started.
	Sysctls map[string]string `json:"sysctls"`
	// Address was added to lo.
	Address string `json:"address,omitempty"`
	// Bridge is the CNI bridge's name.
	Bridge string `json:"bridge"`
	// CgroupRoot is the cgroup created in every hierarchy for the kubelet's Pods.
	CgroupRoot string `json:"cgroupRoot"`
	// CreatedPaths are hostPaths that did not exist before.
	CreatedPaths []string `json:"createdPaths"`
	// NFTables are the nftables tables ("family name") kube-proxy creates.
	NFTables []string `json:"nftables,omitempty"`
}

func (l *nodeLedger) marshal() ([]byte, error) { return json.MarshalIndent(l, "", "  ") }

func (l *nodeLedger) write() error {
	data, err := l.marshal()
	if err != nil {
		return err
	}
	tmp := nodeLedgerPath + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, nodeLedgerPath)
}

func readLedger() (*nodeLedger, error) {
	data, err := os.ReadFile(nodeLedgerPath)
	if err != nil {
		return nil, err
	}
	l, err := unmarshalLedger(data)
	if err != nil {
		return nil, fmt.Errorf("devcluster: %s: %w", nodeLedgerPath, err)
	}
	return l, nil
}

// unmarshalLedger decodes a ledger strictly: a field this version does not know may be a
// change it would not undo.
func unmarshalLedger(data []byte) (*nodeLedger, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var l nodeLedger
	if err := dec.Decode(&l); err != nil {
		return nil, err
	}
	return &l, nil
}

// RealNodeLedgerPID returns the PID of the process whose real node's changes to the machine
// are recorded and not undone (it runs, or it stopped without undoing them all).
func RealNodeLedgerPID() (int, bool) {
	l, err := readLedger()
	if err != nil {
		return 0, false
	}
	return l.PID, true
}

// nodeLock is the machine-wide lock of the real node: an flock, released by the kernel when
// its holder dies.
type nodeLock struct{ f *os.File }

// lockNode takes the machine's real-node lock, waiting while another real node holds it.
func lockNode(ctx context.Context, logf func(string, ...any)) (*nodeLock, error) {
	if err := os.MkdirAll(nodeRunDir, 0o700); err != nil {
		return nil, err
	}
	return lockFile(ctx, nodeLockPath, logf)
}

// lockFile takes an exclusive flock on path, polling while another holder has it, until ctx
// ends. The file records the holder's PID.
func lockFile(ctx context.Context, path string, logf func(string, ...any)) (*nodeLock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	waiting := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("devcluster: lock %s: %w", path, err)
		}
		if !waiting {
			holder, _ := os.ReadFile(path)
			logf("devcluster: another real node runs on this machine (pid %s); waiting for it", strings.TrimSpace(string(holder)))
			waiting = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("devcluster: waiting for the real node lock %s: %w", path, ctx.Err())
		case <-time.After(nodeLockPoll):
		}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &nodeLock{f: f}, nil
}

// RealNodeLock is the machine's real-node lock held by a caller that keeps the machine
// across cluster starts: a test that compares the machine before and after, or that crashes
// a node on purpose and proves the next start cleans up (RealNodeOptions.HeldLock).
type RealNodeLock struct{ l *nodeLock }

// LockRealNode takes the machine's real-node lock, waiting while a real node runs, and
// undoes what a real node that ended without stopping left recorded in its ledger: every
// real node runs under the lock, so holding it proves that ledger's owner is gone. The
// machine the caller then reads is the machine without a real node (make test's packages
// run side by side: one's killed daemon must not become another's "before").
func LockRealNode(ctx context.Context, logf func(string, ...any)) (*RealNodeLock, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	l, err := lockNode(ctx, logf)
	if err != nil {
		return nil, err
	}
	if err := undoLeftovers(logf); err != nil {
		l.release()
		return nil, err
	}
	return &RealNodeLock{l: l}, nil
}

// undoLeftovers undoes the changes a ledger records, if there is one: called under the lock,
// whose holder alone runs a real node, so the ledger's owner has ended.
func undoLeftovers(logf func(string, ...any)) error {
	stale, err := readLedger()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	logf("devcluster: undoing what a real node of pid %d left on this machine", stale.PID)
	return stale.undo()
}

// RealNodeLockFrom is the lock held through f, an inherited descriptor of the lock file
// (File, passed to a child process): the flock belongs to the open file, which both share.
// It is made close-on-exec, so that the processes the node starts do not hold it too.
func RealNodeLockFrom(f *os.File) (*RealNodeLock, error) {
	if f == nil {
		return nil, errors.New("devcluster: no lock descriptor")
	}
	unix.CloseOnExec(int(f.Fd()))
	// Held already through the shared open file: taking it again on it succeeds at once;
	// on a descriptor without the lock, it fails when someone else holds it.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("devcluster: the inherited descriptor does not hold the real node lock: %w", err)
	}
	return &RealNodeLock{l: &nodeLock{f: f}}, nil
}

// File is the lock's open file, for a child process to inherit (exec.Cmd.ExtraFiles).
func (r *RealNodeLock) File() *os.File { return r.l.f }

// Release releases the lock.
func (r *RealNodeLock) Release() { r.l.release() }

func (l *nodeLock) release() {
	if l != nil && l.f != nil {
		_ = l.f.Truncate(0)
		_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}

// nodeSysctls are the kernel settings the node changes, with the value it sets: the
// kubelet's (setupKernelTunables) and the Pod network's — forwarding, for the bridge is the
// Pods' gateway, and bridged traffic through the firewall, so that kube-proxy's rules see a
// Pod reaching a Service whose endpoint is on the same bridge. Undo restores a setting only
// while it still holds that value, so a change another program made meanwhile stays.
var nodeSysctls = map[string]string{
	"vm.overcommit_memory": "1", "vm.panic_on_oom": "0", "kernel.panic": "10", "kernel.panic_on_oops": "1",
	"kernel.keys.root_maxkeys": "1000000", "kernel.keys.root_maxbytes": "25000000",
	"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1",
}

// networkSysctls are the settings of nodeSysctls the node writes itself (the kubelet writes
// the others).
var networkSysctls = []string{"net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables"}

// undo reverts every change l records, in the reverse order of making them, and removes the
// ledger. It goes on past failures and reports them all; it is safe to run again.
func (l *nodeLedger) undo() error {
	var errs []error
	// Processes first: nothing may recreate what the rest removes.
	errs = append(errs, killPrograms(l.BinDir, nodeBinaries), killPrograms(l.CSIBinDir, csiSidecars))
	if l.CgroupRoot != "" {
		errs = append(errs, killCgroup(l.CgroupRoot), removeCgroup(l.CgroupRoot))
	}
	unmounted := true
	if l.StateDir != "" {
		if err := unmountBeneath(l.StateDir); err != nil {
			unmounted = false
			errs = append(errs, err)
		}
	}
	if l.Bridge != "" {
		if _, err := net.InterfaceByName(l.Bridge); err == nil {
			errs = append(errs, run("ip", "link", "delete", l.Bridge))
		}
	}
	errs = append(errs, deleteTables(l.NFTables))
	if l.Address != "" && hasAddress("lo", l.Address) {
		errs = append(errs, run("ip", "addr", "delete", l.Address, "dev", "lo"))
	}
	keys := make([]string, 0, len(l.Sysctls))
	for k := range l.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		set, byNode := nodeSysctls[k]
		if now, err := readSysctl(k); err == nil && byNode && now == set && now != l.Sysctls[k] {
			errs = append(errs, writeSysctl(k, l.Sysctls[k]))
		}
	}
	// The shared directories first, while the node's own still names its sandboxes (libcni
	// names its cached results after them); the node's own last, and only once the shared
	// ones are clean, so that a retry can still tell what is the node's.
	sandboxes := l.sandboxIDs()
	shared := true
	for _, p := range l.CreatedPaths {
		if p == l.StateDir {
			continue
		}
		if err := l.removeCreated(p, sandboxes); err != nil {
			shared = false
			errs = append(errs, err)
		}
	}
	if slices.Contains(l.CreatedPaths, l.StateDir) && unmounted && shared {
		errs = append(errs, os.RemoveAll(l.StateDir)) // never through a mount left in place
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("devcluster: undoing the real node's changes (ledger %s kept): %w", nodeLedgerPath, err)
	}
	if err := os.Remove(nodeLedgerPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// removeCreated removes what the node put in p, a shared directory that did not exist before
// the node started (/run/containerd, /var/lib/cni, /var/log/containers, ...): sockets, links
// into the node's directories, files named for its network or one of its sandboxes, and the
// directories left empty — so that a system containerd or kubelet that started meanwhile
// keeps its files. What remains is reported.
func (l *nodeLedger) removeCreated(p string, sandboxes []string) error {
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	named := func(base string) bool {
		return strings.Contains(base, cniNetwork) || slices.ContainsFunc(sandboxes, func(id string) bool { return strings.Contains(base, id) })
	}
	var entries []string
	err := filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
		if err == nil {
			entries = append(entries, q)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Deepest first, so that directories are empty by the time they are reached.
	sort.Slice(entries, func(i, j int) bool { return len(entries[i]) > len(entries[j]) })
	var kept []string
	for _, q := range entries {
		fi, err := os.Lstat(q)
		if err != nil {
			continue
		}
		switch {
		case fi.IsDir():
			if os.Remove(q) != nil {
				kept = append(kept, q)
			}
		case fi.Mode()&os.ModeSocket != 0, named(filepath.Base(q)):
			_ = os.Remove(q)
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(q); err == nil && l.isOurs(target) {
				_ = os.Remove(q)
			} else {
				kept = append(kept, q)
			}
		default:
			kept = append(kept, q)
		}
	}
	if files := slices.DeleteFunc(kept, func(q string) bool { _, err := os.Lstat(q); return err != nil }); len(files) > 0 {
		return fmt.Errorf("%s: kept what the node did not make: %v", p, files)
	}
	return nil
}

// sandboxIDs lists the Pod sandboxes the node's containerd has a record of.
func (l *nodeLedger) sandboxIDs() []string {
	var ids []string
	for _, d := range []string{"state", "root"} {
		entries, _ := os.ReadDir(filepath.Join(l.StateDir, "containerd", d, "io.containerd.grpc.v1.cri", "sandboxes"))
		for _, e := range entries {
			if len(e.Name()) >= 12 && !slices.Contains(ids, e.Name()) {
				ids = append(ids, e.Name())
			}
		}
	}
	return ids
}

// isOurs reports whether path is beneath one of the node's directories.
func (l *nodeLedger) isOurs(path string) bool {
	for _, d := range []string{l.StateDir, l.LogDir} {
		if d != "" && (path == d || strings.HasPrefix(path, d+"/")) {
			return true
		}
	}
	return false
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func hasAddress(link, cidr string) bool {
	ifc, err := net.InterfaceByName(link)
	if err != nil {
		return false
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(addrs, func(a net.Addr) bool { return a.String() == cidr })
}

// killPrograms kills every process running one of the node's programs from binDir (by the
// exact path of its executable) and waits until they are gone.
func killPrograms(binDir string, names []string) error {
	if binDir == "" {
		return nil
	}
	programs := map[string]bool{}
	for _, name := range names {
		programs[filepath.Join(binDir, name)] = true
	}
	find := func() []int {
		var pids []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
			if err == nil && programs[strings.TrimSuffix(exe, " (deleted)")] {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	return killUntilGone("the node's programs in "+binDir, find)
}

// killUntilGone SIGKILLs what find returns until it returns nothing.
func killUntilGone(what string, find func() []int) error {
	deadline := time.Now().Add(sweepTimeout)
	for {
		pids := find()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still running after %s: %v", what, sweepTimeout, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupDirs lists root's directory in every hierarchy, with every cgroup beneath it,
// deepest first.
func cgroupDirs(root string) []string {
	hierarchies, _ := cgroupHierarchies()
	var dirs []string
	for _, h := range hierarchies {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	return dirs
}

// killCgroup kills every process in root's cgroups. The freezer holds them while they are
// signalled, so that none forks past the sweep (a fork bomb in a Pod, say).
func killCgroup(root string) error {
	freezer := filepath.Join(cgroupFS, "freezer", root, "freezer.state")
	frozen := os.WriteFile(freezer, []byte("FROZEN"), 0o644) == nil
	find := func() []int {
		seen := map[int]bool{}
		var pids []int
		for _, d := range cgroupDirs(root) {
			data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
		}
		return pids
	}
	for _, pid := range find() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if frozen {
		// Killed tasks die once thawed.
		_ = os.WriteFile(freezer, []byte("THAWED"), 0o644)
	}
	return killUntilGone("processes in cgroup "+root, find)
}

// removeCgroup removes root and its descendants from every hierarchy.
func removeCgroup(root string) error {
	var errs []error
	for _, d := range cgroupDirs(root) {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// createCgroup creates root in every hierarchy; cpuset's gets the machine's CPUs and memory
// nodes (a v1 cpuset cgroup starts with none).
func createCgroup(root string) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		d := filepath.Join(h, root)
		if err := os.Mkdir(d, 0o755); errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists, not by a real node of ours", d)
		} else if err != nil {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// unmountBeneath unmounts every mount at or beneath dir, deepest first, detaching those
// still busy; it repeats while mounts remain (a shared mount may have propagated copies).
func unmountBeneath(dir string) error {
	for range 10 {
		points, err := mountPoints()
		if err != nil {
			return err
		}
		var mine []string
		for _, p := range points {
			if p == dir || strings.HasPrefix(p, dir+"/") {
				mine = append(mine, p)
			}
		}
		if len(mine) == 0 {
			return nil
		}
		sort.Slice(mine, func(i, j int) bool { return len(mine[i]) > len(mine[j]) })
		for _, p := range mine {
			if err := unix.Unmount(p, 0); err != nil {
				_ = unix.Unmount(p, unix.MNT_DETACH)
			}
		}
	}
	return fmt.Errorf("mounts beneath %s remain", dir)
}

// deleteTables deletes those of tables ("family name") that exist.
func deleteTables(tables []string) error {
	if len(tables) == 0 {
		return nil
	}
	now, err := nftTables()
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tables {
		if slices.Contains(now, t) {
			errs = append(errs, run("nft", append([]string{"delete", "table"}, strings.Fields(t)...)...))
		}
	}
	return errors.Join(errs...)
}
