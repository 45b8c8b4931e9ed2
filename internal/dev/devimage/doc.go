// Package devimage builds the local stack's container images in Go, with
// go-containerregistry: the pause image of the real node's Pod sandboxes, the helper image
// (the helper alone, as deploy/images/Dockerfile's "helper" target) and an example executor
// image (a static busybox userland with the helper baked in). They are written as one
// docker-archive tarball that containerd imports: no registry, no container runtime and no
// Docker needed to build them.
//
// Invariants:
//   - Builds are reproducible: every timestamp is zero and entries are sorted, so the same
//     inputs give the same digests.
//   - The images run as the executor Pod requires: a non-root user (65532, the pause image
//     65535), nothing writable needed in the image (the workspace and /tmp are mounted), the
//     helper at HelperPath with mode 0555.
package devimage
