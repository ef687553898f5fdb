"""Every CUDA C module compiles to PTX with nvcc (no GPU needed), defines exactly the functions
the catalog names, and each function's PTX parameter list matches its launch signature:
the types, and the byte offsets PyCUDA's native-aligned argument packing gives them.
Skipped where nvcc is absent."""

import os
import re
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from tensorweave_cuda import kernels
from tensorweave_cuda.doctor import find_nvcc
from tensorweave_cuda.kernels import catalog

ARCH = "sm_80"


NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin")
MODULES = catalog.modules()

# PTX parameter declaration per signature code: (type, size, alignment)
PTX_PARAM = {"P": (".u64", 8, 8), "q": (".u64", 8, 8), "i": (".u32", 4, 4), "f": (".f32", 4, 4),
             "d": (".f64", 8, 8), "B": (".u8", 1, 1)}
_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?(\.\w+)\s+\w+(?:\[(\d+)\])?")


def _module_id(key):
    file, defines = key
    return file + "".join(f"[{v}]" for k, v in defines if k == "TW_SUFFIX")


def _compile(key, tmpdir):
    file, defines = key
    src = os.path.join(tmpdir, _module_id(key).replace("[", "_").replace("]", "") + ".cu")
    with open(src, "w") as f:
        f.write(kernels.source_text(file))
    out = src[:-3] + ".ptx"
    cmd = [NVCC, "--ptx", f"-arch={ARCH}", *[f"-D{k}={v}" for k, v in defines], "-o", out, src]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return proc, (open(out).read() if proc.returncode == 0 else "")


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    """key -> (nvcc result, PTX text), compiled in parallel once for the module."""
    tmp = str(tmp_path_factory.mktemp("ptx"))
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as ex:
        results = dict(zip(MODULES, ex.map(lambda k: _compile(k, tmp), MODULES)))
    return results


def test_kernel_sources_are_packaged():
    names = {p.name for p in kernels.sources()}
    assert {"elementwise.cu", "cast.cu", "reduce.cu", "argmax.cu", "softmax.cu", "training.cu", "conv.cu", "pool.cu",
            "random.cu"} <= names
    assert (kernels.KERNEL_DIR / "common.cuh").exists() and (kernels.KERNEL_DIR / "spatial.cuh").exists()
    # every source the catalog refers to exists, and every source is referred to
    assert {f for f, _ in MODULES} == names


def test_includes_are_pasted():
    text = kernels.source_text("elementwise.cu")
    assert not re.search(r'^#include "', text, re.M) and "struct TwBcast" in text
    text = kernels.source_text("pool.cu")  # two local headers
    assert not re.search(r'^#include "', text, re.M) and "struct TwBcast" in text and "struct TwImage" in text


@needs_nvcc
@pytest.mark.parametrize("key", list(MODULES), ids=_module_id)
def test_module_compiles_to_ptx(ptx, key):
    proc, text = ptx[key]
    assert proc.returncode == 0, f"nvcc failed on {_module_id(key)}:\n{proc.stdout}\n{proc.stderr}"
    assert ".version" in text and f".target {ARCH}" in text
    entries = dict(_ENTRY.findall(text))
    expected = {r.name for r in MODULES[key]}
    assert set(entries) == expected, (f"missing {sorted(expected - set(entries))}, "
                                      f"unexpected {sorted(set(entries) - expected)}")


def _signature_dtype(ref):
    suffix = dict(ref.defines).get("TW_SUFFIX")
    return next((d for d in catalog.DTYPES.values() if d.suffix == suffix), None)


@needs_nvcc
@pytest.mark.parametrize("key", list(MODULES), ids=_module_id)
def test_signatures_match_ptx(ptx, key):
    """The launch contract: PTX parameters in order, with the offsets struct.pack gives."""
    _, text = ptx[key]
    entries = dict(_ENTRY.findall(text))
    for ref in MODULES[key]:
        params = _PARAM.findall(entries[ref.name])
        sig = ref.sig.replace("v", _signature_dtype(ref).code) if "v" in ref.sig else ref.sig
        assert len(params) == len(sig), f"{ref.name}: PTX has {len(params)} parameters, signature {sig!r}"
        offset, fmt = 0, ""
        for code, (align, typ, count) in zip(sig, params):
            if code in catalog.STRUCT_FIELDS:
                size, al = 8 * catalog.STRUCT_FIELDS[code], 8
                assert (typ, int(count), int(align)) == (".b8", size, 8), f"{ref.name}: struct {code} is {params}"
                part = "q" * catalog.STRUCT_FIELDS[code]
            else:
                want, size, al = PTX_PARAM[code]
                assert typ == want, f"{ref.name}: parameter {code!r} is {typ} in PTX, expected {want}"
                part = code
            offset = -(-offset // al) * al
            # PyCUDA packs with native alignment (its _pvt_struct is the struct module's code)
            assert struct.calcsize(fmt + part) == offset + size, f"{ref.name}: offset of parameter {code!r}"
            fmt += part
            offset += size
        assert catalog.expand_sig(ref.sig, _signature_dtype(ref)) == fmt
