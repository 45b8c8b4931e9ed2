// The requests the SDK builds for snapshots (no server: an interceptor answers every call
// before it leaves the client, behind the client's own retry loop).
import { test } from "node:test";
import assert from "node:assert/strict";
import { create, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Client, type Owner } from "../src/index.js";
import * as pb from "../src/gen/execution/v1/execution_pb.js";

const owner: Owner = { issuer: "https://idp.example", subject: "alice" };
const snap = { name: "before", state: pb.SnapshotState.READY, method: pb.SnapshotMethod.COPY, sizeBytes: 1n << 30n };

function fake(fail: string[] = []) {
  const seen: { method: string; message: any }[] = [];
  const interceptor: Interceptor = () => async (req) => {
    const method = req.method.name;
    seen.push({ method, message: req.message });
    const i = fail.indexOf(method);
    if (i >= 0) {
      fail.splice(i, 1);
      throw new ConnectError("connection reset", Code.Unavailable);
    }
    const reply = method === "ListSnapshots" ? { snapshots: [snap] } : { snapshot: snap };
    return { stream: false, service: req.service, method: req.method, header: new Headers(), trailer: new Headers(),
      message: create(req.method.output as DescMessage, reply as MessageInitShape<DescMessage>) } as any;
  };
  const c = new Client({ address: "gateway.invalid:8443", caFile: "/dev/null", certFile: "/dev/null", keyFile: "/dev/null",
    retry: { initialMs: 0, ceilingMs: 0 }, interceptors: [interceptor] });
  return { c, seen };
}

test("getSnapshot, listSnapshots and deleteSnapshot send the owner and name, one request per call", async () => {
  const { c, seen } = fake(["DeleteSnapshot"]);
  try {
    assert.equal((await c.getSnapshot(owner, "before")).name, "before");
    assert.deepEqual(seen[0].message, create(pb.GetSnapshotRequestSchema, { owner, name: "before" }));
    assert.equal((await c.listSnapshots(owner)).length, 1);
    assert.deepEqual(seen[1].message, create(pb.ListSnapshotsRequestSchema, { owner }));
    assert.equal((await c.deleteSnapshot(owner, "before")).state, pb.SnapshotState.READY);
    assert.equal(seen.length, 4);
    assert.equal(seen[2].message, seen[3].message); // the retry sends the same operation id
    assert.ok((seen[2].message as pb.DeleteSnapshotRequest).operationId);
  } finally {
    c.close();
  }
});
