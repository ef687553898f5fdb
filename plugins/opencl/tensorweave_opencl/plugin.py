"""Entry point of the OpenCL plugin. A skeleton: it registers nothing and says so, and why.

The status probe must stay cheap (it runs whenever a process loads its plugins): it looks
for pyopencl without importing it and lists the ICD files, without creating a context.
"""

from __future__ import annotations

import importlib.util
import os

from tensorweave.plugins import hookimpl

ICD_DIR = "/etc/OpenCL/vendors"


def icd_files() -> list[str]:
    """The OpenCL ICD files the ICD loader would read (``OCL_ICD_VENDORS`` overrides the dir)."""
    where = os.environ.get("OCL_ICD_VENDORS") or ICD_DIR
    if os.path.isfile(where):
        return [os.path.basename(where)]
    try:
        return sorted(f for f in os.listdir(where) if f.endswith(".icd"))
    except OSError:
        return []


def status() -> str:
    have_pyopencl = importlib.util.find_spec("pyopencl") is not None
    icds = icd_files()
    icd_text = (f"OpenCL ICDs: {', '.join(icds)}" if icds
                else f"no OpenCL ICD in {os.environ.get('OCL_ICD_VENDORS') or ICD_DIR}")
    return ("skeleton: OpenCL kernels and devices not implemented yet, registers nothing "
            f"(pyopencl {'installed' if have_pyopencl else 'not installed'}; {icd_text})")


@hookimpl
def tensorweave_plugin_status():
    return status()
