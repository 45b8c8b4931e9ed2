// Package debroot builds a container image's root filesystem from Debian packages, in Go:
// it unpacks .deb files (an ar archive holding control.tar and data.tar) into one layer laid
// out as a merged-/usr Debian bookworm root, and then does, explicitly, what of the
// packages' maintainer scripts matters when the root runs as a container — alternatives
// links, the CA bundle, the users, the home (effects.go). The executor image of the local
// stack is built from the packages hack/executor-debs.lock pins (LockPath, Fetched).
//
// Invariants:
//   - Nothing of the packages runs: no maintainer script, no trigger (no ldconfig, no byte
//     compiling), no program. What the root needs of them is written out in effects.go.
//   - Builds are reproducible: the same .debs, in any order, and the same Options give the
//     same layer digest — entries sorted, owned by root, every time Options.Epoch.
//   - Two packages may not ship different things at one path; a relative link that a move
//     into /usr would repoint is refused; nothing is written beneath a link.
//   - The root suits the executor Pod: it runs as UID:GID with a read-only root; HOME
//     (Home) links to Workspace, the writable mount; /tmp is a mount point (1777).
package debroot
