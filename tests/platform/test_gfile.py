"""tw.gfile on local paths: TF1's file object and functions, and the tw.errors they raise."""

import os

import pytest

import tensorweave as tw
from tensorweave import errors


def test_gfile_text_and_binary_modes(tmp_path):
    p = str(tmp_path / "a.txt")
    with tw.gfile.GFile(p, "w") as f:
        f.write("line 1\n")
        f.write(b"line 2\n")           # TF1 takes bytes in text mode too
    with tw.gfile.GFile(p, "a") as f:
        f.write("line 3\n")
    with tw.gfile.GFile(p) as f:
        assert f.read() == "line 1\nline 2\nline 3\n"
    with tw.gfile.Open(p, "rb") as f:
        assert f.read(4) == b"line" and f.tell() == 4
        f.seek(0)
        assert f.readline() == b"line 1\n"
        assert f.readlines() == [b"line 2\n", b"line 3\n"]
    assert list(tw.gfile.FastGFile(p, "r")) == ["line 1\n", "line 2\n", "line 3\n"]
    assert tw.gfile.GFile(p).size() == 21
    with tw.gfile.GFile(p, "wb") as f:
        f.write(bytes([0, 255]))
    assert open(p, "rb").read() == b"\x00\xff"


def test_gfile_opens_lazily_and_reports_tf_errors(tmp_path):
    missing = tw.gfile.GFile(str(tmp_path / "missing.txt"))   # no error until used, as TF1
    with pytest.raises(errors.NotFoundError, match="missing.txt"):
        missing.read()
    with pytest.raises(errors.NotFoundError):
        tw.gfile.GFile(str(tmp_path / "no_dir" / "x"), "w").write("x")
    p = str(tmp_path / "r.txt")
    open(p, "w").write("x")
    with pytest.raises(errors.PermissionDeniedError, match="isn't open for writing"):
        tw.gfile.GFile(p, "r").write("y")
    with pytest.raises(errors.PermissionDeniedError, match="isn't open for reading"):
        tw.gfile.GFile(p, "w").read()
    with pytest.raises(errors.InvalidArgumentError, match="mode must be one of"):
        tw.gfile.GFile(p, "rw")
    with pytest.raises(errors.FailedPreconditionError, match="directory"):
        tw.gfile.GFile(str(tmp_path)).read()
    with pytest.raises(errors.UnimplementedError, match="only local paths"):
        tw.gfile.Exists("gs://bucket/file")
    f = tw.gfile.GFile(p)
    f.close()
    with pytest.raises(errors.FailedPreconditionError, match="closed"):
        f.read()


def test_directories(tmp_path):
    d = str(tmp_path / "a" / "b" / "c")
    assert not tw.gfile.Exists(d) and not tw.gfile.IsDirectory(d)
    tw.gfile.MakeDirs(d)
    tw.gfile.MakeDirs(d)                    # existing is fine
    assert tw.gfile.Exists(d) and tw.gfile.IsDirectory(d)
    with pytest.raises(errors.AlreadyExistsError):
        tw.gfile.MkDir(d)
    with pytest.raises(errors.NotFoundError):
        tw.gfile.MkDir(str(tmp_path / "x" / "y"))
    tw.gfile.MkDir(str(tmp_path / "x"))
    for name in ("f2.txt", "f1.txt", "g.csv"):
        open(os.path.join(tmp_path, "a", name), "w").write(name)
    assert tw.gfile.ListDirectory(str(tmp_path / "a")) == ["b", "f1.txt", "f2.txt", "g.csv"]
    assert tw.gfile.Glob(str(tmp_path / "a" / "f*.txt")) == [str(tmp_path / "a" / n) for n in ("f1.txt", "f2.txt")]
    assert tw.gfile.Glob(str(tmp_path / "nothing*")) == []
    walked = list(tw.gfile.Walk(str(tmp_path / "a")))
    assert walked[0] == (str(tmp_path / "a"), ["b"], ["f1.txt", "f2.txt", "g.csv"])
    assert [w[0] for w in walked] == [str(tmp_path / "a"), str(tmp_path / "a" / "b"), d]
    assert [w[0] for w in tw.gfile.Walk(str(tmp_path / "a"), in_order=False)][-1] == str(tmp_path / "a")
    assert list(tw.gfile.Walk(str(tmp_path / "missing"))) == []
    with pytest.raises(errors.NotFoundError):
        tw.gfile.ListDirectory(str(tmp_path / "missing"))
    with pytest.raises(errors.FailedPreconditionError, match="exists and is not a directory"):
        tw.gfile.MakeDirs(str(tmp_path / "a" / "g.csv"))
    tw.gfile.DeleteRecursively(str(tmp_path / "a"))
    assert not tw.gfile.Exists(str(tmp_path / "a"))
    with pytest.raises(errors.NotFoundError):
        tw.gfile.DeleteRecursively(str(tmp_path / "a"))


def test_files_copy_rename_remove_stat(tmp_path):
    a, b, c = (str(tmp_path / n) for n in ("a", "b", "c"))
    with tw.gfile.GFile(a, "w") as f:
        f.write("12345")
    st = tw.gfile.Stat(a)
    assert st.length == 5 and st.is_directory is False and st.mtime_nsec > 0
    tw.gfile.Copy(a, b)
    with pytest.raises(errors.AlreadyExistsError, match="overwrite=True"):
        tw.gfile.Copy(a, b)
    open(a, "w").write("new")
    tw.gfile.Copy(a, b, overwrite=True)
    assert open(b).read() == "new"
    tw.gfile.Rename(b, c)
    assert not tw.gfile.Exists(b) and open(c).read() == "new"
    with pytest.raises(errors.AlreadyExistsError):
        tw.gfile.Rename(a, c)
    tw.gfile.Rename(a, c, overwrite=True)
    assert not tw.gfile.Exists(a)
    with pytest.raises(errors.NotFoundError):
        tw.gfile.Copy(a, b)
    with pytest.raises(errors.NotFoundError):
        tw.gfile.Rename(a, b)
    with pytest.raises(errors.NotFoundError):
        tw.gfile.Stat(a)
    tw.gfile.Remove(c)
    with pytest.raises(errors.NotFoundError):
        tw.gfile.Remove(c)
    with pytest.raises(errors.FailedPreconditionError, match="is a directory"):
        tw.gfile.Remove(str(tmp_path))
    assert tw.gfile.Stat(str(tmp_path)).is_directory


def test_permission_denied(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their permissions")
    p = tmp_path / "secret"
    p.write_text("x")
    p.chmod(0)
    try:
        with pytest.raises(errors.PermissionDeniedError):
            tw.gfile.GFile(str(p)).read()
    finally:
        p.chmod(0o600)


def test_lower_case_aliases():
    assert tw.gfile.exists is tw.gfile.Exists and tw.gfile.rmtree is tw.gfile.DeleteRecursively
    assert tw.gfile.listdir is tw.gfile.ListDirectory and tw.gfile.isdir is tw.gfile.IsDirectory


@pytest.mark.parametrize("exc,cls", [
    (PermissionError(13, "Permission denied"), errors.PermissionDeniedError),
    (FileNotFoundError(2, "No such file"), errors.NotFoundError),
    (FileExistsError(17, "File exists"), errors.AlreadyExistsError),
    (IsADirectoryError(21, "Is a directory"), errors.FailedPreconditionError),
    (OSError(28, "No space left on device"), errors.ResourceExhaustedError),
])
def test_os_errors_map_to_tf_error_classes(exc, cls):
    # Runs where the permission test above cannot (as root): the mapping every function uses.
    err = tw.gfile._os_error(exc, "/some/path", "open")
    assert type(err) is cls and "/some/path: open:" in str(err)
