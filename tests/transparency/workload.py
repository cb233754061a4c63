"""A Python workload for transparency tests: threads, asyncio, subprocess,
signals. Prints a deterministic summary; the test compares it with and
without the preload."""
import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import threading

results = {}


def thread_work(i):
    h = hashlib.sha256()
    for j in range(20000):
        h.update(f"{i}-{j}".encode())
    results[f"thread{i}"] = h.hexdigest()[:16]


async def agen(n):
    await asyncio.sleep(0.01)
    return sum(range(n))


async def amain():
    vals = await asyncio.gather(*(agen(n) for n in range(50)))
    reader, writer = await asyncio.open_connection(*server_addr)
    writer.write(b"ping\n")
    await writer.drain()
    line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return sum(vals), line.decode().strip()


async def handle(reader, writer):
    data = await reader.readline()
    writer.write(b"pong:" + data)
    await writer.drain()
    writer.close()


async def serve_and_run():
    global server_addr
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    server_addr = server.sockets[0].getsockname()[:2]
    async with server:
        return await amain()


got_signal = []
signal.signal(signal.SIGUSR1, lambda s, f: got_signal.append(s))

threads = [threading.Thread(target=thread_work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
total, pong = asyncio.run(serve_and_run())
os.kill(os.getpid(), signal.SIGUSR1)
out = subprocess.run(["/bin/sh", "-c", "echo sub; echo err >&2; exit 7"], capture_output=True, text=True)
child = subprocess.run([sys.executable, "-c", "import sys; print(sum(range(1000)))"], capture_output=True,
                       text=True)
print(sorted(results.items()))
print(total, pong, got_signal == [signal.SIGUSR1], out.returncode, out.stdout.strip(), out.stderr.strip(),
      child.stdout.strip())
