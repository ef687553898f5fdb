"""What the UCX transport does beyond the transport contract (which the kit checks, see
``test_passes_the_transport_kit``): its slot framing (inline payloads and what is not a
frame of ours), refusing TLS, its environment, and its error messages. Real UCX endpoints
on 127.0.0.1 (port 0); every server stopped, every channel closed."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distributed import wire
from tensorweave.distributed.transport import Security, ServiceDispatcher
from tensorweave.testing import transport_kit
from tensorweave.testing.transport_kit import echo

pytest.importorskip("ucxx", reason="the ucx transport needs ucxx (pip install ucxx-cu12)")

from tensorweave_ucx import channel, connection, engine, env, framing, server  # noqa: E402 - after the skip


@pytest.fixture
def kit(tw_transport_kit):
    return tw_transport_kit("ucx")


def test_passes_the_transport_kit(tmp_path):
    transport_kit.assert_passes("ucx", tmp_path)


def test_payloads_just_under_at_and_over_the_slot_take_both_paths(kit, monkeypatch):
    """A payload of up to ``INLINE`` bytes travels in its slot, one byte more as a message of
    its own, both ways; the hello's token too."""
    inline = framing.INLINE
    seen = set()  # (body length, came inline) of every payload received, both ends

    async def spy(conn, head, length, on_tag):
        seen.add((length, length <= inline))
        return await connection.recv_body(conn, head, length, on_tag)

    monkeypatch.setattr(server, "recv_body", spy)
    monkeypatch.setattr(channel, "recv_body", spy)
    token = Security(token="k" * (inline + 50))  # the hello's token does not fit the slot either
    ch = kit.channel(kit.serve(ServiceDispatcher({"Reverse": lambda p: bytes(p)[::-1]}), token).address, token)
    for n in (inline - 1, inline, inline + 1):
        payload = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
        assert ch.call("Reverse", payload, timeout=10) == payload[::-1], n
    assert {(inline, True), (inline + 1, False), (inline + 50, False)} <= seen


def test_frames_that_are_not_ours_drop_only_their_connection(kit):
    srv = kit.serve(ServiceDispatcher({"Echo": echo}))
    host, port = srv.address.rsplit(":", 1)
    eng = engine.engine()
    hello = framing.slot(framing.HELLO, 0)

    async def talk(*slots):
        """Send ``slots`` on a new endpoint; True once the server has dropped it."""
        conn = connection.Conn(eng, await eng.connect(host, int(port), 10), srv.address)
        for s in slots:
            conn.post(s)
        try:
            await asyncio.wait_for(conn.closed.wait(), 10)
            return True
        finally:
            conn.fail(tw.errors.UnavailableError("done"))

    bad_magic = bytearray(hello)
    bad_magic[:4] = b"NOPE"
    for slots in ([bad_magic], [framing.slot(framing.HELLO, 0, length=framing.MAX_TOKEN + 1)],
                  [hello, framing.slot(99, 1)], [hello, framing.slot(framing.CALL, 0)], [hello, bytes(7)]):
        assert eng.run(talk(*slots), 20)
    ch = kit.channel(srv.address)
    assert wire.decode_response(ch.call("Echo", wire.encode_message({"ok": 1}), timeout=10))[0] == {"echo": {"ok": 1}}


def test_error_messages(kit):
    srv = kit.serve(ServiceDispatcher({"Echo": echo, "Big": lambda p: wire.encode_response(
        {}, [np.zeros(1024, np.float32)])}), Security(max_message_bytes=1 << 16))
    big = wire.encode_message({}, [np.zeros(1 << 15, np.float32)])  # 128 KiB
    with pytest.raises(tw.errors.ResourceExhaustedError, match="exceeds"):
        kit.channel(srv.address, Security(max_message_bytes=1 << 16)).call("Echo", big, timeout=10)
    with pytest.raises(tw.errors.ResourceExhaustedError, match="server's limit"):
        kit.channel(srv.address).call("Echo", big, timeout=10)
    with pytest.raises(tw.errors.ResourceExhaustedError, match="answer"):
        kit.channel(srv.address, Security(max_message_bytes=1 << 10)).call("Big", b"", timeout=10)
    closed = kit.channel(srv.address)
    closed.close()
    with pytest.raises(tw.errors.UnavailableError, match="closed"):
        closed.call("Echo", wire.encode_message({}), timeout=10)


def test_tls_is_unimplemented_naming_ucx(kit):
    d = ServiceDispatcher({"Echo": echo})
    for sec in (Security(tls_cert=b"PEM", tls_key=b"PEM"), Security(tls_root=b"PEM")):
        with pytest.raises(tw.errors.UnimplementedError, match="'ucx'.*TLS"):
            kit.transport.server("127.0.0.1:0", d, sec)
        with pytest.raises(tw.errors.UnimplementedError, match="'ucx'.*TLS"):
            kit.transport.channel("127.0.0.1:1", sec)


def test_cluster_config_asking_for_tls_over_ucx_fails_at_start_up(tmp_path):
    from tensorweave.distributed.cluster import load_config
    from tensorweave.distributed.server import Server

    (tmp_path / "node.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "node.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    cfg = tmp_path / "cluster.toml"
    cfg.write_text('transport = "ucx"\n[cluster]\nworker = ["127.0.0.1:0"]\n'
                   f'[tls]\ncert = "{tmp_path / "node.pem"}"\nkey = "{tmp_path / "node.key"}"\n')
    with pytest.raises(tw.errors.UnimplementedError, match="'ucx'"):
        Server(load_config(cfg), "worker", 0)


def test_a_channel_address_must_be_host_and_port(kit):
    for address in ("no-port", "127.0.0.1:http", "127.0.0.1:70000"):
        with pytest.raises(tw.errors.InvalidArgumentError, match="host:port"):
            kit.transport.channel(address)


def test_environment_defaults_leave_what_the_user_set():
    environ = {"UCX_TCP_TX_SEG_SIZE": "64k"}
    env.apply(environ)
    assert environ == {**env.UCX_ENV_DEFAULTS, "UCX_TCP_TX_SEG_SIZE": "64k"}
    assert env.UCX_ENV_DEFAULTS["UCX_RNDV_FRAG_MEM_TYPE"] == "host"  # no GPU memory for staging
