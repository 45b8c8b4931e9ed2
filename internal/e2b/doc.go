// Package e2b is the E2B front end: E2B's control REST API and its sandbox daemon's (envd's)
// Connect and HTTP protocol, served over execplane's public API so that the unmodified E2B
// SDK runs against execplane (docs/e2b.md).
//
// Invariants:
//   - It is a client of the public API (pkg/client) with its own client identity, like any
//     platform: it holds no Kubernetes credential, and every call is authorised as a direct
//     call of that client for the API key's owner.
//   - A sandbox is the environment of (the key's owner, binding = the sandbox id, minted at
//     create): another key's sandbox is another owner's binding, not found.
//   - Stateless: every replica rebuilds what it caches (attached environments, the shared
//     run, profile limits) from the API. The replicas of one sandbox share one run claim,
//     acquired under an operation id derived from the epoch, instead of fencing each other.
//   - Processes are durable commands "e2b-<pid>": found again by any replica, after a broken
//     stream or a restart.
//   - API keys are stored as SHA-256 hashes; keys, access tokens and file contents are never
//     logged. A refusal changes nothing: uploads are checked whole before the first write.
package e2b
