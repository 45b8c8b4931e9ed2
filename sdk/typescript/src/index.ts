// execplane: durable, isolated workspaces on Kubernetes — the TypeScript SDK. The rules are
// the Go SDK's (docs/sdks.md): operation ids kept across retries, only what the server marks
// retryable retried, OUTCOME_UNKNOWN never retried, the run claim renewed and released, the
// API's reasons on every error.
export { Client, type ClientOptions, type EnsureOptions, type LifecycleName, type ListOptions, type Owner } from "./client.js";
export { Environment, withRun, type Deadline } from "./environment.js";
export { type ListUsageOptions, type UsageGranularityName, type UsageGroupByName, type UsageOptions } from "./usage.js";
export { Run, type FileInfo, type CommandResult, type CommandInfo, type CommandOptions } from "./run.js";
export { newOperationId, DEFAULT_TIMEOUT_MS, DEFAULT_READY_TIMEOUT_MS, MIN_RUN_TTL_MS, MAX_RUN_TTL_MS, DEFAULT_RUN_TTL_MS,
  MIN_DEADLINE_MS, MAX_DEADLINE_MS, MAX_PAGE_SIZE, MAX_USAGE_PAGE_SIZE } from "./limits.js";
export * from "./errors.js";
export { Safety, type RetryPolicy } from "./retry.js";
