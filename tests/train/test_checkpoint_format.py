"""The checkpoint file format: safetensors data + JSON index, every dtype, interoperability,
corruption detection and atomic replacement."""

import json
import os
import struct

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.train import checkpoint_format as cf


def every_dtype():
    """One value per tensorweave dtype, plus 0-d, empty and odd shapes."""
    rng = np.random.default_rng(0)
    vals = {
        "f16": rng.standard_normal((2, 3)).astype(np.float16),
        "f32": rng.standard_normal((4,)).astype(np.float32),
        "f64": np.array(np.pi),                                   # 0-d
        "i8": np.array([-128, 0, 127], np.int8),
        "i16": np.arange(-3, 3, dtype=np.int16).reshape(2, 3),
        "i32": np.array([[2**31 - 1, -(2**31)]], np.int32),
        "i64": np.array([2**62, -5], np.int64),
        "u8": np.arange(256, dtype=np.uint8),
        "u16": np.array([65535], np.uint16),
        "u32": np.array([2**32 - 1, 7], np.uint32),
        "u64": np.array([2**64 - 1], np.uint64),
        "bool": np.array([[True, False], [False, True]]),
        "c64": (rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))).astype(np.complex64),
        "c128": np.array(1.5 - 2.5j),                             # 0-d complex
        "str": np.array([[b"a", b""], [b"\x00\xff bytes", "unicode \u00e9".encode()]], dtype=object),
        "str0": np.array(b"scalar string", dtype=object),         # 0-d string
        "str_empty": np.zeros((0, 2), dtype=object),              # empty string tensor
        "empty_f32": np.zeros((0, 5), np.float32),
        "empty_c64": np.zeros((2, 0), np.complex64),
        "bool0": np.array(False),
    }
    dts = {k: tw.string if v.dtype == object else tw.as_dtype(v.dtype) for k, v in vals.items()}
    return vals, dts


def assert_same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        np.testing.assert_array_equal(got, want)


def test_every_dtype_round_trips(tmp_path):
    vals, dts = every_dtype()
    assert {d.name for d in dts.values()} == {d.name for d in tw.framework.dtypes.ALL_DTYPES}
    prefix = str(tmp_path / "ckpt")
    cf.write_checkpoint(prefix, list(vals), list(vals.values()), list(dts.values()), global_step=42)
    assert sorted(os.listdir(tmp_path)) == ["ckpt.index.json", "ckpt.safetensors"]
    assert cf.checkpoint_exists(prefix)
    with cf.CheckpointReader(prefix) as r:
        assert r.names() == list(vals)
        assert r.global_step == 42
        for name, want in vals.items():
            assert r.dtype(name) is dts[name]
            assert r.shape(name) == list(want.shape)
            assert_same(r.get_tensor(name), want)
    index = json.loads((tmp_path / "ckpt.index.json").read_text())
    assert index["format_version"] == cf.FORMAT_VERSION and index["global_step"] == 42
    assert index["tensorweave_version"] == tw.__version__
    assert index["variables"]["c64"] == {"dtype": "complex64", "shape": [3, 2]}
    assert index["variables"]["str0"] == {"dtype": "string", "shape": []}


def test_big_endian_and_unicode_inputs_are_normalised(tmp_path):
    path = tmp_path / "x.safetensors"
    cf.save_file(path, {"be": np.arange(4, dtype=">f4"), "u": np.array(["h\u00e9", "x"])})
    got = cf.load_file(path)
    assert got["be"].dtype == np.float32 and got["be"].tolist() == [0, 1, 2, 3]
    assert got["u"].tolist() == ["h\u00e9".encode(), b"x"]


# ---------------------------------------------------------------------------------------
# an independent reader written from the safetensors specification
_SPEC_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "I8": "i1", "I16": "<i2", "I32": "<i4",
                "I64": "<i8", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "?"}


def spec_read(path):
    """Parse per the spec: u64 LE header size N, N bytes of JSON ('{' first, may be padded
    with spaces), then a byte buffer that the tensors' data_offsets cover without holes."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header_text = raw[8:8 + n].decode("utf-8")
    assert header_text.startswith("{")  # trailing spaces (alignment padding) are allowed
    header = json.loads(header_text)
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    buf = raw[8 + n:]
    spans = sorted(tuple(e["data_offsets"]) for e in header.values())
    pos = 0
    for b, e in spans:
        assert b == pos
        pos = e
    assert pos == len(buf)
    out = {}
    for name, e in header.items():
        dt = np.dtype(_SPEC_DTYPES[e["dtype"]])
        b, end = e["data_offsets"]
        assert (end - b) == int(np.prod(e["shape"], dtype=np.int64)) * dt.itemsize
        out[name] = np.frombuffer(buf[b:end], dtype=dt).reshape(e["shape"])
    return out, meta


def test_independent_reader_opens_what_we_write(tmp_path):
    vals, dts = every_dtype()
    cf.write_checkpoint(str(tmp_path / "m"), list(vals), list(vals.values()), list(dts.values()))
    stored, meta = spec_read(tmp_path / "m.safetensors")
    enc = json.loads(meta["tensorweave.encodings"])
    for name, want in vals.items():
        e = enc.get(name)
        if e is None:                               # a standard safetensors dtype
            assert_same(stored[name].astype(want.dtype), want)
        elif e["dtype"].startswith("complex"):      # real pairs, true dtype in the metadata
            pairs = stored[name]
            assert pairs.shape == want.shape + (2,)
            np.testing.assert_array_equal(pairs[..., 0], want.real)
            np.testing.assert_array_equal(pairs[..., 1], want.imag)
            assert e == {"dtype": want.dtype.name, "shape": list(want.shape)}
        else:                                        # strings: U8 blob + int64 offsets
            blob, off = stored[name].tobytes(), stored[e["offsets"]]
            items = [blob[off[i]:off[i + 1]] for i in range(len(off) - 1)]
            assert items == want.reshape(-1).tolist() and e["shape"] == list(want.shape)


def test_the_safetensors_library_reads_our_files_and_we_read_its_files(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    vals, dts = every_dtype()
    cf.write_checkpoint(str(tmp_path / "m"), list(vals), list(vals.values()), list(dts.values()))
    loaded = st.load_file(str(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(loaded["f32"], vals["f32"])
    st.save_file({"w": np.arange(6.0).reshape(2, 3), "b": np.ones(2, np.int8)}, str(tmp_path / "o.safetensors"))
    got = cf.load_file(tmp_path / "o.safetensors")
    np.testing.assert_array_equal(got["w"], np.arange(6.0).reshape(2, 3))


def handmade(path, entries, meta=None, tail=b""):
    """Write a safetensors file by hand: entries = [(name, dtype, shape, raw bytes)]."""
    header, off, data = {}, 0, b""
    if meta:
        header["__metadata__"] = meta
    for name, dt, shape, raw in entries:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data + tail)


def test_foreign_files_bfloat16_widens_and_unknown_dtypes_are_named(tmp_path):
    bf16 = (np.array([1.5, -2.0, 3.25], np.float32).view(np.uint32) >> 16).astype("<u2")
    handmade(tmp_path / "f.safetensors", [("bf", "BF16", [3], bf16.tobytes()), ("q", "F8_E4M3", [2], b"\x01\x02")])
    with cf.CheckpointReader(tmp_path / "f.safetensors") as r:
        assert r.global_step is None and set(r.names()) == {"bf", "q"}
        np.testing.assert_array_equal(r.get_tensor("bf"), [1.5, -2.0, 3.25])
        with pytest.raises(tw.errors.UnimplementedError, match="'q'.*F8_E4M3"):
            r.get_tensor("q")


# ---------------------------------------------------------------------------------------
# corruption and bad input
@pytest.mark.parametrize("damage, match", [
    (lambda b: b[:5], "fewer than the 8-byte header"),
    (lambda b: b[:-3], "truncated"),
    (lambda b: b + b"xx", "describes .* bytes but the file has"),
    (lambda b: struct.pack("<Q", 10**12) + b[8:], "header length"),
    (lambda b: b[:8] + b"[" + b[9:], "not valid JSON|not a JSON object"),
])
def test_corrupt_or_truncated_files_raise_data_loss(tmp_path, damage, match):
    prefix = str(tmp_path / "m")
    cf.write_checkpoint(prefix, ["a", "b"], [np.arange(10.0), np.ones(3, np.int32)])
    data = tmp_path / "m.safetensors"
    data.write_bytes(damage(data.read_bytes()))
    with pytest.raises(tw.errors.DataLossError, match=match) as e:
        cf.CheckpointReader(prefix)
    assert "m.safetensors" in str(e.value)


def test_flipped_data_byte_fails_its_checksum(tmp_path):
    prefix = str(tmp_path / "m")
    cf.write_checkpoint(prefix, ["a", "b"], [np.arange(10.0), np.ones(3, np.int32)])
    data = tmp_path / "m.safetensors"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF  # last byte belongs to 'b' (4-byte items are stored after 8-byte ones)
    data.write_bytes(bytes(raw))
    with cf.CheckpointReader(prefix) as r:
        np.testing.assert_array_equal(r.get_tensor("a"), np.arange(10.0))
        with pytest.raises(tw.errors.DataLossError, match=r"checksum mismatch for tensor 'b' in .*m\.safetensors"):
            r.get_tensor("b")


def test_bad_header_entries_and_missing_files(tmp_path):
    h = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()
    (tmp_path / "holes.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + b"\0" * 12)
    with pytest.raises(tw.errors.DataLossError, match="starts at 4, expected 0"):
        cf.CheckpointReader(tmp_path / "holes.safetensors")
    handmade(tmp_path / "size.safetensors", [("a", "F32", [3], b"\0" * 8)])
    with pytest.raises(tw.errors.DataLossError, match="needs 12 bytes"):
        cf.CheckpointReader(tmp_path / "size.safetensors")
    with pytest.raises(tw.errors.NotFoundError, match="nothere"):
        cf.CheckpointReader(tmp_path / "nothere")
    cf.write_checkpoint(str(tmp_path / "m"), ["a"], [np.ones(2)])
    os.remove(tmp_path / "m.safetensors")
    with pytest.raises(tw.errors.DataLossError, match="data file .*m.safetensors is missing"):
        cf.CheckpointReader(str(tmp_path / "m"))
    (tmp_path / "bad.index.json").write_text("{not json")
    with pytest.raises(tw.errors.DataLossError, match="bad.index.json"):
        cf.CheckpointReader(str(tmp_path / "bad"))


def test_invalid_names_and_missing_directory(tmp_path):
    with pytest.raises(tw.errors.InvalidArgumentError, match="duplicate tensor names"):
        cf.write_checkpoint(str(tmp_path / "m"), ["a", "a"], [np.ones(1), np.ones(1)])
    with pytest.raises(tw.errors.InvalidArgumentError, match="__metadata__"):
        cf.write_checkpoint(str(tmp_path / "m"), ["__metadata__"], [np.ones(1)])
    with pytest.raises(tw.errors.InvalidArgumentError, match="expected bytes or str"):
        cf.write_checkpoint(str(tmp_path / "m"), ["s"], [np.array([1, b"x"], dtype=object)], [tw.string])
    with pytest.raises(tw.errors.NotFoundError, match="does not exist"):
        cf.write_checkpoint(str(tmp_path / "no" / "m"), ["a"], [np.ones(1)])
    assert os.listdir(tmp_path) == []


def test_string_tensor_named_like_a_companion_gets_a_unique_one(tmp_path):
    vals = {"s": np.array([b"x", b"yy"], dtype=object), "s:offsets": np.array([7, 8])}
    cf.save_file(tmp_path / "c.safetensors", vals)
    got = cf.load_file(tmp_path / "c.safetensors")
    assert got["s"].tolist() == [b"x", b"yy"] and got["s:offsets"].tolist() == [7, 8]


# ---------------------------------------------------------------------------------------
# atomicity (in-process; tests/train/test_saver.py kills a real process mid-save)
class Boom(Exception):
    pass


def test_a_failed_write_leaves_the_previous_checkpoint_and_no_temp_files(tmp_path, monkeypatch):
    prefix = str(tmp_path / "m")
    cf.write_checkpoint(prefix, ["a"], [np.zeros(3 << 20, np.float32)], global_step=1)

    def boom():
        raise Boom()
    monkeypatch.setattr(cf, "_after_chunk", boom)
    with pytest.raises(Boom):
        cf.write_checkpoint(prefix, ["a"], [np.ones(3 << 20, np.float32)], global_step=2)
    assert sorted(os.listdir(tmp_path)) == ["m.index.json", "m.safetensors"]
    with cf.CheckpointReader(prefix) as r:
        assert r.global_step == 1 and not r.get_tensor("a").any()


def test_crash_between_data_and_index_renames_reads_the_complete_new_data(tmp_path, monkeypatch):
    prefix = str(tmp_path / "m")
    cf.write_checkpoint(prefix, ["a"], [np.zeros(4)], global_step=1)

    def boom():
        raise Boom()
    monkeypatch.setattr(cf, "_after_data_rename", boom)
    with pytest.raises(Boom):
        cf.write_checkpoint(prefix, ["a", "b"], [np.ones(4), np.array(b"s", dtype=object)], global_step=2)
    # the index still describes save 1; the data file is save 2, complete: it is read alone
    assert json.loads((tmp_path / "m.index.json").read_text())["global_step"] == 1
    with cf.CheckpointReader(prefix) as r:
        assert r.index is None and r.global_step == 2 and r.names() == ["a", "b"]
        np.testing.assert_array_equal(r.get_tensor("a"), np.ones(4))
        assert r.get_tensor("b").item() == b"s"
    # a new prefix interrupted at the same point is not committed: no checkpoint exists
    with pytest.raises(Boom):
        cf.write_checkpoint(str(tmp_path / "n"), ["a"], [np.ones(1)])
    assert not cf.checkpoint_exists(str(tmp_path / "n"))


def test_atomic_write_bytes_replaces_and_cleans_up(tmp_path):
    p = tmp_path / "state"
    cf.atomic_write_bytes(p, b"one")
    cf.atomic_write_bytes(p, b"two")
    assert p.read_bytes() == b"two" and os.listdir(tmp_path) == ["state"]


def test_a_checkpoint_renamed_as_a_pair_still_loads(tmp_path):
    cf.write_checkpoint(str(tmp_path / "old"), ["a"], [np.arange(3)], global_step=4)
    for suffix in (cf.DATA_SUFFIX, cf.INDEX_SUFFIX):
        os.rename(tmp_path / f"old{suffix}", tmp_path / f"new{suffix}")
    with cf.CheckpointReader(str(tmp_path / "new")) as r:
        assert r.index is not None and r.global_step == 4 and r.get_tensor("a").tolist() == [0, 1, 2]
