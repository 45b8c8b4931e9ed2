// Reading a refusal: the ErrorInfo the gateway attaches, decoded into the error's reason,
// retryable flag and metadata (no server: the ErrorInfo's bytes are built here as the
// gateway's grpc-go encodes them, and an interceptor refuses every call before it leaves the
// client, behind the client's own retry loop).
import { test } from "node:test";
import assert from "node:assert/strict";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Client, ExecplaneError, fromConnectError, isExhausted, isQuotaExceeded, type Owner } from "../src/index.js";

/** google.rpc.ErrorInfo's wire form: reason = 1, domain = 2, metadata = 3 (key = 1, value = 2). */
function errorInfo(reason: string, metadata: Record<string, string>, domain = "execplane.dev"): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, WireType.LengthDelimited).string(reason);
  w.tag(2, WireType.LengthDelimited).string(domain);
  for (const [k, v] of Object.entries(metadata)) {
    w.tag(3, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).string(k).tag(2, WireType.LengthDelimited).string(v).join();
  }
  return w.finish();
}

/** A refusal as the transport reads it: the ErrorInfo an incoming detail, the request id a trailer. */
function refusal(code: Code, message: string, reason: string, metadata: Record<string, string>): ConnectError {
  const err = new ConnectError(message, code, { "x-request-id": "r-1" });
  err.details.push({ type: "google.rpc.ErrorInfo", value: errorInfo(reason, metadata) });
  return err;
}

const quota = { retryable: "false", quota: "readyEnvironments", scope: "owner", limit: "2", used: "2" };

test("a quota refusal is QUOTA_EXCEEDED with its metadata", () => {
  const err = fromConnectError(refusal(Code.ResourceExhausted, "the owner quota readyEnvironments (limit 2, in use 2)", "QUOTA_EXCEEDED", quota));
  assert.ok(err instanceof ExecplaneError);
  assert.ok(isQuotaExceeded(err) && isExhausted(err));
  assert.deepEqual([err.code, err.reason, err.retryable, err.requestId], [Code.ResourceExhausted, "QUOTA_EXCEEDED", false, "r-1"]);
  // "retryable" is the flag, not metadata.
  assert.deepEqual(Object.fromEntries(err.metadata), { quota: "readyEnvironments", scope: "owner", limit: "2", used: "2" });

  // Another reason under the same code is exhausted, not a quota; metadata is empty without any.
  const limit = fromConnectError(refusal(Code.ResourceExhausted, "slow down", "LIMIT_EXCEEDED", { retryable: "true" }));
  assert.ok(limit instanceof ExecplaneError && isExhausted(limit) && limit.retryable);
  assert.equal(isQuotaExceeded(limit), false);
  assert.equal(limit.metadata.size, 0);
  // The constructor without the new parameter still works: empty metadata.
  assert.equal(new ExecplaneError(Code.ResourceExhausted, "QUOTA_EXCEEDED", "x").metadata.size, 0);
});

test("a quota refusal is not retried", async () => {
  let attempts = 0;
  const interceptor: Interceptor = () => async () => {
    attempts++;
    throw refusal(Code.ResourceExhausted, "quota", "QUOTA_EXCEEDED", quota);
  };
  // The PEM files are read, never used: no call leaves the interceptor.
  const c = new Client({ address: "gateway.invalid:8443", caFile: "/dev/null", certFile: "/dev/null", keyFile: "/dev/null",
    retry: { initialMs: 0, ceilingMs: 0 }, interceptors: [interceptor] });
  const owner: Owner = { issuer: "https://idp.example", subject: "alice" };
  try {
    await assert.rejects(c.ensure(owner, "conv-1", "sandbox"), (err: unknown) =>
      isQuotaExceeded(err) && err.metadata.get("quota") === "readyEnvironments" && err.metadata.get("scope") === "owner");
    assert.equal(attempts, 1);
  } finally {
    c.close();
  }
});
