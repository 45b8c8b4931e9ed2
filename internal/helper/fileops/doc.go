// Package fileops performs the helper's file operations, every one confined beneath the
// workspace root by the kernel.
//
// Invariants:
//   - Every path is resolved with openat2(2) and RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS
//     relative to a descriptor of the root, or with *at(2) calls on a single name relative
//     to a descriptor so resolved. No path is ever checked or joined as a string to decide
//     confinement. A kernel without openat2 is refused (OpenRoot fails): there is no
//     fallback to string checks.
//   - The root itself is opened with O_NOFOLLOW|O_DIRECTORY: a root replaced by a symlink
//     is refused.
//   - Objects are typed with fstat after opening, and opens use O_NONBLOCK: FIFOs, sockets
//     and devices are refused without blocking.
//   - Operations on a final name (stat, remove, rename, the target of a write) never follow
//     a symlink in that position: a symlink is removed, renamed or replaced, never written
//     through. Tree walks (remove -r, copy -r, glob, grep) never follow symlinks.
//   - Writes go to a temporary file in the target's directory, are fsynced and renamed over
//     the target: a failed write (over the cap, ENOSPC) leaves the old content intact, and a
//     hard link to a file elsewhere is replaced, never modified.
//   - Every operation is bounded: bytes by the request's limits under hard ceilings, entries
//     and depth of walks by named constants.
//   - Nothing the file API creates is beyond what it removes: a recursive remove is bounded
//     by entries only, counted whole before anything is removed, and reaches any depth with
//     at most maxDepth descriptors (remove.go).
//   - Errors carry a typed code (helper.v1 ErrorCode) and never file contents.
package fileops
