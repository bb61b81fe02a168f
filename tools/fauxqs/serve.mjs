// Starts fauxqs (local SQS + S3) on a loopback port with request logging
// off, prints one JSON line {"address": "...", "port": N} when it listens,
// and stops on SIGTERM/SIGINT or when stdin closes (its parent died).
import { startFauxqs } from "fauxqs";

const port = Number(process.env.FAUXQS_PORT ?? process.argv[2] ?? 0);
const server = await startFauxqs({ port, host: "127.0.0.1", logger: false });
process.stdout.write(JSON.stringify({ address: server.address, port: server.port }) + "\n");

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await server.stop();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
process.stdin.on("end", stop);
process.stdin.on("close", stop);
process.stdin.resume();
