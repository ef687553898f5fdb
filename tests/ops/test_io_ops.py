"""Input ops (whitepaper 4.5): the record format and its checksum, reader ops over files
and filename queues, decode ops (raw bytes, CSV, numbers), file ops."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.framework import errors, record_io


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
    (bytes([0x01, 0xC0] + [0] * 14 + [0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18, 0x28]
           + [0] * 7 + [0x02] + [0] * 7), 0xD9963A56),  # RFC 3720 B.4, an iSCSI read PDU
    (b"The quick brown fox jumps over the lazy dog", 0x22620404),
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


def test_optional_native_crc32c_modules_are_used_when_importable(monkeypatch):
    import sys
    import types

    calls = []

    def fake_extend(crc, data):
        calls.append(("google", crc, data))
        return record_io._crc32c_python(data, crc)

    monkeypatch.setitem(sys.modules, "google_crc32c", types.SimpleNamespace(implementation="c", extend=fake_extend))
    native = record_io._find_native()
    assert native(b"123456789") == 0xE3069283 and calls == [("google", 0, b"123456789")]
    # google_crc32c's pure-Python fallback is slower than ours: then try crc32c, else ours
    monkeypatch.setitem(sys.modules, "google_crc32c", types.SimpleNamespace(implementation="python"))
    monkeypatch.setitem(sys.modules, "crc32c", types.SimpleNamespace(
        crc32c=lambda data, crc=0: record_io._crc32c_python(data, crc)))
    assert record_io._find_native()(b"123456789", 0) == 0xE3069283
    monkeypatch.setitem(sys.modules, "crc32c", None)  # not importable
    assert record_io._find_native() is None


def test_masked_crc_and_known_record_bytes():
    assert record_io.masked_crc32c(b"123456789") == _mask(0xE3069283)
    assert record_io.masked_crc32c(b"1234567890asdfghjkl") == 4134599430  # a third-party TFRecord test's value
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


# ---------------------------------------------------------------------------------------
# readers
def _filename_queue(files, close=True):
    q = tw.FIFOQueue(len(files) + 4, tw.string, shapes=[[]])
    ops = [q.enqueue_many([list(files)])]
    if close:
        ops.append(q.close())
    return q, ops


def _read_all(sess, key, value):
    out = []
    while True:
        try:
            k, v = sess.run([key, value])
        except errors.OutOfRangeError:
            return out
        out.append((k, v))


def test_text_line_reader_lines_keys_header_and_line_endings(tmp_path, sess):
    a = tmp_path / "a.csv"
    a.write_bytes(b"header\n1,2\r\n\n3,4")           # CRLF, an empty line, no final newline
    b = tmp_path / "b.csv"
    b.write_bytes(b"header only\n")                   # nothing after the header
    c = tmp_path / "c.csv"
    c.write_bytes(b"header\nlast\n")
    q, fill = _filename_queue([str(a), str(b), str(c)])
    reader = tw.TextLineReader(skip_header_lines=1)
    key, value = reader.read(q)
    assert key.shape.as_list() == [] and value.dtype == tw.string
    sess.run(fill)
    got = _read_all(sess, key, value)
    assert got == [(f"{a}:2".encode(), b"1,2"), (f"{a}:3".encode(), b""), (f"{a}:4".encode(), b"3,4"),
                   (f"{c}:2".encode(), b"last")]
    produced, completed = sess.run([reader.num_records_produced(), reader.num_work_units_completed()])
    assert (produced, completed) == (4, 3)
    assert produced.dtype == np.int64


def test_fixed_length_record_reader_header_footer_hop(tmp_path, sess):
    f1 = tmp_path / "f1.bin"
    f1.write_bytes(b"HH" + b"aaaa" + b"bbbb" + b"cc" + b"FFF")   # a partial record before the footer
    f2 = tmp_path / "f2.bin"
    f2.write_bytes(b"HH" + b"0123456789" + b"FFF")
    q1, fill1 = _filename_queue([str(f1)])
    r1 = tw.FixedLengthRecordReader(record_bytes=4, header_bytes=2, footer_bytes=3)
    k1, v1 = r1.read(q1)
    q2, fill2 = _filename_queue([str(f2)])
    r2 = tw.FixedLengthRecordReader(record_bytes=4, header_bytes=2, footer_bytes=3, hop_bytes=3)
    k2, v2 = r2.read(q2)
    sess.run(fill1 + fill2)
    assert _read_all(sess, k1, v1) == [(f"{f1}:0".encode(), b"aaaa"), (f"{f1}:1".encode(), b"bbbb")]
    assert [v for _, v in _read_all(sess, k2, v2)] == [b"0123", b"3456", b"6789"]
    with pytest.raises(errors.InvalidArgumentError, match="record_bytes must be > 0"):
        tw.FixedLengthRecordReader(record_bytes=0)


def test_fixed_length_reader_hop_longer_than_record_and_gzip(tmp_path, sess):
    import gzip

    f = tmp_path / "g.bin.gz"
    f.write_bytes(gzip.compress(b"H" + b"ab--cd--ef-"))
    q, fill = _filename_queue([str(f)])
    r = tw.FixedLengthRecordReader(record_bytes=2, header_bytes=1, hop_bytes=4, encoding="GZIP")
    k, v = r.read(q)
    sess.run(fill)
    assert [x for _, x in _read_all(sess, k, v)] == [b"ab", b"cd", b"ef"]


def test_tfrecord_reader_keys_are_byte_offsets_across_files(tmp_path, sess):
    p1 = _write(tmp_path / "one.tfrecord", [b"a", b"bb", b""])
    p2 = _write(tmp_path / "two.tfrecord", [b"ccc"])
    q, fill = _filename_queue([p1, p2])
    reader = tw.TFRecordReader()
    key, value = reader.read(q)
    sess.run(fill)
    assert _read_all(sess, key, value) == [
        (f"{p1}:0".encode(), b"a"), (f"{p1}:17".encode(), b"bb"), (f"{p1}:35".encode(), b""),
        (f"{p2}:0".encode(), b"ccc")]
    assert sess.run(reader.num_work_units_completed()) == 2


def test_tfrecord_reader_gzip_option(tmp_path, sess):
    opts = tw.python_io.TFRecordOptions(tw.python_io.TFRecordCompressionType.GZIP)
    path = str(tmp_path / "z.tfrecord.gz")
    with tw.python_io.TFRecordWriter(path, opts) as w:
        w.write(b"zipped")
    q, fill = _filename_queue([path])
    key, value = tw.TFRecordReader(options=opts).read(q)
    sess.run(fill)
    assert _read_all(sess, key, value) == [(f"{path}:0".encode(), b"zipped")]


def test_whole_file_reader(tmp_path, sess):
    paths = []
    for i, data in enumerate([b"first\nfile", b"", b"\x00\xff"]):
        p = tmp_path / f"w{i}"
        p.write_bytes(data)
        paths.append(str(p))
    q, fill = _filename_queue(paths)
    key, value = tw.WholeFileReader().read(q)
    sess.run(fill)
    assert _read_all(sess, key, value) == [(paths[0].encode(), b"first\nfile"), (paths[1].encode(), b""),
                                           (paths[2].encode(), b"\x00\xff")]


def test_read_up_to_spans_files_and_returns_the_rest_at_the_end(tmp_path, sess):
    files = [_write(tmp_path / f"r{i}.tfrecord", [f"{i}-{j}".encode() for j in range(3)]) for i in range(3)]
    q, fill = _filename_queue(files)
    keys, values = tw.TFRecordReader().read_up_to(q, 4)
    assert keys.shape.as_list() == [None]
    sess.run(fill)
    batches = []
    with pytest.raises(errors.OutOfRangeError, match="closed"):
        while True:
            batches.append(sess.run(values).tolist())
    assert batches == [[b"0-0", b"0-1", b"0-2", b"1-0"], [b"1-1", b"1-2", b"2-0", b"2-1"], [b"2-2"]]


def test_read_after_the_last_file_is_out_of_range_and_reset_restarts(tmp_path, sess):
    path = _write(tmp_path / "x.tfrecord", [b"only"])
    q = tw.FIFOQueue(10, tw.string, shapes=[[]])
    enq = q.enqueue([path])
    reader = tw.TFRecordReader()
    key, value = reader.read(q)
    sess.run(enq)
    assert sess.run(value) == b"only"
    sess.run([enq, q.close()])
    assert sess.run(value) == b"only"  # the second copy of the file
    with pytest.raises(errors.OutOfRangeError, match="closed and has insufficient elements"):
        sess.run(value)
    assert sess.run(reader.num_records_produced()) == 2
    sess.run(reader.reset())
    assert sess.run([reader.num_records_produced(), reader.num_work_units_completed()]) == [0, 0]


def test_missing_file_is_not_found_and_the_reader_goes_on(tmp_path, sess):
    good = _write(tmp_path / "good.tfrecord", [b"fine"])
    q, fill = _filename_queue([str(tmp_path / "missing.tfrecord"), good])
    key, value = tw.TFRecordReader().read(q)
    sess.run(fill)
    with pytest.raises(errors.NotFoundError, match=r"ReaderReadV2.*missing\.tfrecord"):
        sess.run(value)
    assert sess.run(value) == b"fine"


def test_corrupt_record_file_through_the_reader_names_file_and_offset(tmp_path, sess):
    path = _write(tmp_path / "bad.tfrecord", [b"ok", b"damaged"])
    raw = bytearray(open(path, "rb").read())
    raw[18 + 12 + 3] ^= 1
    open(path, "wb").write(bytes(raw))
    q, fill = _filename_queue([path])
    key, value = tw.TFRecordReader().read(q)
    sess.run(fill)
    assert sess.run(value) == b"ok"
    with pytest.raises(errors.DataLossError, match=rf"{path}.*offset 18\b"):
        sess.run(value)


def test_read_waits_for_a_filename_without_holding_the_thread(tmp_path):
    # The read comes first in the step; the enqueue that feeds it runs after it in the same
    # step, on the one executor thread. A read that blocked its thread would never see it.
    path = _write(tmp_path / "late.tfrecord", [b"arrived"])
    q = tw.FIFOQueue(4, tw.string, shapes=[[]])
    key, value = tw.TFRecordReader().read(q)
    with tw.control_dependencies(None):
        enq = q.enqueue([path])
    config = tw.ConfigProto(inter_op_parallelism_threads=1)
    with tw.Session(config=config) as s:
        out = s.run([value, enq], options=tw.RunOptions(timeout_in_ms=10_000))
    assert out[0] == b"arrived"


def test_read_timeout_loses_no_filename(tmp_path, sess):
    path = _write(tmp_path / "t.tfrecord", [b"r0", b"r1"])
    q = tw.FIFOQueue(4, tw.string, shapes=[[]])
    key, value = tw.TFRecordReader().read(q)
    with pytest.raises(errors.DeadlineExceededError):
        sess.run(value, options=tw.RunOptions(timeout_in_ms=50))  # the queue is empty
    sess.run(q.enqueue([path]))
    assert [sess.run(value), sess.run(value)] == [b"r0", b"r1"]


def test_read_up_to_that_fails_keeps_its_records_for_the_next_read(tmp_path, sess):
    good = _write(tmp_path / "good.tfrecord", [b"r0", b"r1", b"r2"])
    q, fill = _filename_queue([good, str(tmp_path / "missing.tfrecord")])
    reader = tw.TFRecordReader()
    keys, values = reader.read_up_to(q, 5)
    sess.run(fill)
    with pytest.raises(errors.NotFoundError, match="missing.tfrecord"):
        sess.run(values)  # three records read, then the second file is missing
    assert sess.run(reader.num_records_produced()) == 0
    assert sess.run(values).tolist() == [b"r0", b"r1", b"r2"]  # then the queue is closed and empty
    assert sess.run(reader.num_records_produced()) == 3


def test_read_waiting_behind_another_is_withdrawn_when_its_step_times_out(tmp_path, sess):
    import threading
    import time

    from tensorweave.runtime import readers

    path = _write(tmp_path / "w.tfrecord", [b"r0", b"r1"])
    q = tw.FIFOQueue(4, tw.string, shapes=[[]])
    reader = tw.TFRecordReader()
    key, value = reader.read(q)
    size = q.size()
    resource = readers.lookup(sess._resources, sess.run(reader.reader_ref))
    first = {}

    def first_read():  # parks in the empty filename queue, holding the reader
        try:
            first["value"] = sess.run(value, options=tw.RunOptions(timeout_in_ms=30_000))
        except Exception as e:  # noqa: BLE001 - checked below
            first["error"] = e

    t = threading.Thread(target=first_read)
    t.start()
    deadline = time.monotonic() + 10
    while not resource._busy and time.monotonic() < deadline:  # the first read has the reader
        time.sleep(0.001)
    assert resource._busy
    try:
        # The second read waits behind the first in the reader; its timeout withdraws it.
        with pytest.raises(errors.DeadlineExceededError):
            sess.run(value, options=tw.RunOptions(timeout_in_ms=100))
        assert not resource._waiting
    finally:
        sess.run(q.enqueue([path]))
        t.join(timeout=30)
    assert not t.is_alive() and first == {"value": b"r0"}
    assert sess.run(value) == b"r1"  # nothing was taken by the withdrawn read
    assert sess.run(size) == 0


def test_concurrent_reads_of_one_reader_lose_and_repeat_nothing(tmp_path, sess):
    import threading

    files = [_write(tmp_path / f"c{i}.tfrecord", [f"{i}:{j}".encode() for j in range(25)]) for i in range(8)]
    q, fill = _filename_queue(files)
    key, value = tw.TFRecordReader().read(q)
    sess.run(fill)
    seen, errs = [], []

    def worker():
        try:
            while True:
                try:
                    seen.append(sess.run(value, options=tw.RunOptions(timeout_in_ms=20_000)))
                except errors.OutOfRangeError:
                    return
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errs
    assert sorted(seen) == sorted(f"{i}:{j}".encode() for i in range(8) for j in range(25))


def test_reader_pipeline_with_input_producer_and_shuffle_batch(tmp_path):
    files = [_write(tmp_path / f"p{i}.tfrecord",
                    [np.array([i * 10 + j], np.int64).tobytes() for j in range(10)]) for i in range(3)]
    fq = tw.train.string_input_producer(files, num_epochs=2, shuffle=False)
    _, value = tw.TFRecordReader().read(fq)
    x = tw.reshape(tw.decode_raw(value, tw.int64), [])
    batch = tw.train.shuffle_batch([x], batch_size=7, capacity=30, min_after_dequeue=5, seed=1,
                                   allow_smaller_final_batch=True)
    got = []
    with tw.Session() as s:
        s.run(tw.local_variables_initializer())
        coord = tw.train.Coordinator()
        threads = tw.train.start_queue_runners(s, coord)
        try:
            while True:
                got.extend(s.run(batch).tolist())
        except errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
            coord.join(threads, stop_grace_period_secs=10)
    assert sorted(got) == sorted(list(range(30)) * 2)


# ---------------------------------------------------------------------------------------
# files
def test_read_write_and_match_files(tmp_path, sess):
    target = str(tmp_path / "sub" / "out.bin")
    w = tw.write_file(target, b"\x00payload")
    sess.run(w)
    assert open(target, "rb").read() == b"\x00payload"
    assert sess.run(tw.read_file(target)) == b"\x00payload"
    (tmp_path / "sub" / "b.txt").write_text("b")
    (tmp_path / "sub" / "a.txt").write_text("a")
    found = sess.run(tw.matching_files(str(tmp_path / "sub" / "*.txt")))
    assert found.tolist() == [str(tmp_path / "sub" / n).encode() for n in ("a.txt", "b.txt")]
    assert sess.run(tw.matching_files(str(tmp_path / "none*"))).shape == (0,)
    with pytest.raises(errors.NotFoundError, match="no_such_file"):
        sess.run(tw.read_file(str(tmp_path / "no_such_file")))


def test_match_filenames_once(tmp_path):
    for n in ("x1", "x2"):
        (tmp_path / n).write_text(n)
    files = tw.train.match_filenames_once(str(tmp_path / "x*"))
    with tw.Session() as s:
        s.run(tw.local_variables_initializer())
        (tmp_path / "x3").write_text("later")  # matched once: at initialisation
        assert s.run(files).tolist() == [str(tmp_path / n).encode() for n in ("x1", "x2")]


# ---------------------------------------------------------------------------------------
# decoding
def test_decode_raw_values_shapes_and_byte_order(sess):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    recs = tw.constant([x[0].tobytes(), x[1].tobytes()])
    out = tw.decode_raw(recs, tw.float32)
    assert out.shape.as_list() == [2, None] and out.dtype == tw.float32
    np.testing.assert_array_equal(sess.run(out), x)
    be = tw.decode_raw(tw.constant(np.array([1, 256], ">i2").tobytes()), tw.int16, little_endian=False)
    le = tw.decode_raw(tw.constant(np.array([1, 256], "<i2").tobytes()), tw.int16)
    assert sess.run(be).tolist() == [1, 256] == sess.run(le).tolist()
    assert sess.run(tw.decode_raw(tw.constant(b"\x00\x02\x01"), tw.bool)).tolist() == [False, True, True]
    assert sess.run(tw.decode_raw(tw.constant(b"ab"), tw.uint8)).tolist() == [97, 98]


def test_decode_raw_errors(sess):
    with pytest.raises(errors.InvalidArgumentError, match="length 7, not a multiple of 4"):
        sess.run(tw.decode_raw(tw.constant(b"1234567"), tw.float32))
    with pytest.raises(errors.InvalidArgumentError, match="element 1 has 2"):
        sess.run(tw.decode_raw(tw.constant([b"1234", b"12"]), tw.uint8))
    with pytest.raises(errors.InvalidArgumentError):
        tw.decode_raw(tw.constant(b"x"), tw.string)


def test_decode_csv_values_defaults_quotes_and_options(sess):
    recs = tw.constant(['1,2.5,"a, ""quoted"" b",7', ',,plain,', '3,-1e3,"",8'])
    cols = tw.decode_csv(recs, [[0], [0.5], ["dflt"], tw.constant([9], tw.int64)])
    assert [c.dtype for c in cols] == [tw.int32, tw.float32, tw.string, tw.int64]
    assert all(c.shape.as_list() == [3] for c in cols)
    a, b, c, d = sess.run(cols)
    assert a.tolist() == [1, 0, 3] and b.tolist() == [2.5, 0.5, -1000.0]
    assert c.tolist() == [b'a, "quoted" b', b"plain", b"dflt"] and d.tolist() == [7, 9, 8]
    tab = tw.decode_csv(tw.constant(["x\tNA\t3"]), [[""], [1.0], [0]], field_delim="\t", na_value="NA")
    assert [v.tolist() for v in sess.run(tab)] == [[b"x"], [1.0], [3]]
    sel = tw.decode_csv(tw.constant("a,2,b,4"), [[0], [0]], select_cols=[1, 3])
    assert [v.tolist() for v in sess.run(sel)] == [2, 4]
    raw = tw.decode_csv(tw.constant('"a"'), [[""]], use_quote_delim=False)
    assert sess.run(raw)[0] == b'"a"'


@pytest.mark.parametrize("records, defaults, message", [
    (["1,2", "1,2,3"], [[0], [0]], r"record 1 \(b'1,2,3'\): expected 2 fields but found 3"),
    (["1,x"], [[0], [0]], r"record 0 \(b'1,x'\): field 1 is not a valid int32: b'x'"),
    (["1,2.5"], [[0], [0]], "field 1 is not a valid int32"),
    (["1,1e"], [[0], [0.0]], "field 1 is not a valid float32"),
    (["9999999999"], [[0]], "field 0 is not a valid int32"),
    (["1,"], [[0], "required int32"], "field 1 is required but missing"),
    (['"unterminated'], [[""]], "quoted field does not end"),
    (['a"b'], [[""]], "not quoted but contains a quote"),
    (['"a"b'], [[""]], "must be doubled"),
])
def test_decode_csv_errors_name_record_and_field(sess, records, defaults, message):
    defaults = [tw.constant([], tw.int32) if d == "required int32" else d for d in defaults]
    with pytest.raises(errors.InvalidArgumentError, match=message):
        sess.run(tw.decode_csv(tw.constant(records), defaults))


def test_decode_csv_build_time_checks():
    with pytest.raises(errors.InvalidArgumentError, match="0 or 1 element"):
        tw.decode_csv(tw.constant(["1"]), [[1, 2]])
    with pytest.raises(errors.InvalidArgumentError, match="DecodeCSV supports"):
        tw.decode_csv(tw.constant(["1"]), [[True]])
    with pytest.raises(errors.InvalidArgumentError, match="empty list"):
        tw.decode_csv(tw.constant(["1"]), [[]])


def test_string_to_number(sess):
    s = tw.constant([[" 1.5", "-2e2"], ["inf", "7"]])
    np.testing.assert_array_equal(sess.run(tw.string_to_number(s)), np.array([[1.5, -200], [np.inf, 7]], np.float32))
    assert sess.run(tw.string_to_number(tw.constant(["12", "-3"]), tw.int64)).tolist() == [12, -3]
    assert tw.string_to_number(s).shape.as_list() == [2, 2]
    with pytest.raises(errors.InvalidArgumentError, match=r"could not convert string b'1_0'"):
        sess.run(tw.string_to_number(tw.constant(["1_0"]), tw.int32))
    with pytest.raises(errors.InvalidArgumentError, match="element 1"):
        sess.run(tw.string_to_number(tw.constant(["1", "3000000000"]), tw.int32))
