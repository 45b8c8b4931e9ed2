// Package spool keeps durable commands' output and records on the workspace volume
// (docs/commands.md).
//
// Invariants:
//   - Everything lives beneath <root>/.execplane/commands, opened by the kernel with no
//     symbolic link followed anywhere on the way (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS):
//     a workload that plants a link there breaks only its own records.
//   - A stream is a sequence of append-only segments named by the offset of their first
//     byte. Per stream at most the cap plus two segments is kept — the first half of the cap
//     (head) and the last half (tail) — however much the command writes; the total counts
//     every byte.
//   - A record is replaced whole (a temporary file, fsync, rename): a reader sees the old or
//     the new one, never a torn one.
//   - Nothing read back is trusted: names must parse, sizes are bounded before reading, and
//     records are decoded strictly under a cap. The workload can write here like anywhere
//     in its workspace.
package spool
