"""Serve an aiohttp application on 127.0.0.1 from a background thread, for scripted test servers."""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from typing import Iterator

from aiohttp import web


@contextmanager
def serve_in_thread(app: web.Application) -> Iterator[str]:
    """Run ``app`` on a free loopback port in its own event loop thread; yield ``http://127.0.0.1:PORT``."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
