// Package csidriver is the local cluster's host-path CSI driver: volumes are directories on
// this machine, snapshots are copies of them, restores and clones copies back. It serves
// the CSI identity, controller and node services on one Unix socket and the kubelet's
// plugin registration on another (what node-driver-registrar does upstream), so the real
// node's kubelet mounts its volumes and the upstream sidecars (external-provisioner,
// csi-snapshotter) drive it. Neither csi-driver-host-path nor node-driver-registrar is served
// by the Go module proxy; this is the project's own, checked with csi-sanity.
//
// It is a test fixture, not a storage system:
//   - Capacity is recorded, not enforced (a directory has no size).
//   - A snapshot is a copy made while CreateSnapshot runs (cp -a, reflinks where the file
//     system has them): crash-consistent only when the writers are stopped for it, which is
//     what execplane's quiesce does. Its creation time is when the copy ended.
//   - Names are idempotent: the same request answers the same object; the same name with
//     other parameters is ALREADY_EXISTS. IDs are derived from names, so a crash between a
//     copy and the state's write repeats the copy rather than leaking it.
//   - Copies are made into a temporary directory and renamed into place: a crash never
//     leaves a half-copied volume or snapshot under its ID.
package csidriver
