// Runs inside the check's node network namespace (where the pods' bridge is) and does what a kubelet
// does from the node: HTTP and TCP probes against pod IPs, and one HTTP request as a client would send
// through a Service. One JSON request per stdin line, one JSON answer per stdout line, each bounded by
// its own timeout.
import { request } from 'node:http';
import { connect } from 'node:net';
import { createInterface } from 'node:readline';

function http({ url, method = 'GET', headers = {}, body, timeoutMs }) {
  return new Promise((resolve) => {
    const req = request(url, { method, headers, timeout: timeoutMs, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8').slice(0, 4096) }),
      );
      res.on('error', (error) => resolve({ error: error.message }));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (error) => resolve({ error: error.message }));
    req.end(body);
  });
}

function tcp({ host, port, timeoutMs }) {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ error: `no connection within ${timeoutMs} ms` });
    }, timeoutMs);
    socket.on('connect', () => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ ok: true });
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      resolve({ error: error.message });
    });
  });
}

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const { id, op, ...args } = JSON.parse(line);
  // Concurrently: one slow probe must not hold up the others.
  void (op === 'http' ? http(args) : op === 'tcp' ? tcp(args) : Promise.resolve({ error: `unknown op ${op}` })).then(
    (result) => process.stdout.write(`${JSON.stringify({ id, ...result })}\n`),
  );
}
