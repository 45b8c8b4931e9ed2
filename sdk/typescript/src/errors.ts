// The execplane API's answers that are not success: one error class carrying the gRPC code,
// the API's reason, the server's retryable flag, the request id and the rest of the
// ErrorInfo's metadata, with the Go SDK's classes as predicates (isVersionMismatch,
// isConflict, isQuotaExceeded, ...).
import { Code, ConnectError } from "@connectrpc/connect";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

// The ErrorInfo the gateway attaches to every refusal (pkg/apierror).
const errorInfoType = "google.rpc.ErrorInfo";
const domain = "execplane.dev";
const requestIdHeader = "x-request-id";

/** An answer of the execplane API that is not success. */
export class ExecplaneError extends Error {
  override readonly name = "ExecplaneError";
  constructor(
    /** The gRPC status code. */
    readonly code: Code,
    /** The machine-readable reason ("VERSION_MISMATCH", "STALE_EPOCH", ...); "" for a transport failure. */
    readonly reason: string,
    /** The server's message. */
    readonly rawMessage: string,
    /** The server's statement that nothing was done and the same call may succeed later. */
    readonly retryable = false,
    /** The gateway's request id, for the operator's logs. */
    readonly requestId = "",
    /**
     * What the answer says beside its reason (the ErrorInfo's metadata without "retryable"):
     * for QUOTA_EXCEEDED the quota ("quota"), its scope ("scope": "client" or "owner"),
     * "limit" and "used" (decimal strings). Empty when the answer carried none.
     */
    readonly metadata: ReadonlyMap<string, string> = new Map(),
  ) {
    super(describe(code, reason, rawMessage, requestId));
  }
}

function describe(code: Code, reason: string, message: string, requestId: string): string {
  let s = `execplane: ${Code[code] ?? code}`;
  if (reason) s += "/" + reason;
  if (message) s += ": " + message;
  if (requestId) s += ` (request ${requestId})`;
  return s;
}

/** Reads a failed call: its code, the ErrorInfo the gateway attached, the request id. */
export function fromConnectError(err: unknown): unknown {
  if (err instanceof ExecplaneError || !(err instanceof ConnectError)) return err;
  let reason = "";
  let retryable = false;
  let metadata = new Map<string, string>();
  for (const d of err.details) {
    if ("type" in d && d.type === errorInfoType) {
      const info = decodeErrorInfo(d.value);
      if (info && info.domain === domain) {
        reason = info.reason;
        retryable = info.metadata.get("retryable") === "true";
        metadata = info.metadata;
        metadata.delete("retryable");
      }
    }
  }
  return new ExecplaneError(err.code, reason, err.rawMessage, retryable, err.metadata.get(requestIdHeader) ?? "", metadata);
}

// decodeErrorInfo reads google.rpc.ErrorInfo's wire form: reason = 1, domain = 2,
// metadata = 3 (map<string, string>: entries with key = 1, value = 2).
function decodeErrorInfo(bytes: Uint8Array): { reason: string; domain: string; metadata: Map<string, string> } | undefined {
  try {
    const r = new BinaryReader(bytes);
    const out = { reason: "", domain: "", metadata: new Map<string, string>() };
    while (r.pos < r.len) {
      const [field, wire] = r.tag();
      if (field === 1 && wire === WireType.LengthDelimited) out.reason = r.string();
      else if (field === 2 && wire === WireType.LengthDelimited) out.domain = r.string();
      else if (field === 3 && wire === WireType.LengthDelimited) {
        const entry = new BinaryReader(r.bytes());
        let key = "";
        let value = "";
        while (entry.pos < entry.len) {
          const [f, w] = entry.tag();
          if (f === 1 && w === WireType.LengthDelimited) key = entry.string();
          else if (f === 2 && w === WireType.LengthDelimited) value = entry.string();
          else entry.skip(w);
        }
        out.metadata.set(key, value);
      } else r.skip(wire);
    }
    return out;
  } catch {
    return undefined;
  }
}

const is = (code: Code, reason?: string) => (err: unknown): err is ExecplaneError =>
  err instanceof ExecplaneError && err.code === code && (reason === undefined || err.reason === reason);

// The Go SDK's classes: the coarse ones follow the gRPC code, the fine ones the reason too.
export const isInvalidArgument = is(Code.InvalidArgument);
export const isUnauthenticated = is(Code.Unauthenticated);
export const isGrantInvalid = is(Code.Unauthenticated, "GRANT_INVALID");
export const isPermissionDenied = is(Code.PermissionDenied);
export const isPathEscape = is(Code.PermissionDenied, "PATH_ESCAPE");
/** Absent, or not yours: the two are indistinguishable by design. */
export const isNotFound = is(Code.NotFound);
export const isAlreadyExists = is(Code.AlreadyExists);
/** Any ABORTED answer: a compare-and-swap lost, a stale epoch, a revoked grant, ... */
export const isConflict = is(Code.Aborted);
export const isStaleEpoch = is(Code.Aborted, "STALE_EPOCH");
export const isRevoked = is(Code.Aborted, "REVOKED");
export const isVersionMismatch = is(Code.Aborted, "VERSION_MISMATCH");
export const isRunClaimHeld = is(Code.Aborted, "RUN_CLAIM_HELD");
export const isOperationIdReused = is(Code.Aborted, "OPERATION_ID_REUSED");
export const isFenced = is(Code.FailedPrecondition, "FENCED");
export const isNotReady = is(Code.FailedPrecondition, "NOT_READY");
export const isWrongType = is(Code.FailedPrecondition, "WRONG_TYPE");
export const isExhausted = is(Code.ResourceExhausted);
/**
 * An operator's quota of the client or the owner (QUOTA_EXCEEDED; also isExhausted): the same
 * call fails again until the use falls, so it is not retried. `metadata` names it: "quota"
 * ("environments", "readyEnvironments", "storage", "detachedCommands", "cpuCoreHours",
 * "memoryGiBHours", ...), "scope" ("client" or "owner"), "limit" and "used" (decimal strings).
 */
export const isQuotaExceeded = is(Code.ResourceExhausted, "QUOTA_EXCEEDED");
/** A durable command's record is not its supervisor's (altered or planted by the workload). */
export const isRecordUnverified = is(Code.DataLoss, "RECORD_UNVERIFIED");
export const isUnavailable = is(Code.Unavailable);
/** The call broke after it was sent: a write may have landed, a command may have run. Never retried. */
export const isOutcomeUnknown = (err: unknown): err is ExecplaneError => err instanceof ExecplaneError && err.reason === "OUTCOME_UNKNOWN";
