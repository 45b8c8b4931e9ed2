// Two halves of a program around a gateway restart (test/integration's
// TestE2BProcessesOutliveAGatewayRestart): "start" creates a sandbox, starts a background
// command and leaves; "follow <sandbox> <pid>" — after the gateway behind the front end was
// restarted — connects again, finds the command in the list and follows it to its end.
import { Sandbox } from "e2b";

const [phase, id, pid] = process.argv.slice(2);
if (phase === "start") {
  const sbx = await Sandbox.create(process.env.E2B_WARM_TEMPLATE);
  const h = await sbx.commands.run("echo before; sleep 8; echo after", { background: true });
  await h.disconnect();
  console.log(JSON.stringify({ id: sbx.sandboxId, pid: h.pid }));
} else if (phase === "follow") {
  const sbx = await Sandbox.connect(id);
  const listed = (await sbx.commands.list()).some((p) => p.pid === Number(pid));
  const r = await (await sbx.commands.connect(Number(pid))).wait();
  await sbx.kill();
  console.log(JSON.stringify({ listed, exitCode: r.exitCode, stdout: r.stdout }));
} else {
  throw new Error(`unknown phase ${phase}`);
}
