// Package devcluster runs a real Kubernetes control plane on a bare machine for tests and
// the demo: etcd, kube-apiserver (RBAC on), kube-controller-manager and kube-scheduler built
// from the Go module proxy at pinned versions, KWOK managing fake Nodes, Pod lifecycle and
// PVC binding, and a node exec endpoint (NodeExec) built on the kubelet's own streaming
// library so that pods/exec runs real processes on this machine — and, on request, a real
// node (containerd, runc and a kubelet) on which Pods run as real containers (node.go).
//
// Invariants:
//   - Every process listens on loopback only, on ports chosen free at start — but, with a
//     real node, the API server and the kubelet listen on the node's address (on lo, routed
//     nowhere), which the node's Pods reach through their bridge.
//   - Stop kills exactly the processes Start started (by their own PIDs and process groups),
//     also when a test fails or is interrupted; nothing is left running.
//   - The PVC-backed directories the exec endpoint maps are keyed by the bound
//     PersistentVolume, so a replacement Pod on the same claim sees the same files; other
//     volumes are per Pod.
//   - One real node per machine (a lock); every change it makes to the machine is recorded
//     in a ledger before it is made, undone by Stop, and undone by the next start after a
//     crash; Stop fails when the machine differs from its snapshot at start.
//   - Nothing is downloaded: binaries come from hack/build-cluster-bins.sh (cached by version)
//     and PKI is generated in-process with crypto/x509.
package devcluster
