// The E2B SDK's side of bench/e2b (make bench-e2b): it reads one operation per line on
// stdin, does it through the unmodified SDK against the front end in E2B_API_URL and
// E2B_SANDBOX_URL, and answers one JSON line with the operation's duration, so that the Go
// side alternates its own samples with these.
//
//   connect <id>    use that sandbox for the operations below (untimed)
//   echo            commands.run('echo hi')
//   write           files.write of 1 MiB
//   read            files.read of that 1 MiB as bytes
//   create <tpl>    Sandbox.create(tpl); the answer carries its id (the Go side kills it)
import { createInterface } from "node:readline";
import { Sandbox } from "e2b";

const payload = new Uint8Array(1 << 20);
for (let i = 0; i < payload.length; i++) payload[i] = (i * 7919) & 0xff;

let sbx;
const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const [op, arg] = line.trim().split(" ");
  let ms = 0;
  let id;
  try {
    const t0 = performance.now();
    switch (op) {
      case "connect":
        sbx = await Sandbox.connect(arg);
        break;
      case "echo": {
        const r = await sbx.commands.run("echo hi");
        ms = performance.now() - t0;
        if (r.stdout !== "hi\n") throw new Error(`echo answered ${JSON.stringify(r.stdout)}`);
        break;
      }
      case "write":
        await sbx.files.write("bench-1m", payload.buffer);
        ms = performance.now() - t0;
        break;
      case "read": {
        const b = await sbx.files.read("bench-1m", { format: "bytes" });
        ms = performance.now() - t0;
        if (b.length !== payload.length || b[12345] !== payload[12345]) throw new Error(`read ${b.length} bytes, not the ones written`);
        break;
      }
      case "create": {
        const s = await Sandbox.create(arg);
        ms = performance.now() - t0;
        id = s.sandboxId;
        break;
      }
      default:
        throw new Error(`unknown operation ${op}`);
    }
    console.log(JSON.stringify({ op, ms, id }));
  } catch (e) {
    console.log(JSON.stringify({ op, error: String(e?.stack ?? e) }));
  }
}
