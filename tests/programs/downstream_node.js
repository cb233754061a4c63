// An event-loop HTTP server (node's http, one thread for every connection)
// calling redis over one connection with a hand-written RESP client, one
// command at a time: the event-loop case of issue 45's downstream calls
// (tests/integration/test_downstream.py). Nothing in it knows about the
// recorder.
//
// argv: redis port, batch size N. Prints the HTTP port; exits when stdin closes.
//   GET /item/<id>   GET item:<id>, then INCR hits (one after the other)
//   GET /batch/<id>  waits until N batch requests are in flight, then one
//                    LPUSH each, one after the other, then answers them all:
//                    every LPUSH is made while N requests are in flight.
// Before listening: one PING (a call outside any request).
"use strict";
const http = require("http");
const net = require("net");

const redisPort = Number(process.argv[2]);
const batchSize = Number(process.argv[3]);

const redis = net.connect(redisPort, "127.0.0.1");
let pending = null;  // [resolve, buffered reply]
let buf = "";
redis.setEncoding("latin1");
redis.on("data", (chunk) => {
  buf += chunk;
  // Every reply here is one line (+OK, :n, $-1) or a bulk string ($n\r\n...\r\n).
  const nl = buf.indexOf("\r\n");
  if (nl < 0) return;
  let end = nl + 2;
  if (buf[0] === "$" && buf[1] !== "-") end += Number(buf.slice(1, nl)) + 2;
  if (buf.length < end) return;
  const reply = buf.slice(0, end);
  buf = buf.slice(end);
  const p = pending;
  pending = null;
  p(reply);
});

function call(...args) {
  return new Promise((resolve) => {
    if (pending) throw new Error("one command at a time");
    pending = resolve;
    let out = "*" + args.length + "\r\n";
    for (const a of args) out += "$" + Buffer.byteLength(String(a)) + "\r\n" + a + "\r\n";
    redis.write(out);
  });
}

let waiting = [];
const server = http.createServer(async (req, res) => {
  const m = /^\/(item|batch)\/(\d+)$/.exec(req.url);
  if (!m) {
    res.writeHead(404);
    res.end();
    return;
  }
  if (m[1] === "item") {
    await call("GET", "item:" + m[2]);
    const n = await call("INCR", "hits");
    res.end("item " + n.trim().slice(1));
    return;
  }
  waiting.push(res);
  if (waiting.length < batchSize) return;
  const batch = waiting;
  waiting = [];
  for (let i = 0; i < batch.length; i++) await call("LPUSH", "batch", String(i));
  for (const r of batch) r.end("batched");
});

redis.on("connect", async () => {
  await call("PING");
  server.listen(0, "127.0.0.1", () => {
    process.stdout.write(server.address().port + "\n");
  });
});
process.stdin.resume();
process.stdin.on("end", () => {
  server.close();
  redis.end();
});
