"""Checkpoint corruption (docs/checkpoints.md, "Corruption"): every single-bit flip of a
checkpoint's data header or index is a DataLossError or changes nothing read; fields of the
wrong JSON type in an index or the state file are DataLossError, never TypeError; a data file
swapped for another checkpoint's is detected; temp files of interrupted saves are removed by
the next save."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.train import checkpoint_format as cf
from tensorweave.train import saver as saver_mod

VALUES = {
    "w": np.array([1.5, -2.0, 3.25], np.float32),
    "c": np.array([1 + 2j, -3j], np.complex64),
    "s": np.array([b"ab", b""], dtype=object),
    "global_step": np.array(7, np.int64),
}


def _write(prefix, values=VALUES, step=7):
    cf.write_checkpoint(prefix, list(values), list(values.values()), global_step=step)


def _read_all(prefix):
    """Everything a reader can be asked, in a comparable form."""
    with cf.CheckpointReader(prefix) as r:
        out = {"names": r.names(), "step": r.global_step}
        for n in r.names():
            v = r.get_tensor(n)
            out[n] = (r.dtype(n).name, r.shape(n), v.dtype.str, v.shape,
                      v.tolist() if v.dtype == object else v.tobytes())
        return out


def _flip_every_bit(path, begin, end, check):
    """Flip each bit of ``path[begin:end]`` in turn, call ``check()``, restore the byte."""
    original = path.read_bytes()
    outcomes = {"data loss": 0, "unchanged": 0}
    try:
        for i in range(begin, end):
            for bit in range(8):
                damaged = bytearray(original)
                damaged[i] ^= 1 << bit
                path.write_bytes(bytes(damaged))
                outcomes[check(i, bit)] += 1
    finally:
        path.write_bytes(original)
    return outcomes


def _expect_loss_or_same(prefix, want):
    def check(i, bit):
        try:
            got = _read_all(prefix)
        except tw.errors.DataLossError:
            return "data loss"
        assert got == want, f"byte {i} bit {bit}: different values read back"
        return "unchanged"
    return check


def test_every_bit_flip_of_the_data_header_is_detected(tmp_path):
    prefix = str(tmp_path / "m")
    _write(prefix)
    want = _read_all(prefix)
    data = tmp_path / "m.safetensors"
    (n,) = struct.unpack("<Q", data.read_bytes()[:8])
    assert n < 1200  # a small checkpoint: a small header (every bit of it is flipped below)
    outcomes = _flip_every_bit(data, 0, 8 + n, _expect_loss_or_same(prefix, want))
    # The header checksum covers every byte of it (padding included): nothing goes unnoticed.
    assert outcomes == {"data loss": 8 * (8 + n), "unchanged": 0}
    assert _read_all(prefix) == want


def test_every_bit_flip_of_the_index_is_detected(tmp_path):
    prefix = str(tmp_path / "m")
    _write(prefix)
    want = _read_all(prefix)
    index = tmp_path / "m.index.json"
    size = len(index.read_bytes())
    assert size < 1500
    outcomes = _flip_every_bit(index, 0, size, _expect_loss_or_same(prefix, want))
    assert outcomes["unchanged"] == 0 and outcomes["data loss"] == 8 * size


def test_flips_through_the_saver_restore_nothing_or_the_same_values(tmp_path):
    """The same through Saver.restore (validation, then the RestoreV2 kernel): a damaged
    header is an error naming data loss and no variable changes."""
    w = tw.Variable(np.array([1.5, -2.0, 3.25], np.float32), name="w")
    saver = tw.train.Saver()
    with tw.Session() as sess:
        sess.run(w.initializer)
        path = saver.save(sess, str(tmp_path / "model.ckpt"))
        data = tmp_path / "model.ckpt.safetensors"
        (n,) = struct.unpack("<Q", data.read_bytes()[:8])
        original = data.read_bytes()
        for i in range(8, 8 + n, 7):  # a sample of bytes, one bit each: the kernel's path
            damaged = bytearray(original)
            damaged[i] ^= 1 << (i % 8)
            data.write_bytes(bytes(damaged))
            sess.run(w.assign([0.0, 0.0, 0.0]))
            with pytest.raises(tw.errors.DataLossError):
                saver.restore(sess, path)
            assert sess.run(w).tolist() == [0.0, 0.0, 0.0]
        data.write_bytes(original)
        saver.restore(sess, path)
        assert sess.run(w).tolist() == [1.5, -2.0, 3.25]


@pytest.mark.parametrize("field, value", [
    ("global_step", "7"), ("global_step", 7.5), ("global_step", [7]), ("global_step", True),
    ("variables", []), ("variables", {"w": 3}), ("crc32", {"w": "abc"}), ("crc32", {"w": -1}),
    ("crc32", []), ("save_id", 5), ("format_version", "1"), ("format", None),
])
def test_wrongly_typed_index_fields_are_data_loss(tmp_path, field, value):
    """A format-1 index (no checksum to rely on) edited by hand: every field is type-checked."""
    prefix = str(tmp_path / "m")
    _write(prefix)
    index = json.loads((tmp_path / "m.index.json").read_text())
    del index["index_crc32"]
    index["format_version"] = 1
    index[field] = value
    (tmp_path / "m.index.json").write_text(json.dumps(index))
    with pytest.raises(tw.errors.DataLossError, match="m.index.json"):
        _read_all(prefix)


def test_a_format_2_index_without_its_checksum_or_with_a_wrong_one_is_data_loss(tmp_path):
    prefix = str(tmp_path / "m")
    _write(prefix)
    index = json.loads((tmp_path / "m.index.json").read_text())
    index["global_step"] = 8  # a hand edit of a checksummed index
    (tmp_path / "m.index.json").write_text(json.dumps(index, indent=1))
    with pytest.raises(tw.errors.DataLossError, match="does not match its checksum"):
        _read_all(prefix)
    del index["index_crc32"]
    (tmp_path / "m.index.json").write_text(json.dumps(index, indent=1))
    with pytest.raises(tw.errors.DataLossError, match="requires its checksum"):
        _read_all(prefix)


def test_a_data_file_from_another_save_is_detected(tmp_path):
    old, new = str(tmp_path / "m-1"), str(tmp_path / "m-2")
    _write(old, {"w": np.zeros(3, np.float32)}, step=1)
    _write(new, {"w": np.ones(3, np.float32)}, step=2)
    os.replace(tmp_path / "m-1.safetensors", tmp_path / "m-2.safetensors")  # an older data file swapped in
    with pytest.raises(tw.errors.DataLossError, match=r"m-2.safetensors is from another save .* swapped"):
        cf.CheckpointReader(new)
    # Its save id changed by hand (checksum and all recomputed is not a "flip"; see above):
    _write(new, {"w": np.ones(3, np.float32)}, step=2)
    index = json.loads((tmp_path / "m-2.index.json").read_text())
    index["save_id"] = "0" * 32
    del index["index_crc32"]
    index["format_version"] = 1
    (tmp_path / "m-2.index.json").write_text(json.dumps(index))
    with pytest.raises(tw.errors.DataLossError, match="from another save"):
        cf.CheckpointReader(new)


def test_an_interrupted_replacement_still_reads_the_new_data(tmp_path, monkeypatch):
    prefix = str(tmp_path / "m")
    _write(prefix, {"w": np.zeros(2)}, step=1)

    def crash():
        raise KeyboardInterrupt
    monkeypatch.setattr(cf, "_after_data_rename", crash)
    with pytest.raises(KeyboardInterrupt):
        _write(prefix, {"w": np.ones(2)}, step=2)
    meta = cf.SafetensorsFile(tmp_path / "m.safetensors").metadata
    assert meta["tensorweave.replaces"] == json.loads((tmp_path / "m.index.json").read_text())["save_id"]
    with cf.CheckpointReader(prefix) as r:
        assert r.index is None and r.global_step == 2 and r.get_tensor("w").tolist() == [1.0, 1.0]


@pytest.mark.parametrize("state", [
    '{"model_checkpoint_path": 5}', '{"model_checkpoint_path": "m", "all_model_checkpoint_paths": "m"}',
    '{"model_checkpoint_path": "m", "all_model_checkpoint_paths": [3]}', "[]", '"m"', "null",
    '{"model_checkpoint_path": "m", "all_model_checkpoint_paths": ["m"], "all_model_checkpoint_timestamps": 5}',
    '{"model_checkpoint_path": "m", "all_model_checkpoint_paths": ["m"], "all_model_checkpoint_timestamps": ["x"]}',
    '{"model_checkpoint_path": "m", "all_model_checkpoint_paths": ["m"], "last_preserved_timestamp": "x"}',
    '{"model_checkpoint_path": "m", "all_model_checkpoint_paths": ["m", "n"], "all_model_checkpoint_timestamps": [1]}',
    '{"model_checkpoint_path": "m\\u0000"}', "[" * 100000,
])
def test_wrongly_typed_state_files_are_data_loss(tmp_path, state):
    (tmp_path / "checkpoint").write_text(state)
    with pytest.raises(tw.errors.DataLossError, match="checkpoint state file .* is corrupt"):
        tw.train.latest_checkpoint(str(tmp_path))


def test_every_bit_flip_of_the_state_file_is_data_loss_or_a_path(tmp_path):
    w = tw.Variable([1.0], name="w")
    saver = tw.train.Saver()
    with tw.Session() as sess:
        sess.run(w.initializer)
        for step in (1, 2):
            saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
    state = tmp_path / "checkpoint"

    def check(i, bit):
        try:
            latest = tw.train.latest_checkpoint(str(tmp_path))
            st = saver_mod.get_checkpoint_state(str(tmp_path))
        except tw.errors.DataLossError:
            return "data loss"
        assert latest is None or isinstance(latest, str)
        assert all(isinstance(t, float | int) for t in st.all_model_checkpoint_timestamps)
        return "unchanged"
    outcomes = _flip_every_bit(state, 0, len(state.read_bytes()), check)
    assert outcomes["data loss"] > 0


def test_temp_files_of_interrupted_saves_are_removed_by_the_next_save(tmp_path):
    _write(str(tmp_path / "m-1"))
    # A save killed mid-way: its temp file stays behind, no longer locked (its process is gone).
    fd, dead = cf._locked_temp(str(tmp_path / "m-2.safetensors"))
    os.write(fd, b"half a checkpoint")
    os.close(fd)
    fd2, dead_index = cf._locked_temp(str(tmp_path / "m-2.index.json"))
    os.close(fd2)
    # A save still writing (its lock held) and a file that only looks like ours stay.
    live_fd, live = cf._locked_temp(str(tmp_path / "m-3.safetensors"))
    (tmp_path / "notes.abcdefgh.tmp").write_text("mine")
    try:
        _write(str(tmp_path / "m-4"))
        left = sorted(os.listdir(tmp_path))
        assert os.path.basename(dead) not in left and os.path.basename(dead_index) not in left
        assert os.path.basename(live) in left and "notes.abcdefgh.tmp" in left
    finally:
        os.close(live_fd)
    _write(str(tmp_path / "m-5"))
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".tmp")) == ["notes.abcdefgh.tmp"]
    assert _read_all(str(tmp_path / "m-4"))["step"] == 7
