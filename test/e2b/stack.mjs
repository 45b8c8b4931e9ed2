// The unmodified E2B SDK against the stack `make demo` starts (test/demo's TestDemoStack,
// with the variables of the stack's e2b.env and E2B_NODE, the node kind). On the real node
// the executor is the Debian image (bash, python3), which links /home/user, where E2B
// programs keep their files, to the workspace: absolute paths written by the file API are
// the ones commands read, and the other way round. On the fake nodes commands run in the
// workspace on this machine.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "e2b";

const node = process.env.E2B_NODE;

test("an E2B program on the make demo stack", { timeout: 180_000 }, async () => {
  const sbx = await Sandbox.create({ metadata: { from: "stack-test" } });
  try {
    assert.equal((await sbx.commands.run("echo hi")).stdout, "hi\n");
    await sbx.files.write("/home/user/from-sdk.txt", "written by files.write");
    if (node === "real") {
      const where = await sbx.commands.run("cd /home/user && pwd -P; id -u");
      assert.deepEqual(where.stdout.trim().split("\n"), ["/workspace", "65532"]);
      assert.equal((await sbx.commands.run("cat /home/user/from-sdk.txt")).stdout, "written by files.write");
      const py = await sbx.commands.run(`python3 -c 'open("/home/user/py.txt", "w").write("written by python3")'`);
      assert.equal(py.exitCode, 0);
      assert.equal(await sbx.files.read("/home/user/py.txt"), "written by python3");
      assert.equal(await sbx.files.read("py.txt"), "written by python3");
      const tmp = await sbx.commands.run("echo scratch > /tmp/x && cat /tmp/x");
      assert.equal(tmp.stdout, "scratch\n");
    } else {
      assert.equal((await sbx.commands.run("cat from-sdk.txt")).stdout, "written by files.write");
    }
  } finally {
    await sbx.kill();
  }
});
