// The requests the SDK builds for getUsage and listUsage (no server: an interceptor answers
// every call before it leaves the client, behind the client's own retry loop).
import { test } from "node:test";
import assert from "node:assert/strict";
import { create, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Client, type Owner } from "../src/index.js";
import * as pb from "../src/gen/execution/v1/execution_pb.js";

const owner: Owner = { issuer: "https://idp.example", subject: "alice" };
const start = new Date("2026-11-30T02:00:00+02:00"); // 00:00 UTC
const end = new Date("2026-12-01T00:00:00Z");

/** Answers each method with answer(request); the attempts fail names fail before an answer (UNAVAILABLE). */
function fake(answer: Record<string, (req: any) => unknown>, fail: string[] = []) {
  const seen: { method: string; message: any }[] = [];
  const interceptor: Interceptor = () => async (req) => {
    const method = req.method.name;
    const message = req.message as any;
    seen.push({ method, message });
    const key = method === "ListUsage" ? `${method}:${message.pageToken}` : method;
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

const record = (id: string, hour: number): MessageInitShape<typeof pb.UsageRecordSchema> => {
  const s = new Date(Date.UTC(2026, 10, 30, hour));
  return { environment: { id, revision: `r-${id}` }, window: { start: timestampFromDate(s), end: timestampFromDate(new Date(s.getTime() + 3_600_000)),
    usage: { commands: BigInt(hour) }, closed: true } };
};

test("getUsage sends the range and answers the ledger", async () => {
  const { c, seen } = fake({
    GetUsage: (r: pb.GetUsageRequest) => ({ environment: r.environment, bindingId: "conv-1", totals: { cpuNanoseconds: 1_500_000_000n, commands: 3n } }),
  }, ["GetUsage"]);
  try {
    const u = await c.getUsage("env-1", { revision: "7", start, end, granularity: "DAY" });
    assert.deepEqual([u.environment?.id, u.bindingId, u.totals?.commands], ["env-1", "conv-1", 3n]);
    assert.equal(seen.length, 2);
    assert.equal(seen[0].message, seen[1].message); // a read's retry sends the same request
    const req = seen[0].message as pb.GetUsageRequest;
    assert.deepEqual(req, create(pb.GetUsageRequestSchema, { environment: { id: "env-1", revision: "7" }, start: timestampFromDate(start),
      end: timestampFromDate(end), granularity: pb.UsageGranularity.DAY }));
    assert.equal(req.start?.seconds, BigInt(Date.UTC(2026, 10, 30) / 1000)); // UTC on the wire

    await c.getUsage("env-1");
    const plain = seen[2].message as pb.GetUsageRequest;
    assert.deepEqual([plain.environment?.revision, plain.start, plain.end, plain.granularity], ["", undefined, undefined, pb.UsageGranularity.UNSPECIFIED]);
  } finally {
    c.close();
  }
});

test("listUsage pages", async () => {
  const pages: Record<string, MessageInitShape<typeof pb.ListUsageResponseSchema>> = {
    "": { records: [record("env-a", 10), record("env-a", 11)], nextPageToken: "p2" },
    p2: { records: [record("env-b", 10)], nextPageToken: "p3" },
    p3: {}, // a last page may be empty
  };
  const { c, seen } = fake({ ListUsage: (r: pb.ListUsageRequest) => pages[r.pageToken] }, ["ListUsage:p2"]);
  try {
    const it = c.listUsage({ owner, bindingId: "conv-1", start, end, granularity: pb.UsageGranularity.HOUR, groupBy: "BINDING", pageSize: 2 });
    assert.equal(seen.length, 0); // nothing asked before the iteration starts
    const got: [string, bigint][] = [];
    for await (const r of it) got.push([r.environment?.id ?? "", r.window?.usage?.commands ?? -1n]);
    assert.deepEqual(got, [["env-a", 10n], ["env-a", 11n], ["env-b", 10n]]);

    const reqs = seen.map((s) => s.message as pb.ListUsageRequest);
    assert.deepEqual(reqs.map((r) => r.pageToken), ["", "p2", "p2", "p3"]);
    assert.equal(reqs[1], reqs[2]); // a page's retry sends the same request
    for (const r of reqs) {
      assert.deepEqual({ ...r, pageToken: "" }, create(pb.ListUsageRequestSchema, { owner, bindingId: "conv-1", start: timestampFromDate(start),
        end: timestampFromDate(end), granularity: pb.UsageGranularity.HOUR, groupBy: pb.UsageGroupBy.BINDING, pageSize: 2 }));
    }

    // Scopes: the client's own (no owner), an administrator's view of every client's.
    for await (const _ of c.listUsage({ allClients: true, groupBy: "CLIENT", granularity: "TOTAL" })) break;
    const all = seen[4].message as pb.ListUsageRequest;
    assert.deepEqual([all.owner, all.client, all.allClients, all.groupBy, all.granularity],
      [undefined, "", true, pb.UsageGroupBy.CLIENT, pb.UsageGranularity.TOTAL]);
    assert.equal(seen.length, 5); // the loop stopped at the first record: no second page
  } finally {
    c.close();
  }
});

test("getUsage and listUsage refuse bad arguments before any call", async () => {
  const { c, seen } = fake({});
  try {
    for (const o of [{ pageSize: 1001 }, { pageSize: -1 }, { pageSize: 1.5 }, { granularity: "WEEK" as any }, { granularity: 9 as pb.UsageGranularity },
      { groupBy: "TENANT" as any }, { groupBy: "UNSPECIFIED" as any }, { client: "spiffe://example.org/platform", allClients: true },
      { start: end, end: start }, { start: end, end }, { start: new Date(NaN) }]) {
      assert.throws(() => c.listUsage(o), RangeError, JSON.stringify(o));
    }
    await assert.rejects(c.getUsage("env-1", { granularity: "MONTH" as any }), RangeError);
    await assert.rejects(c.getUsage("env-1", { start: end, end: start }), RangeError);
    assert.equal(seen.length, 0);
  } finally {
    c.close();
  }
});
