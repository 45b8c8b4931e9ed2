// Bounds every part of the SDK shares, and operation ids.
import { randomBytes } from "node:crypto";

/** Bounds one call that names no timeout of its own: the server's work is bounded by the profile. */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** Bounds Ensure's wait until the environment is Ready (a cold start on a real cluster). */
export const DEFAULT_READY_TIMEOUT_MS = 300_000;
/** The run claim's TTL bounds (the server's) and default. */
export const MIN_RUN_TTL_MS = 30_000;
export const MAX_RUN_TTL_MS = 300_000;
export const DEFAULT_RUN_TTL_MS = 60_000;
/**
 * A deadline's distance bounds (the server's): a second is the controller's resolution in
 * practice; a year is the longest time limit a profile may set.
 */
export const MIN_DEADLINE_MS = 1_000;
export const MAX_DEADLINE_MS = 8760 * 3_600_000;
/** ListEnvironments' page bound (the server's): a page with its metadata stays within one gRPC message. */
export const MAX_PAGE_SIZE = 500;
/** ListUsage's page bound (the server's): a record is some 150 bytes on the wire. */
export const MAX_USAGE_PAGE_SIZE = 1000;
// WaitReady's long poll and the margin kept before the caller's deadline.
export const readyLongPollMs = 20_000;
export const readyMarginMs = 250;
// A foreground command's call lasts its timeout plus this grace; with no timeout, the
// profile's maximum (at most an hour).
export const commandGraceMs = 15_000;
export const commandMaxMs = 3_600_000;
export const releaseTimeoutMs = 10_000;

/** A fresh operation id: 128 random bits, so that two logical calls never share one. */
export function newOperationId(): string {
  return "sdk-" + randomBytes(16).toString("hex");
}
