// The requests the SDK builds for ensure's metadata and deadline, setDeadline and
// listEnvironments (no server: an interceptor answers every call before it leaves the client,
// behind the client's own retry loop).
import { test } from "node:test";
import assert from "node:assert/strict";
import { create, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Client, type Owner } from "../src/index.js";
import * as pb from "../src/gen/execution/v1/execution_pb.js";

const owner: Owner = { issuer: "https://idp.example", subject: "alice" };
const ref = { id: "env-1", revision: "7" };

/** Answers each method with answer(request); the attempts fail names fail before an answer (UNAVAILABLE). */
function fake(answer: Record<string, (req: any) => unknown>, fail: string[] = []) {
  const seen: { method: string; message: any }[] = [];
  const interceptor: Interceptor = () => async (req) => {
    const method = req.method.name;
    const message = req.message as any;
    seen.push({ method, message });
    const key = method === "ListEnvironments" ? `${method}:${message.pageToken}` : method;
    const i = fail.indexOf(key);
    if (i >= 0) {
      fail.splice(i, 1);
      throw new ConnectError("connection reset", Code.Unavailable);
    }
    const reply = answer[method];
    if (!reply) throw new ConnectError(`unexpected ${method}`, Code.Unimplemented);
    return { stream: false, service: req.service, method: req.method, header: new Headers(), trailer: new Headers(),
      message: create(req.method.output as DescMessage, reply(message) as MessageInitShape<DescMessage>) } as any;
  };
  // The PEM files are read, never used: no call leaves the interceptor.
  const c = new Client({ address: "gateway.invalid:8443", caFile: "/dev/null", certFile: "/dev/null", keyFile: "/dev/null",
    retry: { initialMs: 0, ceilingMs: 0 }, interceptors: [interceptor] });
  return { c, seen };
}

const ready = (extra: MessageInitShape<typeof pb.EnvironmentSchema> = {}) =>
  ({ ref, lifecycle: pb.LifecycleState.READY, ready: true, ...extra });

test("ensure sends metadata and a deadline", async () => {
  const { c, seen } = fake({
    EnsureEnvironment: (r: pb.EnsureEnvironmentRequest) => ({
      created: true, environment: ready({ metadata: r.metadata, references: [{ bindingId: r.bindingId, state: pb.ReferenceState.PUBLISHED }] }),
    }),
  }, ["EnsureEnvironment"]);
  try {
    const env = await c.ensure(owner, "conv-1", "sandbox", { metadata: { team: "search" }, deadline: { afterMs: 7_200_000, action: "SUSPEND" } });
    assert.equal(seen.length, 2);
    assert.equal(seen[0].message, seen[1].message); // the retry sends the same request: the same operation id
    const req = seen[0].message as pb.EnsureEnvironmentRequest;
    assert.deepEqual([req.bindingId, req.profile, req.metadata], ["conv-1", "sandbox", { team: "search" }]);
    assert.deepEqual(req.deadline, create(pb.DeadlineSchema, { after: durationFromMs(7_200_000), action: pb.DeadlineAction.SUSPEND }));
    assert.deepEqual(env.status.metadata, { team: "search" });

    await c.ensure(owner, "conv-1", "sandbox");
    const plain = seen[2].message as pb.EnsureEnvironmentRequest;
    assert.deepEqual([plain.metadata, plain.deadline], [{}, undefined]);
  } finally {
    c.close();
  }
});

test("ensure refuses a deadline out of bounds before any call", async () => {
  const { c, seen } = fake({});
  try {
    for (const deadline of [{ afterMs: 999, action: "DELETE" }, { afterMs: 8760 * 3_600_000 + 1, action: "DELETE" }, { afterMs: NaN, action: "DELETE" },
      { afterMs: 60_000, action: "delete" }] as const) {
      await assert.rejects(c.ensure(owner, "conv-1", "sandbox", { deadline: deadline as any }), RangeError);
    }
    assert.equal(seen.length, 0);
  } finally {
    c.close();
  }
});

test("setDeadline sets, moves and clears", async () => {
  const { c, seen } = fake({
    EnsureEnvironment: () => ({ environment: ready({ references: [{ bindingId: "conv-1", state: pb.ReferenceState.PUBLISHED }] }) }),
    SetEnvironmentDeadline: (r: pb.SetEnvironmentDeadlineRequest) => ({
      environment: ready({ deadline: r.deadline ? { seconds: 1_000_000n } : undefined, deadlineAction: r.deadline?.action }),
    }),
  }, ["SetEnvironmentDeadline"]);
  try {
    const env = await c.ensure(owner, "conv-1", "sandbox");
    await env.setDeadline({ afterMs: 1_500, action: "DELETE" });
    const [first, retry] = seen.slice(1);
    assert.deepEqual(first.message, retry.message); // the same operation id: the server counts from the first attempt
    const req = first.message as pb.SetEnvironmentDeadlineRequest;
    assert.ok(req.operationId.startsWith("sdk-"));
    assert.deepEqual([req.target?.bindingId, req.target?.environment?.id, req.target?.owner?.subject], ["conv-1", "env-1", "alice"]);
    assert.deepEqual(req.deadline, create(pb.DeadlineSchema, { after: durationFromMs(1_500), action: pb.DeadlineAction.DELETE }));
    assert.equal(env.status.deadlineAction, pb.DeadlineAction.DELETE);

    await env.setDeadline(null);
    const cleared = seen[3].message as pb.SetEnvironmentDeadlineRequest;
    assert.equal(cleared.deadline, undefined);
    assert.notEqual(cleared.operationId, req.operationId);
    assert.equal(env.status.deadline, undefined);

    await assert.rejects(env.setDeadline({ afterMs: 0, action: "SUSPEND" }), RangeError);
    assert.equal(seen.length, 4);
  } finally {
    c.close();
  }
});

test("listEnvironments pages", async () => {
  const envs = (...ids: string[]) => ids.map((id) => ({ ref: { id, revision: "1" } }));
  const pages: Record<string, MessageInitShape<typeof pb.ListEnvironmentsResponseSchema>> = {
    "": { environments: envs("env-a", "env-b"), nextPageToken: "p2" },
    p2: { environments: envs("env-c"), nextPageToken: "p3" },
    p3: {}, // a last page may be empty
  };
  const { c, seen } = fake({ ListEnvironments: (r: pb.ListEnvironmentsRequest) => pages[r.pageToken] }, ["ListEnvironments:p2"]);
  try {
    const it = c.listEnvironments(owner, { bindingId: "conv-1", lifecycle: ["READY", pb.LifecycleState.SUSPENDED], metadata: { team: "search" }, pageSize: 2 });
    assert.equal(seen.length, 0); // nothing asked before the iteration starts
    const ids: string[] = [];
    for await (const e of it) ids.push(e.ref?.id ?? "");
    assert.deepEqual(ids, ["env-a", "env-b", "env-c"]);

    const reqs = seen.map((s) => s.message as pb.ListEnvironmentsRequest);
    assert.deepEqual(reqs.map((r) => r.pageToken), ["", "p2", "p2", "p3"]);
    assert.equal(reqs[1], reqs[2]); // a page's retry sends the same request
    for (const r of reqs) {
      assert.deepEqual([r.owner?.issuer, r.owner?.subject, r.bindingId, r.lifecycle, r.metadata, r.pageSize],
        [owner.issuer, owner.subject, "conv-1", [pb.LifecycleState.READY, pb.LifecycleState.SUSPENDED], { team: "search" }, 2]);
    }
  } finally {
    c.close();
  }
});

test("listEnvironments fetches a page when reached", async () => {
  const { c, seen } = fake({
    ListEnvironments: (r: pb.ListEnvironmentsRequest) =>
      r.pageToken === "" ? { environments: [{ ref: { id: "env-a" } }], nextPageToken: "p2" } : { environments: [{ ref: { id: "env-b" } }] },
  });
  try {
    for await (const e of c.listEnvironments(owner)) {
      assert.equal(e.ref?.id, "env-a");
      break;
    }
    assert.equal(seen.length, 1); // the second page is never asked for
  } finally {
    c.close();
  }
});

test("listEnvironments refuses bad arguments at the call", () => {
  const { c, seen } = fake({});
  try {
    assert.throws(() => c.listEnvironments(owner, { pageSize: 501 }), RangeError);
    assert.throws(() => c.listEnvironments(owner, { pageSize: -1 }), RangeError);
    assert.throws(() => c.listEnvironments(owner, { lifecycle: ["RUNNING" as any] }), RangeError);
    assert.throws(() => c.listEnvironments(owner, { lifecycle: [99 as pb.LifecycleState] }), RangeError);
    assert.equal(seen.length, 0);
  } finally {
    c.close();
  }
});
