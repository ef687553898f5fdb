"""The UCX engine: one ucxx context per process, driven by an asyncio loop in a daemon thread
that the transport starts on first use and every server and channel of the process shares
(``engine()``), and connecting an endpoint to a listener.

ucxx is imported here, on first use, after ``env.apply()``: it is an optional dependency
(Linux only), importing it loads UCX, and UCX reads its environment once. Loading the
plugin therefore never imports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import logging
import os
import struct
import threading

from tensorweave.framework import errors

from . import env

CLOSE_PERIOD_NS = 10 ** 9  # bound on how long aborting an endpoint may wait for UCX

log = logging.getLogger("tensorweave.ucx")

# ucp_ep_attr_t (ucp.h): u64 field_mask, char name[32], sockaddr_storage local, remote, ...
_EP_ATTR_LOCAL_SOCKADDR = 1 << 1
_EP_ATTR_LOCAL_OFFSET = 8 + 32
_EP_ATTR_BYTES = 1024  # more than the struct's 328 bytes


class Engine:
    def __init__(self, net_devices: str | None = None):
        env.apply()
        # Set for the server this engine is started for (see env.net_devices_for) while UCX
        # reads its environment, when its context is created below — and only then: processes
        # this one starts later must not inherit a restriction made for this server's address.
        # A variable the user set wins.
        ours = net_devices is not None and "UCX_NET_DEVICES" not in os.environ
        if ours:
            os.environ["UCX_NET_DEVICES"] = net_devices
        self.net_devices = os.environ.get("UCX_NET_DEVICES") if net_devices is not None else None
        self._ucp = None
        try:
            import ucxx
            from ucxx._lib import libucxx
            from ucxx._lib_async.endpoint import Endpoint
            from ucxx._lib_async.exchange_peer_info import exchange_peer_info
            from ucxx._lib_async.utils import hash64bits
        except Exception as e:  # noqa: BLE001 - any import failure means the transport cannot start
            raise errors.UnavailableError(
                f"transport 'ucx' cannot start: importing ucxx failed ({type(e).__name__}: {e}); "
                "install it with `pip install ucxx-cu12` (Linux)") from None
        self.ucxx, self.libucxx = ucxx, libucxx
        self._Endpoint, self._exchange, self._hash64 = Endpoint, exchange_peer_info, hash64bits
        self.UCXError = libucxx.UCXError
        self.loop = asyncio.new_event_loop()
        # Daemon thread: threads ucxx starts from it (its notifier thread) are daemons too,
        # so a process that never closes its servers still exits.
        self.thread = threading.Thread(target=self._run, name="tensorweave-ucx", daemon=True)
        self.thread.start()
        try:
            self.run(self._init(), 30.0)
        except errors.OpError:
            raise
        except Exception as e:  # noqa: BLE001
            raise errors.UnavailableError(
                f"transport 'ucx' cannot start: initialising UCX failed ({type(e).__name__}: {e})") from None
        finally:
            if ours:
                os.environ.pop("UCX_NET_DEVICES", None)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _init(self):
        # Python futures: a waiting request costs no CPU (without them ucxx polls in a loop).
        self.ucxx.init(progress_mode="thread", enable_python_future=True)
        self.ctx = self.ucxx.core._get_ctx()

    def local_address(self, ep):
        """The IP address of this end of ``ep`` (a ucxx Endpoint made by a listener): the
        address its client dialled; None when UCX cannot tell."""
        try:
            if self._ucp is None:
                self._ucp = ctypes.CDLL("libucp.so.0", mode=os.RTLD_NOLOAD)  # the one ucxx loaded
            attr = ctypes.create_string_buffer(_EP_ATTR_BYTES)
            struct.pack_into("<Q", attr, 0, _EP_ATTR_LOCAL_SOCKADDR)
            if self._ucp.ucp_ep_query(ctypes.c_void_p(ep._ep.handle), attr) != 0:
                return None
            return env.sockaddr_ip(ctypes.addressof(attr) + _EP_ATTR_LOCAL_OFFSET)
        except (OSError, AttributeError, TypeError, ValueError):
            return None

    def run(self, coro, timeout: float | None):
        """Run ``coro`` on the engine's loop; the caller's thread waits at most ``timeout``
        (plus a margin: the coroutine enforces its own deadline, this only guards the loop)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(None if timeout is None else timeout + 5.0)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise errors.DeadlineExceededError("ucx transport: the UCX engine did not answer in time") from None

    async def connect(self, host: str, port: int, timeout: float):
        """An endpoint to a listener; a refused or unreachable peer fails as soon as UCX says so
        (``ucxx.create_endpoint`` would wait out its whole connect timeout)."""
        loop = asyncio.get_running_loop()
        failed = loop.create_future()

        def on_close():
            try:
                loop.call_soon_threadsafe(lambda: failed.done() or failed.set_result(None))
            except RuntimeError:  # loop already closed (process exit)
                pass

        try:
            ucx_ep = self.libucxx.UCXEndpoint.create(self.ctx.worker, host, port, True)
            ucx_ep.set_close_callback(on_close, None, None)
        except (self.UCXError, RuntimeError) as e:  # RuntimeError: refused before the callback was set
            raise errors.UnavailableError(f"ucx transport: cannot connect to {host}:{port} ({e})") from None
        msg_tag = self._hash64("msg_tag", os.urandom(16), ucx_ep.handle)
        xchg = asyncio.ensure_future(self._exchange(ucx_ep, msg_tag, False, timeout))
        # its failure after a refusal is expected, and reported below, not by asyncio
        xchg.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            done, _ = await asyncio.wait({xchg, failed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if xchg in done and xchg.exception() is None:
                peer = xchg.result()
                ucx_ep.remove_close_callback()
                return self._Endpoint(ucx_ep, self.ctx, {"msg_send": peer["msg_tag"], "msg_recv": msg_tag})
            if xchg in done:
                why = f"{type(xchg.exception()).__name__}: {xchg.exception()}"
            elif failed.done():
                why = "connection refused or reset"
            else:
                why = f"no answer within {timeout:g}s"
        finally:
            if not xchg.done():
                xchg.cancel()
            if not failed.done():
                failed.cancel()
        ucx_ep.remove_close_callback()
        ucx_ep.close_blocking(period=CLOSE_PERIOD_NS, max_attempts=1)
        raise errors.UnavailableError(f"ucx transport: cannot connect to {host}:{port} ({why})")


_ENGINE: Engine | None = None
_ENGINE_LOCK = threading.Lock()


def engine(listen_host: str | None = None) -> Engine:
    """The process's engine, started on first use. ``listen_host``: the host of the server
    that wants it — an engine started for a server on one address keeps UCX's TCP transport
    to the interfaces that carry it (``env.net_devices_for``)."""
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = Engine(env.net_devices_for(listen_host) if listen_host is not None else None)
        elif (listen_host is not None and _ENGINE.net_devices is None and "UCX_NET_DEVICES" not in os.environ
              and env.net_devices_for(listen_host) is not None):
            log.warning("ucx transport: UCX was started in this process before the server at %s, so its TCP "
                        "transport listens on every network interface; start the server first, or set "
                        "UCX_NET_DEVICES", listen_host)
        return _ENGINE
