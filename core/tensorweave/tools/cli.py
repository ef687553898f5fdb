"""The ``tensorweave`` command: which plugins loaded, which devices exist, what the machine has.

``tensorweave plugins``   every plugin: entry point, distribution, status, what it registered, note/error
``tensorweave devices``   the local devices the installed plugins create
``tensorweave doctor``    Python, NumPy, BLAS, what each plugin needs (OpenCL ICDs, nvcc, ...: their
                          ``tensorweave_doctor`` hooks), and hints (never applied silently)
``tensorweave version``   the core's version
``tensorweave worker --config cluster.toml --job worker --task 0``
                          serve one task of a cluster until SIGTERM/SIGINT (the task can also
                          come from ``$TW_CONFIG``); prints one ready line with its address
``tensorweave worker --resolver slurm|kubernetes|tf_config [--jobs ps=1,worker=2] [--port-base N]``
                          serve the task a cluster manager started: the cluster and this task come
                          from the environment (srun's SLURM_* variables, the pod's name and
                          namespace, $TW_CONFIG/$TF_CONFIG; distributed/resolvers.py)
``tensorweave cluster up|down|status``
                          a local cluster: one worker process per task (distributed/launcher.py)
``tensorweave cluster manifest --kubernetes --config cluster.toml|--jobs ps=1,worker=2 [--image IMG] [--out FILE]``
                          Kubernetes YAML: per job a headless Service and a StatefulSet whose pods
                          run ``tensorweave worker --resolver kubernetes`` (distributed/manifests.py)
``tensorweave trace SCRIPT.py [ARGS] --out DIR``
                          run a Python script with every Session.run traced; each step's Chrome
                          trace goes to DIR/step_<n>.json (open it in Perfetto's UI)

Also runs as ``python -m tensorweave``. Exit status: 0 on success, 1 when the plugins
conflict or a plugin's hooks are invalid, no device is available, or a task or cluster fails
to start or stop, 2 on a usage or configuration error. Messages the library logs (a plugin
that failed to load, ...) go to stderr; ``-v`` before the command shows debug detail
(tracebacks).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.metadata as md
import io
import logging
import os
import platform
import re
import runpy
import signal
import sys
import threading
import traceback

import numpy as np

import tensorweave
from tensorweave import plugins
from tensorweave.client.session import TRACE_DIR_ENV
from tensorweave.distributed import cluster as cl
from tensorweave.distributed import launcher, manifests, resolvers
from tensorweave.distributed.launcher import default_dir
from tensorweave.distributed.server import Server
from tensorweave.framework import errors
from tensorweave.runtime.device import create_local_devices

ENTRY_POINT_GROUP = "tensorweave"

# The kinds PluginInfo.registered counts, in display order, with singular/plural names.
_KINDS = [("ops", "op", "ops"), ("kernels", "kernel", "kernels"), ("devices", "device type", "device types"),
          ("allocators", "allocator", "allocators"), ("transports", "transport", "transports"),
          ("placers", "placer", "placers"), ("passes", "pass", "passes"), ("fusers", "fuser", "fusers")]


def _core_version() -> str:
    try:
        return md.version("tensorweave")
    except md.PackageNotFoundError:
        return "0+unknown"


def _err(msg: str) -> None:
    print(f"tensorweave: {msg}", file=sys.stderr)


def _table(rows: list[list[str]], header: list[str]) -> str:
    """A plain left-aligned table; the last column is not padded (it holds long notes)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for r in [header, *rows]:
        cells = [str(c).ljust(w) for c, w in zip(r, widths, strict=False)] + [str(r[-1])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def format_registered(counts: dict[str, int]) -> str:
    parts = []
    for key, one, many in _KINDS:
        n = counts.get(key)
        if n:
            parts.append(f"{n} {one if n == 1 else many}")
    parts += [f"{n} {k}" for k, n in counts.items() if n and k not in {k for k, _, _ in _KINDS}]
    return ", ".join(parts) or "nothing"


def _installed_entry_points() -> list[tuple[str, str, str]]:
    """(name, "distribution version", module) of every entry point, without importing any."""
    out = []
    for ep in sorted(md.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        label = f"{dist.metadata['Name']} {dist.version}" if dist is not None else "?"
        out.append((ep.name, label, ep.value))
    return out


def _report_conflict(e: Exception) -> int:
    _err(f"plugin conflict: {e}")
    eps = _installed_entry_points()
    if eps:
        print("\nInstalled tensorweave plugins (entry points; none is usable until the conflict is resolved):",
              file=sys.stderr)
        print(_table([list(r) for r in eps], ["NAME", "DISTRIBUTION", "MODULE"]), file=sys.stderr)
    print("\nUninstall one of the two distributions, skip one with TENSORWEAVE_DISABLE_PLUGINS=<name>, "
          "or register with override=True in the one that means to replace the other.", file=sys.stderr)
    return 1


def _load_registry(quiet: bool = False):
    """The registries, or the PluginConflictError that prevents them. ``quiet``: the caller
    reports failed plugins itself, so the loader's warnings would only repeat it."""
    loader_log = logging.getLogger(plugins.__name__)
    level = loader_log.level
    if quiet:
        loader_log.setLevel(logging.ERROR)
    try:
        return plugins.registry(), None
    except errors.PluginConflictError as e:
        return None, e
    finally:
        loader_log.setLevel(level)


# ---------------------------------------------------------------------------------------------
def cmd_plugins(args) -> int:
    reg, conflict = _load_registry(quiet=True)  # failed plugins are in the table, with the reason
    if conflict is not None:
        return _report_conflict(conflict)
    rows = []
    for p in reg.plugins:
        detail = p.error if p.status in ("failed", "invalid") else (p.note or "")
        if p.status == "failed" and p.note and p.note not in (p.error or ""):
            detail = f"{p.error} ({p.note})"
        row = [p.name, p.label, p.status, format_registered(p.registered) if p.status == "loaded" else "-"]
        if args.verbose:
            row.append(p.module)
        rows.append([*row, detail])
    header = ["NAME", "DISTRIBUTION", "STATUS", "REGISTERED"] + (["MODULE"] if args.verbose else []) + ["NOTE"]
    print(_table(rows, header))
    by_status: dict[str, int] = {}
    for p in reg.plugins:
        by_status[p.status] = by_status.get(p.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
    print(f"\n{len(reg.plugins)} plugins: {summary}")
    disabled = os.environ.get("TENSORWEAVE_DISABLE_PLUGINS")
    if disabled:
        print(f"TENSORWEAVE_DISABLE_PLUGINS={disabled}")
    invalid = [p for p in reg.plugins if p.status == "invalid"]
    for p in invalid:
        _err(f"plugin {p.name!r} ({p.label}) does not match tensorweave's hooks: {p.error}")
    return 1 if invalid else 0


def cmd_devices(args) -> int:
    reg, conflict = _load_registry()
    if conflict is not None:
        return _report_conflict(conflict)
    try:
        devices = create_local_devices()
    except errors.OpError as e:
        _err(str(e))
        disabled = os.environ.get("TENSORWEAVE_DISABLE_PLUGINS")
        if disabled:
            _err(f"note: TENSORWEAVE_DISABLE_PLUGINS={disabled} is set")
        return 1
    for i, d in enumerate(devices):
        if i:
            print()
        alloc = d.allocator
        limit = getattr(alloc, "memory_limit", None)
        limit_text = "no memory limit" if limit is None else f"limit {limit} bytes"
        available = sorted(reg.allocators.for_device(d.device_type)) if reg is not None else []
        print(d.name)
        print(f"  type         {d.device_type}")
        print(f"  description  {d.description or '-'}")
        print(f"  allocator    {getattr(alloc, 'name', '?')} ({type(alloc).__name__}, {limit_text})"
              + (f"; available: {', '.join(map(str, available))}" if available else ""))
        dt = d.device_type.upper()
        source = reg.device_factories.source_of(dt) if reg is not None and dt in reg.device_factories else None
        if source:
            print(f"  plugin       {source}")
    return 0


def cmd_version(args) -> int:
    print(f"tensorweave {_core_version()}")
    return 0


# ---------------------------------------------------------------------------------------------
# doctor
def _blas_from_numpy_config() -> dict:
    """name/version/config of NumPy's BLAS from ``numpy.show_config`` (dicts on NumPy >= 1.26)."""
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        return {"name": blas.get("name"), "version": blas.get("version"),
                "config": blas.get("openblas configuration")}
    except TypeError:  # older NumPy: show_config() only prints
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            np.show_config()
        text = buf.getvalue()
        m = re.search(r"blas[^\n]*\n(?:[^\n]*\n){0,6}?\s*libraries = \[([^\]]*)\]", text)
        name = m.group(1).strip("'\" ") if m else ("openblas" if "openblas" in text.lower() else None)
        return {"name": name, "version": None, "config": None}
    except Exception:
        return {"name": None, "version": None, "config": None}


def _loaded_openblas_paths() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
        return sorted(paths)
    except OSError:
        return []


def _openblas_runtime() -> dict:
    """The core OpenBLAS chose at run time and its thread count, asked from the loaded library.

    threadpoolctl answers this when installed; without it the library is called directly
    (its symbols carry a prefix/suffix in NumPy's wheels: scipy_openblas_get_corename64_).
    """
    try:
        import threadpoolctl  # optional: never a dependency
    except ImportError:
        threadpoolctl = None
    if threadpoolctl is not None:
        try:
            for info in threadpoolctl.threadpool_info():
                if info.get("internal_api") == "openblas":
                    return {"corename": info.get("architecture"), "threads": info.get("num_threads"),
                            "via": "threadpoolctl"}
        except Exception:
            pass
    for path in _loaded_openblas_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        out: dict = {"via": "ctypes"}
        for prefix, suffix in (("", ""), ("scipy_", "64_"), ("scipy_", ""), ("", "64_")):
            fn = getattr(lib, f"{prefix}openblas_get_corename{suffix}", None)
            if fn is None:
                continue
            fn.restype = ctypes.c_char_p
            out["corename"] = (fn() or b"").decode(errors="replace") or None
            nt = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
            if nt is not None:
                nt.restype = ctypes.c_int
                out["threads"] = nt()
            return out
    return {}


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


_AVX512_CORES = {"skylakex", "cooperlake", "sapphirerapids", "zen4", "zen5"}


def openblas_hint(blas_name: str | None, coretype_env: str | None, machine: str,
                  has_avx512: bool | None, corename: str | None = None) -> str | None:
    """The OPENBLAS_CORETYPE advice for this machine, or None. Pure, so it can be tested."""
    if not blas_name or "openblas" not in blas_name.lower():
        return None
    if machine.lower() not in ("x86_64", "amd64"):
        return None
    if coretype_env:
        if has_avx512 and coretype_env.lower() not in _AVX512_CORES:
            return (f"OPENBLAS_CORETYPE={coretype_env} is set, so OpenBLAS uses non-AVX-512 kernels on a CPU "
                    "that has AVX-512; `OPENBLAS_CORETYPE=SkylakeX` (or unsetting it) may roughly double "
                    "float32 matmul (sgemm) speed; measure before relying on it (`tox -e bench`).")
        return None
    if corename and corename.lower() in _AVX512_CORES:
        return None  # OpenBLAS already picked an AVX-512 core; nothing to gain
    if has_avx512 is False:
        return None  # SkylakeX kernels would die with an illegal instruction on this CPU
    picked = f"OpenBLAS picked the {corename} core" if corename else "OpenBLAS picks its core at run time"
    return (f"OPENBLAS_CORETYPE is unset and {picked}. On some x86 CPUs with AVX-512, "
            "`export OPENBLAS_CORETYPE=SkylakeX` may roughly double float32 matmul (sgemm) speed; "
            "measure before relying on it (`tox -e bench`). tensorweave never sets it for you"
            + ("." if has_avx512 else ", and only CPUs with AVX-512 (avx512f) can use it."))


def cmd_doctor(args) -> int:
    rows: list[tuple[str, str]] = []
    hints: list[str] = []
    rows.append(("tensorweave", f"{_core_version()} ({os.path.dirname(tensorweave.__file__)})"))
    rows.append(("Python", f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})"))
    rows.append(("platform", f"{platform.system()} {platform.machine()}"))
    rows.append(("NumPy", f"{np.__version__} ({os.path.dirname(np.__file__)})"))

    flags = _cpu_flags()
    has_avx512 = ("avx512f" in flags) if flags else None
    cpu = f"{os.cpu_count()} logical cores"
    if has_avx512 is not None:
        cpu += f"; AVX-512: {'yes' if has_avx512 else 'no'}"
    rows.append(("CPU", cpu))

    blas = _blas_from_numpy_config()
    rt = _openblas_runtime() if blas.get("name") and "openblas" in blas["name"].lower() else {}
    blas_text = " ".join(x for x in (blas.get("name") or "unknown", blas.get("version") or "") if x)
    extra = []
    if rt.get("corename"):
        extra.append(f"core {rt['corename']}")
    if rt.get("threads"):
        extra.append(f"{rt['threads']} threads")
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    if blas.get("name") and "openblas" in blas["name"].lower():
        extra.append(f"OPENBLAS_CORETYPE={coretype}" if coretype else "OPENBLAS_CORETYPE unset")
    rows.append(("BLAS", blas_text + (f" ({'; '.join(extra)})" if extra else "")))
    hint = openblas_hint(blas.get("name"), coretype, platform.machine(), has_avx512, rt.get("corename"))
    if hint:
        hints.append(hint)

    reg, conflict = _load_registry(quiet=True)
    if conflict is not None:
        rows.append(("plugins", f"CONFLICT: {conflict}"))
    else:
        for _info, results in plugins.each_plugin("tensorweave_doctor"):
            for lines in results:
                for label, text in lines or ():
                    (hints if label == "hint" else rows).append(text if label == "hint" else (label, text))
        names = ", ".join(f"{p.name} ({p.status})" for p in reg.plugins if p.distribution != "tensorweave")
        rows.append(("plugins", (names or "none installed") + "  -- see `tensorweave plugins`"))
        types = sorted(reg.device_factories)
        rows.append(("device types", ", ".join(types) if types
                     else "none: install a device plugin, e.g. `pip install tensorweave-cpu`"))

    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")
    for h in hints:
        print(f"\nhint: {h}")
    return 0


# ---------------------------------------------------------------------------------------------
# worker and cluster
def _resolver_config(args):
    """The config of ``worker --resolver NAME``: the cluster and task the resolver finds."""
    if args.config or args.job is not None or args.task is not None:
        raise errors.InvalidArgumentError(
            f"--resolver {args.resolver} finds the cluster and this task; leave out --config, --job and --task")
    resolver = resolvers.resolver_from_name(args.resolver, jobs=args.jobs, port_base=args.port_base,
                                            rpc_layer=args.transport)
    transport = None
    if args.tensors_transport:
        transport = {"control": args.transport or resolver.rpc_layer or cl.DEFAULT_TRANSPORT,
                     "tensors": args.tensors_transport}
    settings = {"auth": {"token_env": args.token_env}} if args.token_env else {}
    config = resolvers.config_from_resolver(resolver, transport, **settings)
    if config.task is None:
        raise errors.NotFoundError(
            f"the {args.resolver} resolver found the cluster but not this process's task "
            "(give the task in $TF_CONFIG/$TW_CONFIG: \"task\": {\"type\": ..., \"index\": ...})")
    return config


def cmd_worker(args) -> int:
    try:
        if args.resolver:
            config = _resolver_config(args)
        elif any(v is not None for v in (args.jobs, args.port_base, args.transport, args.tensors_transport,
                                         args.token_env)):
            _err("--jobs, --port-base, --transport, --tensors-transport and --token-env go with --resolver")
            return 2
        else:
            config = cl.load_config(args.config) if args.config else cl.config_from_env()
        job = args.job if args.job is not None else (config.task[0] if config.task else None)
        task = args.task if args.task is not None else (config.task[1] if config.task else 0)
        if job is None:
            _err("name the task to serve: --job NAME [--task INDEX] (or a \"task\" in $TW_CONFIG)")
            return 2
        config = config.with_task(job, task)
        cl.check_transports(config, job)
    except errors.OpError as e:
        _err(str(e))
        return 2

    # Signals only set a flag; the main thread then stops the server outside the handler.
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    launcher.exit_with_parent(stop)  # only when started with launcher.PARENT_ENV (LocalCluster)
    try:
        try:
            server = Server(config, job, task)
            server.start()  # a no-op where the constructor already started it
        except errors.OpError as e:
            _err(f"/job:{job}/task:{task} could not start: {e}")
            return 1
        print(launcher.ready_line(job, task, server.address), flush=True)

        def watch():  # a server that ends by itself ends the command too
            server.join()
            stop.set()

        threading.Thread(target=watch, name="tensorweave-worker-join", daemon=True).start()
        stop.wait()
        server.stop()
        print(f"tensorweave worker stopped: job={job} task={task}", flush=True)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_cluster_up(args) -> int:
    try:
        path, tasks = launcher.up(args.dir, workers=args.workers, ps=args.ps, transport=args.transport,
                                  tensors_transport=args.tensors_transport, host=args.host,
                                  base_port=args.base_port, timeout=args.timeout,
                                  token=not args.no_token, tls=args.tls, files_allow=args.allow_files)
    except (errors.InvalidArgumentError, errors.NotFoundError, errors.AlreadyExistsError,
            errors.PermissionDeniedError) as e:
        _err(str(e))
        return 2
    except errors.OpError as e:
        _err(f"cluster did not start: {e}")
        return 1
    rows = [[f"{t['job']}/{t['task']}", t["address"], str(t["pid"]), t["log"]] for t in tasks]
    print(_table(rows, ["TASK", "ADDRESS", "PID", "LOG"]), file=sys.stderr)
    directory = os.path.dirname(path)
    if not args.no_token:
        print(f"auth: the token is in {os.path.join(directory, launcher.TOKEN_NAME)} (a session given the config "
              "reads it; for a grpc:// target set TENSORWEAVE_TOKEN to it)", file=sys.stderr)
    if args.tls:
        print(f"tls: self-signed certificate {os.path.join(directory, 'tls', 'cert.pem')}", file=sys.stderr)
    print(path)
    return 0


def cmd_cluster_down(args) -> int:
    try:
        results = launcher.down(args.dir, grace=args.grace)
    except errors.NotFoundError as e:
        _err(str(e))
        return 2
    except errors.OpError as e:
        _err(str(e))
        return 1
    for t, how in results:
        print(f"{t['job']}/{t['task']}  pid {t['pid']}  {how}")
    return 0


def cmd_cluster_status(args) -> int:
    try:
        record, rows = launcher.status(args.dir)
    except errors.OpError as e:
        _err(str(e))
        return 2
    print(_table([[f"{r['job']}/{r['task']}", r["address"], str(r["pid"]), "alive" if r["alive"] else "exited",
                   "yes" if r["listening"] else "no"] for r in rows],
                 ["TASK", "ADDRESS", "PID", "STATE", "LISTENING"]))
    print(f"\nconfig: {record.get('config')}")
    return 0 if all(r["alive"] for r in rows) else 1


def cmd_cluster_manifest(args) -> int:
    if not args.kubernetes:
        _err("say which cluster manager: --kubernetes (the only one so far)")
        return 2
    kwargs = {"name": args.name, "image": args.image, "namespace": args.namespace, "port": args.port,
              "cluster_domain": args.cluster_domain}
    if args.transport or args.tensors_transport:
        control = args.transport or cl.DEFAULT_TRANSPORT
        kwargs["transport"] = (control, args.tensors_transport or control)
    if args.token_env:
        kwargs["token_env"] = args.token_env
    try:
        if args.config:
            objects = manifests.manifests_from_config(cl.load_config(args.config), **kwargs)
        else:
            objects = manifests.kubernetes_manifests(args.jobs, **kwargs)
    except errors.OpError as e:
        _err(str(e))
        return 2
    text = manifests.to_yaml(objects)
    if args.out:
        try:
            with open(args.out, "w") as f:
                f.write(text)
        except OSError as e:
            _err(f"cannot write {args.out}: {e.strerror or e}")
            return 1
        print(f"wrote {len(objects)} objects ({', '.join(o['kind'] + ' ' + o['metadata']['name'] for o in objects)}) "
              f"to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_trace(args) -> int:
    """Run a script in this process with ``TENSORWEAVE_TRACE_DIR`` set: every Session it
    makes traces every run and writes its Chrome trace there (client/session.py)."""
    script_args, out = list(args.script_args), args.out
    # `trace SCRIPT [ARGS] --out DIR`: a trailing --out is ours when none came before SCRIPT
    # (a script that takes --out itself gets ours before SCRIPT: `trace --out DIR SCRIPT ...`).
    if out is None and len(script_args) >= 2 and script_args[-2] == "--out":
        out, script_args = script_args[-1], script_args[:-2]
    elif out is None and script_args and script_args[-1].startswith("--out="):
        out, script_args = script_args[-1].split("=", 1)[1], script_args[:-1]
    if not out:
        _err("say where the traces go: tensorweave trace SCRIPT.py [ARGS] --out DIR")
        return 2
    if not os.path.isfile(args.script):
        _err(f"no such script: {args.script}")
        return 2
    out = os.path.abspath(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        _err(f"cannot create the trace directory {out}: {e}")
        return 2
    before = set(os.listdir(out))
    saved = os.environ.get(TRACE_DIR_ENV), sys.argv, list(sys.path)
    os.environ[TRACE_DIR_ENV] = out
    sys.argv = [args.script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))  # as `python SCRIPT` does
    code = 0
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the script's own failure, reported as python would
        traceback.print_exc()
        code = 1
    finally:
        if saved[0] is None:
            os.environ.pop(TRACE_DIR_ENV, None)
        else:
            os.environ[TRACE_DIR_ENV] = saved[0]
        sys.argv, sys.path[:] = saved[1], saved[2]
    written = sorted(f for f in set(os.listdir(out)) - before if f.startswith("step_") and f.endswith(".json"))
    print(f"tensorweave trace: {len(written)} traced step{'s' if len(written) != 1 else ''} in {out}"
          + (" (open one in https://ui.perfetto.dev or chrome://tracing)" if written else
             " (the script ran no Session.run)"), file=sys.stderr)
    return code


# ---------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tensorweave", description="tensorweave command-line tools")
    p.add_argument("--version", action="version", version=f"tensorweave {_core_version()}")
    p.add_argument("-v", "--debug", action="store_true",
                   help="log debug detail (e.g. why a plugin failed, with its traceback)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sp = sub.add_parser("plugins", help="list plugins: status, what each registered, notes and errors")
    sp.add_argument("-v", "--verbose", action="store_true", help="also show each plugin's module")
    sp.set_defaults(func=cmd_plugins)
    sub.add_parser("devices", help="list the local devices").set_defaults(func=cmd_devices)
    sub.add_parser("doctor", help="check the environment: Python, NumPy/BLAS, OpenCL, nvcc").set_defaults(
        func=cmd_doctor)
    sub.add_parser("version", help="print the version").set_defaults(func=cmd_version)

    sp = sub.add_parser("worker", help="serve one task of a cluster until SIGTERM/SIGINT")
    sp.add_argument("--config", help="cluster config (TOML); default: the JSON in $TW_CONFIG")
    sp.add_argument("--job", help="this task's job (default: the task in $TW_CONFIG)")
    sp.add_argument("--task", type=int, help="this task's index in its job (default 0)")
    rs = sp.add_argument_group("cluster managers", "find the cluster and this task from the environment "
                               "(docs/distributed.md, \"Cluster managers\")")
    rs.add_argument("--resolver", choices=sorted(resolvers.RESOLVERS),
                    help="slurm: a task of an srun job step; kubernetes: a pod of a StatefulSet (the naming of "
                         "`cluster manifest --kubernetes`); tf_config: $TW_CONFIG, else $TF_CONFIG")
    rs.add_argument("--jobs", help="slurm, kubernetes: jobs and their numbers of tasks, e.g. ps=1,worker=2 "
                                   "(default: slurm: every task a worker; kubernetes: $TW_K8S_JOBS)")
    rs.add_argument("--port-base", type=int, help="slurm: the first port on each node (default 8888); "
                                                  "kubernetes: every pod's port (default 2222)")
    rs.add_argument("--transport", help="the cluster's transport (default: the resolver's, grpc)")
    rs.add_argument("--tensors-transport", help="a different transport for tensors (e.g. ucx)")
    rs.add_argument("--token-env", metavar="VAR", help="require the auth token in environment variable VAR")
    sp.set_defaults(func=cmd_worker)

    sp = sub.add_parser("cluster", help="a local cluster: one worker process per task (up, down, status)")
    csub = sp.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    dir_help = ("the cluster's directory: config, logs, pid file, token (default: up makes a new private "
                f"{default_dir()}; down and status find it)")
    up = csub.add_parser("up", help="start the tasks, write DIR/cluster.toml, print its path when all are ready")
    up.add_argument("--workers", type=int, default=2, help="worker tasks (default 2)")
    up.add_argument("--ps", type=int, default=1, help="parameter-server tasks (default 1)")
    up.add_argument("--transport", default="grpc", help="transport for every pair of jobs (default grpc)")
    up.add_argument("--tensors-transport", help="a different transport for tensors (e.g. ucx)")
    up.add_argument("--dir", help=dir_help)
    up.add_argument("--host", default="127.0.0.1", help="address the tasks listen on (default 127.0.0.1)")
    up.add_argument("--base-port", type=int, help="first port (ps tasks, then workers); default: free ports")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for every task (default 60)")
    up.add_argument("--tls", action="store_true",
                    help="serve with TLS: a self-signed certificate for --host in DIR/tls (grpc)")
    up.add_argument("--allow-files", action="append", metavar="DIR",
                    help="a directory where the tasks' ops may read and write files for clients "
                         "(repeatable; default: the cluster's directory, where the tasks run)")
    up.add_argument("--no-token", action="store_true",
                    help="no auth token (by default a random one is written to DIR/token and required)")
    up.set_defaults(func=cmd_cluster_up)
    down = csub.add_parser("down", help="stop the tasks (SIGTERM, then SIGKILL after --grace seconds)")
    down.add_argument("--dir", help=dir_help)
    down.add_argument("--grace", type=float, default=10.0, help="seconds before SIGKILL (default 10)")
    down.set_defaults(func=cmd_cluster_down)
    st = csub.add_parser("status", help="list the tasks and whether each is alive and listening")
    st.add_argument("--dir", help=dir_help)
    st.set_defaults(func=cmd_cluster_status)
    mf = csub.add_parser("manifest", help="write Kubernetes manifests: a StatefulSet and a headless Service per job",
                         description="Kubernetes manifests for a cluster: per job a headless Service and a "
                                     "StatefulSet whose pods run `tensorweave worker --resolver kubernetes`. "
                                     "Apply with `kubectl apply -f FILE`.")
    mf.add_argument("--kubernetes", action="store_true", help="Kubernetes manifests (the only kind so far)")
    src = mf.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="a cluster config (TOML): its jobs (replicas = tasks), transport and "
                                      "[auth] token_env; its addresses are replaced by the pods' DNS names")
    src.add_argument("--jobs", help="jobs and their replicas, e.g. ps=1,worker=2")
    mf.add_argument("--name", default=manifests.DEFAULT_NAME,
                    help=f"prefix of every object: <name>-<job> (default {manifests.DEFAULT_NAME})")
    mf.add_argument("--image", default=manifests.DEFAULT_IMAGE,
                    help=f"container image with tensorweave and its plugins (default {manifests.DEFAULT_IMAGE})")
    mf.add_argument("--namespace", help="namespace of the objects (default: kubectl's)")
    mf.add_argument("--port", type=int, default=resolvers.K8S_DEFAULT_PORT,
                    help=f"every task's port (default {resolvers.K8S_DEFAULT_PORT})")
    mf.add_argument("--transport", help="transport (default: the config's, else grpc)")
    mf.add_argument("--tensors-transport", help="a different transport for tensors (e.g. ucx)")
    mf.add_argument("--token-env", metavar="VAR", help="tasks require the token in VAR, filled from the Secret "
                                                       "<name>-auth (key: token); default: the config's token_env")
    mf.add_argument("--cluster-domain", help="the cluster's DNS domain (default cluster.local)")
    mf.add_argument("--out", help="write the YAML to this file (default: standard output)")
    mf.set_defaults(func=cmd_cluster_manifest)

    sp = sub.add_parser("trace", help="run a Python script with every Session.run traced to Chrome trace files",
                        usage="tensorweave trace SCRIPT.py [ARGS ...] --out DIR")
    sp.add_argument("--out", help="directory for the traces (DIR/step_<n>.json); may also follow the script's "
                                  "arguments")
    sp.add_argument("script", help="the Python script to run")
    sp.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    sp.set_defaults(func=cmd_trace)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="tensorweave: %(levelname)s: %(message)s")
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
