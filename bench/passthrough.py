"""The least an aiohttp proxy can do: relay a streamed POST to one upstream, nothing else.

    python bench/passthrough.py LISTEN_PORT UPSTREAM_HOST:PORT

`bench/router.py` runs it beside the router and nginx, so the table shows what the aiohttp server
and client alone cost on this machine: the floor under the router's own work (classification,
routing, measurement).
"""

from __future__ import annotations

import sys

import aiohttp
from aiohttp import web


def app(upstream: str) -> web.Application:
    async def on_startup(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)

    async def on_cleanup(app: web.Application) -> None:
        await app["session"].close()

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        session: aiohttp.ClientSession = request.app["session"]
        async with session.request(
            request.method,
            f"http://{upstream}{request.rel_url}",
            data=body or None,
            headers={"Content-Type": "application/json"},
        ) as upstream_resp:
            resp = web.StreamResponse(status=upstream_resp.status)
            resp.content_type = upstream_resp.content_type
            await resp.prepare(request)
            while data := await upstream_resp.content.readany():
                await resp.write(data)
            await resp.write_eof()
            return resp

    application = web.Application()
    application.on_startup.append(on_startup)
    application.on_cleanup.append(on_cleanup)
    application.router.add_post("/{tail:.*}", relay)
    application.router.add_get("/{tail:.*}", relay)
    return application


if __name__ == "__main__":
    web.run_app(app(sys.argv[2]), host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
