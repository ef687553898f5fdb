"""The one tensor encoding (framework/tensor_codec.py): names, round trips, zero copy, bad input,
and that the wire, the JSON GraphDef and checkpoints all carry exactly its bytes."""

import base64
import json
import struct

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distributed import wire
from tensorweave.framework import dtypes, serialization
from tensorweave.framework import tensor_codec as codec
from tensorweave.train import checkpoint_format as cf


def _values():
    rng = np.random.default_rng(0)
    out = {}
    for dt in dtypes.ALL_DTYPES:
        if dt.is_string:
            out[dt.name] = np.array([[b"a", b""], ["\u00e9", b"\x00\xff"]], dtype=object)
        elif dt.is_bool:
            out[dt.name] = rng.random((2, 3)) < 0.5
        elif dt.is_complex:
            out[dt.name] = (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(dt.np_dtype)
        else:
            out[dt.name] = np.arange(6, dtype=dt.np_dtype).reshape(2, 3)
    out["0-d"] = np.array(2.5)
    out["empty"] = np.zeros((0, 4), np.int16)
    out["0-d string"] = np.array(b"tail\x00", dtype=object)
    out["empty string"] = np.zeros((3, 0), dtype=object)
    return out


def _same(got, want):
    assert got.shape == want.shape
    if want.dtype.kind in "OSU":
        assert got.dtype == object
        assert got.reshape(-1).tolist() == [v.encode() if isinstance(v, str) else v for v in want.reshape(-1).tolist()]
    else:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_names_are_safetensors_plus_two_extensions():
    assert {codec.name_of(d) for d in dtypes.ALL_DTYPES} == set(codec.NAMES) == {
        "F16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "BOOL", "C64", "C128", "STR"}
    for d in dtypes.ALL_DTYPES:
        assert codec.dtype_of(codec.name_of(d), "t") is d
    with pytest.raises(tw.errors.InvalidArgumentError, match="t: unknown dtype 'float32'; expected one of"):
        codec.dtype_of("float32", "t")  # tensorweave's own names are attr values, not encodings
    assert codec.read_dtype("BF16") is tw.float32 and codec.read_dtype("F8_E4M3") is None
    assert codec.itemsize("BF16") == 2 and codec.itemsize("C128") == 16 and codec.itemsize("STR") is None


@pytest.mark.parametrize("name", list(_values()))
def test_every_dtype_round_trips(name):
    x = _values()[name]
    fields, parts = codec.encode(x)
    payload = b"".join(parts)
    assert fields["nbytes"] == len(payload) and fields["shape"] == list(x.shape)
    _same(codec.decode(fields["dtype"], tuple(fields["shape"]), payload, "t"), x)


def test_the_string_layout_is_offsets_then_bytes():
    fields, parts = codec.encode(np.array([b"ab", b"", b"cde"], dtype=object))
    assert fields == {"dtype": "STR", "shape": [3], "nbytes": 4 * 8 + 5}
    assert b"".join(parts) == struct.pack("<4q", 0, 2, 2, 5) + b"abcde"


def test_numeric_encode_and_decode_are_views():
    x = np.arange(12, dtype=np.float32)
    (view,) = codec.encode(x)[1]
    assert np.shares_memory(np.frombuffer(view, np.uint8), x)
    buf = bytearray(x.tobytes())
    y = codec.decode("F32", (3, 4), buf, "t")
    assert np.shares_memory(y, np.frombuffer(buf, np.uint8)) and y.flags.writeable
    assert not np.shares_memory(codec.decode("F32", (12,), buf, "t", copy=True), np.frombuffer(buf, np.uint8))
    # odd layouts are made C-ordered little-endian, once
    for odd in (x.reshape(3, 4).T, x.astype(">f4")):
        _same(codec.decode("F32", odd.shape, b"".join(codec.encode(odd)[1]), "t"), odd.astype(np.float32))


def test_bad_input_is_named():
    bad = [
        (lambda: codec.decode("F32", (2,), b"\0" * 4, "t"),
         r"t: byte count 4 does not match shape \[2\] of float32 \(4 bytes do not hold 2 elements"),
        (lambda: codec.decode("BOOL", (2,), b"\x01\x02", "t"), "bool tensor holds bytes other than 0 and 1"),
        (lambda: codec.decode("STR", (2,), struct.pack("<2q", 0, 0), "t"), "cannot hold the 3 string offsets"),
        (lambda: codec.decode("STR", (1,), struct.pack("<2q", 0, 3) + b"ab", "t"),
         "its offsets do not describe its 2 bytes"),
        (lambda: codec.decode("STR", (2,), struct.pack("<3q", 0, 2, 1) + b"a", "t"), "its offsets do not describe"),
        (lambda: codec.check_shape([2, -1], "t"), "non-negative ints"),
        (lambda: codec.check_shape([1] * 33, "t"), "at most 32"),
        (lambda: codec.encode(np.array([b"a", 3], dtype=object)), "holds bytes or str, got int"),
        (lambda: codec.encode(np.zeros(1, "datetime64[D]")), "NumPy dtype datetime64"),
    ]
    for f, match in bad:
        with pytest.raises(tw.errors.InvalidArgumentError, match=match):
            f()
    with pytest.raises(tw.errors.DataLossError, match="its offsets"):  # checkpoints read with their own class
        codec.decode_strings(np.array([0, 5]), b"ab", (1,), "t", error=tw.errors.DataLossError)


def test_bfloat16_is_read_widened():
    bits = (np.array([1.5, -2.0], np.float32).view(np.uint32) >> 16).astype("<u2")
    np.testing.assert_array_equal(codec.decode("BF16", (2,), bits.tobytes(), "t"), [1.5, -2.0])


@pytest.mark.parametrize("name", list(_values()))
def test_wire_json_graph_def_and_checkpoints_carry_the_same_bytes(name, tmp_path):
    x = _values()[name]
    fields, parts = codec.encode(x)
    payload = b"".join(parts)
    # the wire: a tensor frame's header fields and payload
    header, off = wire.decode_tensor_header(b"".join(bytes(c) for c in wire.tensor_chunks(x)))
    frame = b"".join(bytes(c) for c in wire.tensor_chunks(x))[off:]
    assert (header["dtype"], list(header["shape"]), header["nbytes"]) == (fields["dtype"], fields["shape"], len(payload))
    assert frame == payload
    # the JSON GraphDef: the same fields, base64 of the same payload
    js = serialization.encode_tensor(x)
    assert js == {"dtype": fields["dtype"], "shape": fields["shape"], "data": base64.b64encode(payload).decode()}
    _same(serialization.decode_tensor(json.loads(json.dumps(js))), x)
    # checkpoints: the same bytes (strings: the two parts as two tensors; complex: labelled as pairs)
    cf.save_file(tmp_path / "t.safetensors", {"x": x})
    with cf.SafetensorsFile(tmp_path / "t.safetensors") as f:
        stored = f.raw("x").tobytes()
        if fields["dtype"] == "STR":
            stored = f.raw("x:offsets").tobytes() + stored
        else:
            assert f.entries["x"][0] == {"C64": "F32", "C128": "F64"}.get(fields["dtype"], fields["dtype"])
    assert stored == payload
    _same(cf.load_file(tmp_path / "t.safetensors")["x"], x)
