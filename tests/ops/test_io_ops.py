"""Input ops (whitepaper 4.5): the record format and its checksum, reader ops over files
and filename queues, decode ops (raw bytes, CSV, numbers), file ops."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors
from tensorweave.runtime import record_io


def _mask(c):  # written out again here so the test does not trust the module's own helper
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------
# CRC32C and the framing
@pytest.mark.parametrize("data, expected", [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),                       # the CRC catalogue's check value
    (bytes(32), 0x8A9136AA),                          # RFC 3720 B.4 test vectors
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
])
def test_crc32c_published_vectors(data, expected):
    assert record_io.crc32c(data) == expected
    assert record_io._crc32c_python(data) == expected  # the pure path, even if a C module is present


@pytest.mark.parametrize("n", [1, 7, 8, 4095, 4096, 4097, 65536 + 3, (1 << 20) + 17])
def test_crc32c_vectorised_path_matches_the_table_loop(n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    loop = record_io._crc_small(data, 0xFFFFFFFF) ^ 0xFFFFFFFF
    assert record_io._crc32c_python(data) == loop
    # continuing a CRC over a second piece equals the CRC of the whole
    cut = n // 3
    assert record_io._crc32c_python(data[cut:], record_io._crc32c_python(data[:cut])) == loop


def test_masked_crc_and_known_record_bytes():
    assert record_io.masked_crc32c(b"123456789") == _mask(0xE3069283)
    assert record_io.unmask_crc32c(record_io.masked_crc32c(b"abc")) == record_io.crc32c(b"abc")
    rec = record_io.encode_record(bytes(32))
    length = struct.pack("<Q", 32)
    assert rec[:8] == length
    assert rec[8:12] == struct.pack("<I", _mask(record_io.crc32c(length)))
    assert rec[12:44] == bytes(32)
    assert rec[44:] == struct.pack("<I", _mask(0x8A9136AA))  # RFC 3720's CRC of 32 zero bytes


def test_record_round_trip_with_empty_and_large_records(tmp_path):
    rng = np.random.default_rng(0)
    records = [b"", b"a", bytes(rng.integers(0, 256, 70_000, dtype=np.uint8)), b"", b"text",
               bytes(rng.integers(0, 256, 300_000, dtype=np.uint8))]
    path = tmp_path / "r.tfrecord"
    with tw.python_io.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
        w.flush()
    assert list(tw.python_io.tf_record_iterator(str(path))) == records
    assert path.stat().st_size == sum(16 + len(r) for r in records)
    raw = path.read_bytes()
    assert raw == b"".join(record_io.encode_record(r) for r in records)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_record_files(tmp_path, compression):
    path = str(tmp_path / "c.tfrecord")
    opts = tw.python_io.TFRecordOptions(compression)
    records = [b"x" * 1000, b"", b"hello"]
    with tw.python_io.TFRecordWriter(path, opts) as w:
        for r in records:
            w.write(r)
    assert open(path, "rb").read(2) != b"\xe8\x03"  # compressed: not the plain length field
    assert list(tw.python_io.tf_record_iterator(path, opts)) == records


def _write(path, records):
    with tw.python_io.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    return str(path)


@pytest.mark.parametrize("where, what", [
    (lambda sizes: sizes[0] + 16 + 12 + 5, "CRC32C of its"),   # a data byte of record 2
    (lambda sizes: sizes[0] + 16 + 2, "length"),               # the length field of record 2
    (lambda sizes: sizes[0] + 16 + 9, "length"),               # the length checksum of record 2
    (lambda sizes: sizes[0] + 16 + 12 + 30 + 1, "CRC32C of its"),  # the data checksum of record 2
])
def test_corruption_names_file_and_offset(tmp_path, where, what):
    records = [b"first record", b"x" * 30, b"third"]
    path = _write(tmp_path / "bad.tfrecord", records)
    raw = bytearray(open(path, "rb").read())
    raw[where([len(r) for r in records])] ^= 0x20
    open(path, "wb").write(bytes(raw))
    it = tw.python_io.tf_record_iterator(path)
    assert next(it) == b"first record"
    with pytest.raises(errors.DataLossError, match=rf"{path}.*corrupted record at offset 28\b.*{what}"):
        next(it)


@pytest.mark.parametrize("cut", [3, 12, 20, 12 + 30, 12 + 30 + 2])
def test_truncated_file_names_file_and_offset(tmp_path, cut):
    path = _write(tmp_path / "t.tfrecord", [b"first record", b"x" * 30])
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[:28 + cut])
    it = tw.python_io.tf_record_iterator(path)
    assert next(it) == b"first record"
    with pytest.raises(errors.DataLossError, match=rf"{path}.*truncated record at offset 28\b"):
        next(it)


def test_missing_record_file_is_not_found(tmp_path):
    missing = str(tmp_path / "nope.tfrecord")
    with pytest.raises(errors.NotFoundError, match="nope.tfrecord"):
        list(tw.python_io.tf_record_iterator(missing))
    with pytest.raises(errors.NotFoundError, match="no_dir"):
        tw.python_io.TFRecordWriter(str(tmp_path / "no_dir" / "x"))


def test_writer_after_close_fails(tmp_path):
    w = tw.python_io.TFRecordWriter(str(tmp_path / "w"))
    w.close()
    w.close()  # idempotent
    with pytest.raises(errors.FailedPreconditionError, match="closed"):
        w.write(b"x")
