// Package devcmd is execplane-dev, the command-line tool of the local development stack:
// `up`, `down`, `status` and `serve` run the stack of make demo (internal/dev/devstack),
// `demo` walks a real client through a session on it, `bundle` writes a development security
// bundle (internal/dev/devbundle), `host` reads what the local cluster's real node changes
// on this machine (internal/dev/devcluster) and `images` builds (and pushes) the product
// images in Go (internal/dev/devimage; make images).
//
// It stands apart from execctl, the caller's CLI, so that what callers and operators install
// links nothing of the development rooms (test/layout checks that cmd/execctl reaches nothing
// under internal/dev).
//
// Invariants:
//   - `up` re-executes this binary (os.Executable) as the stack's detached daemon, with the
//     flags it was given and `--state-dir DIR serve` last: Run hands arguments that begin with
//     flags to devstack unchanged, so the daemon's command line is one `down` recognises.
//   - Nothing here is for production: `bundle` writes the CA's key beside the certificates.
package devcmd
