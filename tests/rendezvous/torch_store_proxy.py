#!/usr/bin/env python3
"""A logging TCP proxy: records what a TCPStore client and server send each other.

  torch_store_proxy.py LISTEN_PORT TARGET_PORT OUT_PREFIX

Every connection N is written to OUT_PREFIX.N.txt, one line per chunk in the order seen:
"c2s HEX" (client to server) or "s2c HEX". Used to record the sessions in torch_sessions/ from
real torch clients against PyTorch's own TCPStore server (docs/torch-store.md).
"""
import asyncio
import sys


async def main():
    listen, target, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    count = 0

    async def handle(cr, cw):
        nonlocal count
        n = count
        count += 1
        sr, sw = await asyncio.open_connection("127.0.0.1", target)
        log = open(f"{prefix}.{n}.txt", "w")

        async def pump(r, w, tag):
            while True:
                data = await r.read(65536)
                if not data:
                    break
                log.write(f"{tag} {data.hex()}\n")
                log.flush()
                w.write(data)
                await w.drain()
            w.close()

        await asyncio.gather(pump(cr, sw, "c2s"), pump(sr, cw, "s2c"), return_exceptions=True)
        log.close()

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
