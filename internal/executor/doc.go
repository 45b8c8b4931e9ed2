// Package executor builds, as pure functions of (environment, profile), the two objects that
// make up a workspace: the retained PersistentVolumeClaim and the executor Pod.
//
// Invariants:
//   - Names are deterministic: the claim is <environment>-workspace; the Pod is
//     <environment>-x<ordinal>, the ordinal rising with each replacement so a new Pod never
//     collides with an old one still held by its finalizer.
//   - The Pod is controlled by the ExecutionEnvironment (owner reference, controller=true);
//     the claim has NO owner reference, so deleting the resource can never delete a workspace.
//   - The Pod carries the termination-proof finalizer, so its terminal state can be observed
//     and recorded before it disappears.
//   - The Pod passes Pod Security "restricted" and more: non-root with a fixed UID, no
//     privilege escalation, all capabilities dropped, seccomp RuntimeDefault, read-only root
//     filesystem, no service-account token, no service links, restartPolicy Never; the only
//     writable places are /workspace (the claim) and a size-limited /tmp.
//   - The container's process is the helper in pause mode: no listener, no credentials.
package executor
