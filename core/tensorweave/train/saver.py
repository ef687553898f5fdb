"""``tw.train.Saver`` and checkpoint management (whitepaper 3.3).

A Saver builds its graph once, when constructed: a ``filename`` tensor (a
PlaceholderWithDefault fed with the path on each call), one ``SaveV2`` over the variables
and one ``RestoreV2`` whose outputs feed an ``Assign`` per variable. Variables on any
device save and restore: the ops run on the CPU and the partitioner adds the transfers.

Management follows TF1: ``save(sess, "dir/model.ckpt", global_step=5)`` writes checkpoint
``dir/model.ckpt-5`` (see ``checkpoint_format``), then replaces the state file
``dir/checkpoint`` (JSON: ``model_checkpoint_path``, ``all_model_checkpoint_paths``, their
timestamps) atomically, then deletes checkpoints beyond ``max_to_keep`` except one every
``keep_checkpoint_every_n_hours``. The state file is written only after the checkpoint is
committed and old checkpoints are deleted only after the state file stops naming them, so
``latest_checkpoint`` never names an incomplete or deleted checkpoint.

``restore`` is all-or-nothing: before any Assign runs it checks, from the checkpoint's
header alone, that every variable is present with its dtype and a compatible shape; the
RestoreV2 kernel reads (and checksums) every tensor before returning any.

Partitioned variables (TF1's ``SaveSliceInfo``): each shard is saved under the logical
variable's full name with its slice spec (``"<full shape> <offset>,<length>:..."``), and the
checkpoint holds the one assembled tensor. Restoring reads the slice each shard needs, so a
checkpoint restores into the same or a different number of shards, or into an unpartitioned
variable of the full shape (TF1 requires the same partitioning); a different full shape is
an InvalidArgumentError naming the variable and both shapes, before anything is assigned.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from tensorweave.framework import errors
from tensorweave.framework.graph import Tensor
from tensorweave.ops import array_ops, checkpoint_ops, control_flow_ops, state_ops
from tensorweave.ops import variables as variables_mod
from tensorweave.ops.partitioned_variables import PartitionedVariable
from tensorweave.train import checkpoint_format as fmt

__all__ = [
    "Saver", "CheckpointState", "latest_checkpoint", "get_checkpoint_state", "update_checkpoint_state",
    "checkpoint_exists", "get_checkpoint_mtimes", "remove_checkpoint", "list_variables", "load_variable",
    "load_checkpoint", "NewCheckpointReader",
]


def _now() -> float:
    """The clock used for checkpoint timestamps (tests replace it)."""
    return time.time()


# ----------------------------------------------------------------------------------------
# the state file
@dataclasses.dataclass
class CheckpointState:
    """The contents of a ``checkpoint`` state file (TF1's CheckpointState proto)."""

    model_checkpoint_path: str
    all_model_checkpoint_paths: list
    all_model_checkpoint_timestamps: list = dataclasses.field(default_factory=list)
    last_preserved_timestamp: float | None = None


def _state_path(save_dir: str, latest_filename: str | None) -> str:
    latest_filename = latest_filename or "checkpoint"
    if os.path.dirname(latest_filename):
        raise errors.InvalidArgumentError(
            f"latest_filename {latest_filename!r} must be a file name, without a directory")
    return os.path.join(save_dir, latest_filename)


def update_checkpoint_state(save_dir, model_checkpoint_path, all_model_checkpoint_paths=None,
                            latest_filename=None, all_model_checkpoint_timestamps=None,
                            last_preserved_timestamp=None, save_relative_paths=False):
    """Replace the state file in ``save_dir`` atomically. ``model_checkpoint_path`` is
    appended to ``all_model_checkpoint_paths`` when it is not last already."""
    save_dir = os.fspath(save_dir)
    paths = [os.fspath(p) for p in (all_model_checkpoint_paths or [])]
    stamps = list(all_model_checkpoint_timestamps or [])
    model_checkpoint_path = os.fspath(model_checkpoint_path)
    if not paths or paths[-1] != model_checkpoint_path:
        paths.append(model_checkpoint_path)
        if stamps:
            stamps.append(_now())
    if stamps and len(stamps) != len(paths):
        raise errors.InvalidArgumentError(
            f"{len(paths)} checkpoint paths but {len(stamps)} timestamps for the state file in {save_dir}")

    def rel(p):  # relative to the directory, or absolute: never relative to the cwd
        return os.path.relpath(p, save_dir) if save_relative_paths else os.path.abspath(p)
    state = {"model_checkpoint_path": rel(model_checkpoint_path),
             "all_model_checkpoint_paths": [rel(p) for p in paths],
             "all_model_checkpoint_timestamps": stamps,
             "last_preserved_timestamp": last_preserved_timestamp}
    fmt.atomic_write_bytes(_state_path(save_dir, latest_filename), json.dumps(state, indent=1).encode())


def get_checkpoint_state(checkpoint_dir, latest_filename=None) -> CheckpointState | None:
    """The state file of ``checkpoint_dir`` (relative paths made relative to it), or None
    when there is none. A corrupt state file raises DataLossError naming it."""
    checkpoint_dir = os.fspath(checkpoint_dir)
    path = _state_path(checkpoint_dir, latest_filename)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    def number(x):
        return type(x) in (int, float) and x == x  # not bool, not NaN

    try:
        d = json.loads(raw.decode("utf-8"))
        if not isinstance(d, dict):
            raise TypeError("not a JSON object")
        model = d["model_checkpoint_path"]
        paths = d.get("all_model_checkpoint_paths") or []
        stamps = d.get("all_model_checkpoint_timestamps") or []
        preserved = d.get("last_preserved_timestamp")
        # Every field of its type: a damaged file is DataLossError here, never a TypeError later.
        if not isinstance(model, str) or "\0" in model:
            raise TypeError("model_checkpoint_path must be a string")
        if not isinstance(paths, list) or not all(isinstance(p, str) and "\0" not in p for p in paths):
            raise TypeError("all_model_checkpoint_paths must be a list of strings")
        if not isinstance(stamps, list) or not all(number(t) for t in stamps):
            raise TypeError("all_model_checkpoint_timestamps must be a list of numbers")
        if stamps and len(stamps) != len(paths):
            raise ValueError(f"{len(paths)} paths but {len(stamps)} timestamps")
        if preserved is not None and not number(preserved):
            raise TypeError("last_preserved_timestamp must be a number or null")
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise errors.DataLossError(
            f"checkpoint state file {path} is corrupt ({type(e).__name__}: {e}); expected JSON with "
            "model_checkpoint_path and all_model_checkpoint_paths") from None

    def absolute(p):
        return p if os.path.isabs(p) else os.path.join(checkpoint_dir, p)
    return CheckpointState(absolute(model), [absolute(p) for p in paths], list(stamps), preserved)


def checkpoint_exists(checkpoint_prefix) -> bool:
    """Whether checkpoint ``checkpoint_prefix`` is complete (its index was committed)."""
    return fmt.checkpoint_exists(checkpoint_prefix)


def latest_checkpoint(checkpoint_dir, latest_filename=None) -> str | None:
    """The prefix of the newest checkpoint named by ``checkpoint_dir``'s state file, or None.

    If the newest one has gone (deleted by hand), the newest listed checkpoint that still
    exists is returned (TF1 returns None there)."""
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None:
        return None
    for p in [state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)]:
        if p and checkpoint_exists(p):
            return p
    return None


def get_checkpoint_mtimes(checkpoint_prefixes) -> list:
    """Modification times of the given checkpoints' index files (missing ones skipped)."""
    out = []
    for p in checkpoint_prefixes:
        try:
            out.append(os.path.getmtime(fmt.index_path(p)))
        except OSError:
            pass
    return out


def remove_checkpoint(checkpoint_prefix) -> None:
    """Delete a checkpoint's files (index first, so it is never half present)."""
    fmt.remove_checkpoint(checkpoint_prefix)


def load_checkpoint(ckpt_dir_or_file) -> fmt.CheckpointReader:
    """A reader for a checkpoint prefix, a safetensors file, or a directory's latest checkpoint."""
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise errors.NotFoundError(f"no checkpoint state file or checkpoint in directory {path!r}")
        path = latest
    return fmt.CheckpointReader(path)


NewCheckpointReader = load_checkpoint


def list_variables(ckpt_dir_or_file) -> list:
    """[(name, shape)] of every tensor in the checkpoint, sorted by name."""
    with load_checkpoint(ckpt_dir_or_file) as r:
        return sorted(r.get_variable_to_shape_map().items())


def load_variable(ckpt_dir_or_file, name):
    """The value of tensor ``name`` (``"w"`` or ``"w:0"``) in the checkpoint, as an ndarray."""
    if name.endswith(":0"):
        name = name[:-2]
    with load_checkpoint(ckpt_dir_or_file) as r:
        return r.get_tensor(name)


# ----------------------------------------------------------------------------------------
def _ref_tensor(v):
    """The Variable node output behind ``v`` (a tw.Variable or a variable's ref tensor)."""
    t = v._ref() if hasattr(v, "_ref") else v
    if not (isinstance(t, Tensor) and t.op.op_def.outputs_ref):
        raise errors.InvalidArgumentError(
            f"Saver can only save variables; got {getattr(v, 'name', repr(v))}"
            + (f" produced by a {t.op.type} op" if isinstance(t, Tensor) else ""))
    return t


def _slice_entries(name, shards) -> list:
    """(name, spec, ref) for each shard of a partitioned variable saved under ``name``."""
    out = []
    for v in shards:
        info = v._get_save_slice_info() if hasattr(v, "_get_save_slice_info") else None
        if info is None:
            raise errors.InvalidArgumentError(
                f"Saver: '{name}' is given as a list of variables, so each must be a shard of a partitioned variable "
                f"(with a save_slice_info); {getattr(v, 'name', repr(v))} is not")
        out.append((name, info.spec, _ref_tensor(v)))
    return out


def _saveables(var_list) -> list:
    """[(checkpoint name, slice spec or "", variable ref tensor)] from a dict or a list (TF1
    ``op_list_to_dict`` + ``saveable_objects_for_op``). The shards of a partitioned variable
    (found through their save_slice_info, or given as a PartitionedVariable or a list)
    share the logical variable's name, each with its slice spec."""
    entries: list = []
    if isinstance(var_list, dict):
        for name, v in var_list.items():
            if not isinstance(name, str) or not name:
                raise errors.InvalidArgumentError(f"Saver: checkpoint names must be non-empty strings, got {name!r}")
            if isinstance(v, PartitionedVariable | list | tuple):
                entries.extend(_slice_entries(name, list(v)))
            else:
                entries.append((name, "", _ref_tensor(v)))
    else:
        for v in var_list:
            if isinstance(v, PartitionedVariable):
                entries.extend(_slice_entries(v.name, list(v)))
                continue
            info = v._get_save_slice_info() if hasattr(v, "_get_save_slice_info") else None
            if info is not None:
                entries.append((info.full_name, info.spec, _ref_tensor(v)))
            else:
                ref = _ref_tensor(v)
                entries.append((ref.op.name, "", ref))
    whole: dict = {}
    sliced: dict = {}
    for name, spec, ref in entries:
        if not isinstance(name, str) or not name:
            raise errors.InvalidArgumentError(f"Saver: checkpoint names must be non-empty strings, got {name!r}")
        if name in whole or (not spec and name in sliced):
            raise errors.InvalidArgumentError(f"Saver: at least two variables have the same name: {name}")
        if spec:
            sliced.setdefault(name, []).append((spec, ref))
        else:
            whole[name] = ref
    seen: dict = {}
    for name, _spec, ref in entries:
        if ref.op in seen:
            raise errors.InvalidArgumentError(
                f"Saver: variable {ref.op.name} appears twice in var_list (as '{seen[ref.op]}' and '{name}')")
        seen[ref.op] = name
    for name, parts in sliced.items():
        _check_slices(name, parts)
    return entries


def _check_slices(name, parts):
    """The shards saved under ``name`` agree on the full shape and dtype and tile it (so
    the checkpoint holds the whole logical tensor); checked when the Saver is built."""
    specs = [checkpoint_ops.parse_slice_spec(spec) for spec, _ in parts]
    full = specs[0][0]
    for (spec, ref), (f, _starts, lengths) in zip(parts, specs):
        if f != full or ref.dtype is not parts[0][1].dtype:
            raise errors.InvalidArgumentError(
                f"Saver: the shards of partitioned variable '{name}' disagree: {parts[0][1].op.name} is a slice of "
                f"{full} ({parts[0][1].dtype.name}), {ref.op.name} of {f} ({ref.dtype.name})")
        if not ref.shape.is_compatible_with(lengths):
            raise errors.InvalidArgumentError(
                f"Saver: shard {ref.op.name} of '{name}' has shape {ref.shape} but its slice spec {spec!r} says "
                f"{lengths}")
    try:
        fmt.check_tiling(name, full, [(st, ln) for _f, st, ln in specs])
    except errors.InvalidArgumentError as e:
        raise errors.InvalidArgumentError(f"Saver: {e.message}") from None


class Saver:
    """Saves and restores variables (``tf.train.Saver``), managing a directory's checkpoints.

    ``var_list``: None (every global variable), a list of variables, or a dict
    {checkpoint name: variable}. ``max_to_keep`` checkpoints are kept (None or 0: all are
    kept on disk, and only the latest is listed); one every ``keep_checkpoint_every_n_hours``
    is kept besides. ``sharded`` is accepted; every variable still goes to one file (the
    distributed runtime will write one shard per parameter-server task).
    """

    def __init__(self, var_list=None, reshape=False, sharded=False, max_to_keep=5,
                 keep_checkpoint_every_n_hours=10000.0, name=None, restore_sequentially=False,
                 saver_def=None, builder=None, defer_build=False, allow_empty=False, write_version=2,
                 pad_step_number=False, save_relative_paths=False, filename=None):
        if reshape:
            raise errors.UnimplementedError("Saver(reshape=True) is not supported: shapes must match exactly")
        if saver_def is not None or builder is not None:
            raise errors.UnimplementedError("Saver(saver_def=..., builder=...) is not supported")
        self._var_list = var_list
        self._max_to_keep = max_to_keep
        self._keep_hours = keep_checkpoint_every_n_hours
        self._name = name
        self._restore_sequentially = restore_sequentially
        self._allow_empty = allow_empty
        self._pad_step_number = pad_step_number
        self._save_relative_paths = save_relative_paths
        self._filename = filename
        self._last_checkpoints: list = []  # [(prefix, timestamp)], oldest first
        self._next_checkpoint_time = _now() + keep_checkpoint_every_n_hours * 3600
        self._last_preserved_timestamp = None
        self._built = False
        self._is_empty = False
        if not defer_build:
            self.build()

    # -- graph ------------------------------------------------------------------------------
    def build(self):
        """Add the save and restore ops to the graph (once)."""
        if self._built:
            return

        var_list = self._var_list
        if var_list is None:
            var_list = variables_mod.global_variables()
        self._entries = _saveables(var_list)
        if not self._entries:
            if not self._allow_empty:
                raise errors.InvalidArgumentError("Saver: no variables to save")
            self._is_empty, self._built = True, True
            return
        graphs = {ref.graph for _, _, ref in self._entries}
        if len(graphs) > 1:
            raise errors.InvalidArgumentError("Saver: the variables come from different graphs")
        g = graphs.pop()
        self._graph = g
        names = [n for n, _, _ in self._entries]
        specs = [s for _, s, _ in self._entries]
        refs = [r for _, _, r in self._entries]
        with g.as_default(), g.control_dependencies(None), g.name_scope(self._name or "save"):
            self.filename_tensor = array_ops.placeholder_with_default(self._filename or "model", [],
                                                                      name="filename")
            names_t = array_ops.constant(names, name="tensor_names")
            slices_t = array_ops.constant(specs, name="shape_and_slices")
            save_op = checkpoint_ops.save_v2(self.filename_tensor, names_t, slices_t, refs, name="SaveV2")
            with g.control_dependencies([save_op]):
                self.save_tensor = array_ops.identity(self.filename_tensor, name="control_dependency")
            assigns = []
            if self._restore_sequentially:  # one tensor in memory at a time
                prev = None
                for name, spec, ref in self._entries:
                    with g.control_dependencies([prev] if prev is not None else []):
                        (value,) = checkpoint_ops.restore_v2(
                            self.filename_tensor, array_ops.constant([name]), array_ops.constant([spec]),
                            [ref.dtype], name="RestoreV2")
                    prev = state_ops.assign(ref, value, validate_shape=ref.shape.is_fully_defined()).op
                    assigns.append(prev)
            else:
                values = checkpoint_ops.restore_v2(self.filename_tensor, names_t, slices_t,
                                                   [r.dtype for r in refs], name="RestoreV2")
                for ref, value in zip(refs, values):
                    assigns.append(state_ops.assign(ref, value, validate_shape=ref.shape.is_fully_defined()).op)
            self.restore_op = control_flow_ops.group(*assigns, name="restore_all")
        self._built = True

    def _check_built(self, what):
        if not self._built:
            raise errors.FailedPreconditionError(f"Saver.{what}: call build() first (the Saver was made with "
                                                 "defer_build=True)")

    # -- saving -----------------------------------------------------------------------------
    @property
    def last_checkpoints(self) -> list:
        """Prefixes of the checkpoints this Saver keeps, oldest first."""
        return [p for p, _ in self._last_checkpoints]

    def set_last_checkpoints(self, last_checkpoints):
        self._last_checkpoints = [(os.fspath(p), None) for p in last_checkpoints]

    def set_last_checkpoints_with_time(self, last_checkpoints_with_time):
        self._last_checkpoints = [(os.fspath(p), t) for p, t in last_checkpoints_with_time]

    def recover_last_checkpoints(self, checkpoint_paths):
        """Adopt the existing ones of ``checkpoint_paths`` (e.g. a restarted job's
        ``get_checkpoint_state(dir).all_model_checkpoint_paths``) as this Saver's list."""
        kept = [p for p in checkpoint_paths if checkpoint_exists(p)]
        self.set_last_checkpoints_with_time(list(zip(kept, get_checkpoint_mtimes(kept))))

    def save(self, sess, save_path, global_step=None, latest_filename=None, meta_graph_suffix="meta",
             write_meta_graph=True, write_state=True, strip_default_attrs=False, save_debug_info=False):
        """Save the variables to ``save_path`` (``save_path-STEP`` with a ``global_step``: an
        int, or a variable/tensor read from ``sess``) and return that prefix. Meta graphs are
        not written (the meta-graph arguments are accepted for TF1 compatibility)."""
        self._check_built("save")
        if self._is_empty:
            return None
        if sess.graph is not self._graph:
            raise errors.InvalidArgumentError("Saver.save: the session runs a different graph than the Saver's")
        save_path = os.fspath(save_path)
        if global_step is not None:
            if not isinstance(global_step, int):
                global_step = int(sess.run(global_step))
            save_path = f"{save_path}-{global_step:08d}" if self._pad_step_number else f"{save_path}-{global_step}"
        save_dir = os.path.dirname(save_path) or "."
        state_file = _state_path(save_dir, latest_filename)  # checks latest_filename first
        if not os.path.isdir(save_dir):
            raise errors.NotFoundError(f"Saver.save: the parent directory of {save_path!r} does not exist")
        sess.run(self.save_tensor, {self.filename_tensor: save_path})
        path = save_path
        if write_state:
            self._record_last_checkpoint(path)
            update_checkpoint_state(
                save_dir, path, self.last_checkpoints, os.path.basename(state_file),
                all_model_checkpoint_timestamps=[t for _, t in self._last_checkpoints]
                if all(t is not None for _, t in self._last_checkpoints) else None,
                last_preserved_timestamp=self._last_preserved_timestamp,
                save_relative_paths=self._save_relative_paths)
            self._delete_old_checkpoints()
        return path

    def _record_last_checkpoint(self, path):
        self._to_delete = []
        if not self._max_to_keep:
            return
        self._last_checkpoints = [(p, t) for p, t in self._last_checkpoints if p != path]
        self._last_checkpoints.append((path, _now()))
        while len(self._last_checkpoints) > self._max_to_keep:
            self._to_delete.append(self._last_checkpoints.pop(0))

    def _delete_old_checkpoints(self):
        for p, t in self._to_delete:
            if self._keep_hours and t is not None and t >= self._next_checkpoint_time:
                # keep one checkpoint per keep_checkpoint_every_n_hours
                self._next_checkpoint_time += self._keep_hours * 3600
                self._last_preserved_timestamp = t
                continue
            remove_checkpoint(p)
        self._to_delete = []

    # -- restoring --------------------------------------------------------------------------
    def _validate(self, save_path):
        """Every variable present with its dtype and a compatible shape, or an error naming
        the variable, the shapes and the file; nothing is assigned until this passes."""
        with fmt.CheckpointReader(save_path) as r:
            for name, spec, ref in self._entries:
                what = f"partitioned variable '{name}'" if spec else f"variable '{name}'"
                if not r.has_tensor(name):
                    held = sorted(r.names())
                    raise errors.NotFoundError(
                        f"restoring from checkpoint {r.path} failed: {what} is not in it "
                        f"(it holds {held[:20]}{' ...' if len(held) > 20 else ''}); no variable was modified")
                dt = r.dtype(name)
                if dt is not ref.dtype:
                    raise errors.InvalidArgumentError(
                        f"restoring from checkpoint {r.path} failed: {what} has dtype {ref.dtype.name} "
                        f"but the checkpoint holds {dt.name}; no variable was modified")
                shape = r.shape(name)
                if spec:
                    full = checkpoint_ops.parse_slice_spec(spec)[0]
                    if full != shape:
                        raise errors.InvalidArgumentError(
                            f"restoring from checkpoint {r.path} failed: {what} has full shape {full} but the "
                            f"checkpoint holds shape {shape}; no variable was modified")
                elif not ref.shape.is_compatible_with(shape):
                    raise errors.InvalidArgumentError(
                        f"restoring from checkpoint {r.path} failed: {what} has shape {ref.shape} but "
                        f"the checkpoint holds shape {shape}; no variable was modified")

    def restore(self, sess, save_path):
        """Restore every variable from checkpoint ``save_path`` (all or nothing)."""
        self._check_built("restore")
        if self._is_empty:
            return
        if save_path is None:
            raise errors.InvalidArgumentError("Saver.restore: save_path is None (no checkpoint to load)")
        save_path = os.fspath(save_path)
        if not checkpoint_exists(save_path):
            raise errors.NotFoundError(
                f"Saver.restore: checkpoint {save_path!r} does not exist (no {fmt.index_path(save_path)})")
        self._validate(save_path)
        sess.run(self.restore_op, {self.filename_tensor: save_path})

