// Package mcpserver gives an agent one binding's workspace as Model Context Protocol tools
// (`execctl mcp`): the environment ensured or attached, then files read, written (with
// compare-and-swap), listed, searched, removed and renamed, and commands run — streamed as
// progress notifications, or detached and polled.
//
// Invariants:
//   - Every tool goes through the Go SDK (pkg/client), so an agent gets what a careful
//     caller does: operation ids kept across the retries the server marks retryable, an
//     OUTCOME_UNKNOWN never retried, the run claim renewed in the background.
//   - The run claim is taken on the first tool that needs it and released when the server
//     ends. One that was lost (another holder fenced it, or it expired) is never taken back
//     silently — that would fence the other holder in turn —: tools answer the loss until
//     the agent calls ensure_environment, which takes it again on purpose.
//   - A refusal is a tool error (isError) whose text starts with the API's reason
//     (`VERSION_MISMATCH: …`), never a protocol error: the agent reads it and decides.
//   - File contents never reach a log.
package mcpserver
