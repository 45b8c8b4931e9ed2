// Package devimage builds execplane's container images in Go, with go-containerregistry: no
// registry, no container runtime and no Docker needed.
//
// Two sets. The local stack's images — the pause image of the real node's Pod sandboxes, the
// helper image (the helper alone, as deploy/images/Dockerfile's "helper" target) and an
// example executor image (a static busybox userland, then the helper) — are written as one
// docker-archive tarball that containerd imports (WriteStack). The product images of a
// release — gateway, controller, helper, executor and e2b, as Specs describes them — are
// built from static programs for one or more platforms (BuildRelease), written as OCI image
// layouts (WriteLayouts) and pushed (Push): `make images`, `make images-push`.
//
// Invariants:
//   - Builds are reproducible: layer entries are sorted, owned by root (or the non-root user
//     where it must own them), and every file time, history entry and configuration time is
//     one instant — zero in the local stack's images, the commit's time in a release's — so
//     the same inputs give the same digests. ggcr's gzip (compress/gzip at a fixed level,
//     no header time or name) is deterministic for a given Go release, which the Makefile
//     pins.
//   - The images run as the executor Pod and the chart require: a non-root user (65532, the
//     pause image 65535), nothing writable needed in the image (the workspace and /tmp are
//     mounted), the helper at HelperPath, execute-only (0111) in an executor image and 0555
//     in the helper image (HelperExecMode, HelperInstallMode).
//   - The product images and deploy/images/Dockerfile's targets have the same shape: base,
//     program path and mode, user, working directory, ports, entrypoint (a test compares
//     them). An executor image's userland is a parameter (Userland); only its Env is kept.
//   - One family of media types per image: Docker's in the docker-archive (which stores no
//     manifest), OCI's in a release.
package devimage
