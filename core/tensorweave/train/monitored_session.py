"""``tw.train.MonitoredTrainingSession``: a training session that initializes or restores
its variables on creation, runs hooks around every ``run`` (periodic checkpoints, stopping
at a step) and saves a last checkpoint when it closes (single process; whitepaper 3.3).

Creation order (as TF1): hooks' ``begin()``; ``Scaffold.finalize()`` fills in the init op,
the ready check and the Saver, then the graph is finalized; a Session is created and
``restore_or_initialize`` — the one place that decides where variable values come from —
restores the latest checkpoint of ``checkpoint_dir`` or runs the init op; queue runners
start; hooks' ``after_create_session``.

Recovery (distributed, whitepaper 3.3): when a step on a cluster (``master="grpc://host:port"``
or a cluster config) fails with ``UnavailableError`` or ``AbortedError`` — a task died or
stopped answering its health checks — the session is closed, the cluster is polled until
every task answers ``Health`` again (``max_wait_secs`` at most; logged on the
``tensorweave.train.monitored_session`` logger), and a
new session is made through the same ``ChiefSessionCreator``: graphs are registered again on
the restarted tasks and ``restore_or_initialize`` restores the latest checkpoint (a restarted
ps lost its variables). Hooks see ``after_create_session`` again and the failed ``run`` is
retried. Local sessions never recover: their errors propagate as before.
"""

from __future__ import annotations

import logging
import time

from tensorweave.client.session import Session
from tensorweave.distributed import wire
from tensorweave.distributed.master import DistributedSession
from tensorweave.framework import errors
from tensorweave.framework.graph import GraphKeys, get_default_graph
from tensorweave.ops import state_ops
from tensorweave.ops import variables as variables_mod
from tensorweave.runtime.config import RunMetadata
from tensorweave.train.coordinator import Coordinator
from tensorweave.train.hooks import CheckpointSaverHook, SessionRunArgs, SessionRunContext, SessionRunValues
from tensorweave.train.queue_runner import start_queue_runners
from tensorweave.train.saver import Saver, latest_checkpoint
from tensorweave.train.summary_hooks import StepCounterHook, SummarySaverHook
from tensorweave.train.training_util import get_global_step

log = logging.getLogger(__name__)

__all__ = ["Scaffold", "ChiefSessionCreator", "WorkerSessionCreator", "MonitoredSession",
           "MonitoredTrainingSession", "restore_or_initialize"]

_USE_DEFAULT = object()


class Scaffold:
    """What a training session needs besides the model: how to initialize variables
    (``init_op``, ``init_feed_dict``, ``init_fn(scaffold, session)``, ``local_init_op``)
    and the ``saver``. Missing pieces are created by ``finalize()``."""

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None,
                 ready_for_local_init_op=None, local_init_op=None, summary_op=None, saver=None,
                 copy_from_scaffold=None):
        if copy_from_scaffold is not None:
            init_op = init_op if init_op is not None else copy_from_scaffold.init_op
            init_feed_dict = init_feed_dict if init_feed_dict is not None else copy_from_scaffold.init_feed_dict
            init_fn = init_fn if init_fn is not None else copy_from_scaffold._init_fn
            local_init_op = local_init_op if local_init_op is not None else copy_from_scaffold.local_init_op
            saver = saver if saver is not None else copy_from_scaffold.saver
            summary_op = summary_op if summary_op is not None else copy_from_scaffold.summary_op
        self.init_op, self.init_feed_dict, self._init_fn = init_op, init_feed_dict, init_fn
        self.local_init_op, self.saver, self.ready_op = local_init_op, saver, ready_op
        self.summary_op = summary_op   # None: SummarySaverHook merges the SUMMARIES collection
        self._ready_checks = None
        self._finalized = False

    @property
    def init_fn(self):
        return self._init_fn

    def finalize(self):
        """Create the missing init ops, ready check and Saver; finalize the graph."""
        if self._finalized:
            return self

        g = get_default_graph()
        if self.init_op is None:
            self.init_op = variables_mod.global_variables_initializer()
        if self.local_init_op is None:
            self.local_init_op = variables_mod.local_variables_initializer()
        if self.saver is None:
            savers = g.get_collection(GraphKeys.SAVERS)
            if len(savers) > 1:
                raise errors.FailedPreconditionError(
                    f"the SAVERS collection holds {len(savers)} savers; pass one as Scaffold(saver=...)")
            if savers:
                self.saver = savers[0]
            else:
                self.saver = Saver(sharded=True, allow_empty=True)
                g.add_to_collection(GraphKeys.SAVERS, self.saver)
        if self.ready_op is None:
            with g.name_scope("report_uninitialized_variables"):
                self._ready_checks = [(v.op.name, state_ops.is_variable_initialized(v))
                                      for v in variables_mod.global_variables() + variables_mod.local_variables()]
        g.finalize()
        self._finalized = True
        return self

    def uninitialized_variables(self, session) -> list:
        """Names of the variables still without a value (the ready check)."""
        if self.ready_op is not None:
            return [x.decode() if isinstance(x, bytes) else str(x) for x in
                    list(session.run(self.ready_op).reshape(-1))]
        if not self._ready_checks:
            return []
        flags = session.run([t for _, t in self._ready_checks])
        return [name for (name, _), ok in zip(self._ready_checks, flags) if not ok]


def restore_or_initialize(session, scaffold, checkpoint_dir=None, checkpoint_filename_with_path=None):
    """Give every variable of a new ``session`` a value: restore the given checkpoint, or
    the latest one in ``checkpoint_dir``, or else run the scaffold's init op (and init_fn);
    then run the local init op and check that nothing is left uninitialized.

    Returns the checkpoint restored from, or None if the variables were initialized."""
    ckpt = checkpoint_filename_with_path
    if ckpt is None and checkpoint_dir:
        ckpt = latest_checkpoint(checkpoint_dir)
    if ckpt is not None:
        scaffold.saver.restore(session, ckpt)
    else:
        if scaffold.init_op is not None:
            session.run(scaffold.init_op, feed_dict=scaffold.init_feed_dict)
        if scaffold.init_fn is not None:
            scaffold.init_fn(scaffold, session)
    if scaffold.local_init_op is not None:
        session.run(scaffold.local_init_op)
    missing = scaffold.uninitialized_variables(session)
    if missing:
        source = f"restored from {ckpt}" if ckpt else "initialized by the init op"
        raise errors.FailedPreconditionError(
            f"the model is not ready: variables {missing[:10]}{' ...' if len(missing) > 10 else ''} were not "
            f"{source}; include them in the Saver or the init op")
    return ckpt


class ChiefSessionCreator:
    """Creates a Session and initializes or restores its variables (``restore_or_initialize``)."""

    def __init__(self, scaffold=None, master="", config=None, checkpoint_dir=None,
                 checkpoint_filename_with_path=None):
        self._scaffold = scaffold or Scaffold()
        self._master, self._config = master, config
        self._checkpoint_dir = checkpoint_dir
        self._checkpoint_filename_with_path = checkpoint_filename_with_path
        self.restored_from = None

    def create_session(self):
        self._scaffold.finalize()
        session = Session(self._master, graph=get_default_graph(), config=self._config)
        try:
            self.restored_from = restore_or_initialize(session, self._scaffold, self._checkpoint_dir,
                                                       self._checkpoint_filename_with_path)
        except BaseException:
            session.close()
            raise
        return session


class WorkerSessionCreator:
    """Creates a Session for a non-chief worker: it initializes nothing itself but waits until
    the chief has initialized or restored every variable (the scaffold's ready check, polled
    every ``recovery_wait_secs`` for ``max_wait_secs`` at most), then runs the local init op."""

    def __init__(self, scaffold=None, master="", config=None, max_wait_secs=30 * 60, recovery_wait_secs=1.0):
        self._scaffold = scaffold or Scaffold()
        self._master, self._config = master, config
        self._max_wait, self._poll = max_wait_secs, recovery_wait_secs
        self.restored_from = None

    def create_session(self):
        self._scaffold.finalize()
        session = Session(self._master, graph=get_default_graph(), config=self._config)
        try:
            deadline = time.monotonic() + self._max_wait
            last_report = time.monotonic()
            while True:
                missing = self._scaffold.uninitialized_variables(session)
                if not missing:
                    break
                now = time.monotonic()
                if now > deadline:
                    raise errors.DeadlineExceededError(
                        f"WorkerSessionCreator: the chief did not initialize {missing[:10]} within "
                        f"{self._max_wait} s")
                if now - last_report >= 5.0:
                    log.info("WorkerSessionCreator: waiting for the chief to initialize %s", missing[:5])
                    last_report = now
                time.sleep(self._poll)
            if self._scaffold.local_init_op is not None:
                session.run(self._scaffold.local_init_op)
        except BaseException:
            session.close()
            raise
        return session


class MonitoredSession:
    """A session that runs ``hooks`` around every ``run`` and stops when one asks to.

    Use it as a context manager; leaving the block closes it (hooks' ``end`` runs unless an
    error other than OutOfRangeError/StopIteration is propagating; those two are swallowed,
    as end-of-input)."""

    def __init__(self, session_creator=None, hooks=None, stop_grace_period_secs=120, max_wait_secs=7200):
        self._hooks = list(hooks or [])
        self._grace = stop_grace_period_secs
        self._max_wait = max_wait_secs
        self.recoveries = 0   # sessions re-created after a lost task (distributed only)
        for h in self._hooks:
            h.begin()
        self._creator = session_creator or ChiefSessionCreator()
        self._sess = self._creator.create_session()
        self._closed = False
        self._stop_requested = False
        self._start_session()

    def _start_session(self, close_on_error=True):
        """Queue runners and hooks' ``after_create_session`` for a newly created session."""
        self._coord = Coordinator(clean_stop_exception_types=(errors.OutOfRangeError,))
        self._threads = []
        try:
            self._threads = start_queue_runners(sess=self._sess, coord=self._coord)
            for h in self._hooks:
                h.after_create_session(self._sess, self._coord)
        except BaseException:
            if close_on_error:
                self._close_internal(error=True)
            raise

    def _recoverable(self, e) -> bool:
        return isinstance(e, errors.UnavailableError | errors.AbortedError) and isinstance(
            self._sess, DistributedSession) and not self._closed

    def _recover(self, cause):
        """Close the failed session, wait for the cluster, create and restore a new one."""
        old = self._sess
        log.warning(f"MonitoredSession: a step failed ({type(cause).__name__}: {cause.message}); "
             "re-creating the session once every task answers")
        tasks = dict(old._cluster)
        transport, security = old._transport, old._security
        self._discard_session()
        deadline = time.monotonic() + self._max_wait
        while True:
            wait_for_tasks(tasks, transport, security, deadline)
            try:
                self._sess = self._creator.create_session()
                self._start_session(close_on_error=False)
                break
            except (errors.UnavailableError, errors.AbortedError, errors.DeadlineExceededError) as e:
                self._discard_session()
                if time.monotonic() > deadline:
                    raise
                log.warning(f"MonitoredSession: creating the session failed ({type(e).__name__}: {e.message}); retrying")
        self.recoveries += 1
        restored = getattr(self._creator, "restored_from", None)
        log.warning(f"MonitoredSession: session re-created; variables "
             f"{'restored from ' + restored if restored else 'initialized (no checkpoint)'}")

    def _discard_session(self):
        """Stop the queue runners of a failed session and close it, ignoring its errors."""
        self._coord.request_stop()
        try:
            if self._threads:
                self._coord.join(self._threads, stop_grace_period_secs=self._grace)
        except Exception:  # noqa: BLE001 - the queue runners ran on the failed session
            pass
        self._threads = []
        try:
            self._sess.close()
        except Exception:  # noqa: BLE001 - closing a session whose tasks are gone
            pass

    graph = property(lambda self: self._sess.graph)
    restored_from = property(lambda self: getattr(self._creator, "restored_from", None))

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Run ``fetches`` plus whatever the hooks ask for; returns the caller's values.
        On a cluster, a step that fails because a task was lost is retried on a new session
        restored from the latest checkpoint (see the module docstring)."""
        while True:
            try:
                return self._run_once(fetches, feed_dict, options, run_metadata)
            except (errors.UnavailableError, errors.AbortedError) as e:
                if not self._recoverable(e):
                    raise
                self._recover(e)

    def _run_once(self, fetches, feed_dict, options, run_metadata):
        if self._closed:
            raise errors.FailedPreconditionError("run() on a closed MonitoredSession")
        ctx = SessionRunContext(SessionRunArgs(fetches, feed_dict, options), self._sess)
        actual, feeds = {"caller": fetches}, dict(feed_dict or {})
        for i, h in enumerate(self._hooks):
            args = h.before_run(ctx)
            if args is None:
                continue
            if args.fetches is not None:
                actual[i] = args.fetches
            for k, v in (args.feed_dict or {}).items():
                if k in feeds:
                    raise errors.InvalidArgumentError(
                        f"hook {type(h).__name__} feeds {getattr(k, 'name', k)}, which is already fed")
                feeds[k] = v
            if options is None and args.options is not None:
                options = args.options
        if run_metadata is None and options is not None and getattr(options, "trace_level", 0):
            run_metadata = RunMetadata()   # a hook asked for a trace: it reads the stats in after_run
        try:
            out = self._sess.run(actual, feeds or None, options, run_metadata)
        except errors.OutOfRangeError:
            self._stop_requested = True
            raise
        for i, h in enumerate(self._hooks):
            h.after_run(ctx, SessionRunValues(out.get(i), options, run_metadata))
        self._stop_requested = self._stop_requested or ctx.stop_requested
        return out["caller"]

    def should_stop(self) -> bool:
        return self._closed or self._stop_requested or self._coord.should_stop()

    def close(self):
        self._close_internal(error=False)

    def _close_internal(self, error: bool):
        if self._closed:
            return
        self._closed = True
        try:
            if not error:
                for h in self._hooks:
                    h.end(self._sess)
        finally:
            try:
                self._coord.request_stop()
                if self._threads:
                    self._coord.join(self._threads, stop_grace_period_secs=self._grace)
            finally:
                self._sess.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and issubclass(exc_type, errors.OutOfRangeError | StopIteration):
            exc_type = None
        self._close_internal(error=exc_type is not None)
        return exc_type is None


def wait_for_tasks(tasks: dict, transport, security, deadline: float, poll: float = 0.1) -> None:
    """Poll ``Health`` on every task ({(job, task): address}) through fresh channels until all
    answer; DeadlineExceededError naming the silent ones after ``deadline`` (monotonic)."""
    waiting = dict(tasks)
    last_report = time.monotonic()
    while True:
        for key, address in list(waiting.items()):
            ch = transport.channel(address, security)
            try:
                wire.decode_response(ch.call("Health", wire.encode_message({}), 2.0))
                del waiting[key]
            except errors.OpError:
                pass
            finally:
                ch.close()
        if not waiting:
            return
        now = time.monotonic()
        names = ", ".join(f"/job:{j}/task:{t} ({a})" for (j, t), a in sorted(waiting.items()))
        if now > deadline:
            raise errors.DeadlineExceededError(f"MonitoredSession: the cluster did not come back: no answer from {names}")
        if now - last_report >= 5.0:
            log.info(f"MonitoredSession: still waiting for {names}")
            last_report = now
        time.sleep(poll)


def MonitoredTrainingSession(master="", is_chief=True, checkpoint_dir=None, scaffold=None,  # noqa: N802 - TF1 name
                             hooks=None, chief_only_hooks=None, save_checkpoint_secs=_USE_DEFAULT,
                             save_summaries_steps=_USE_DEFAULT, save_summaries_secs=_USE_DEFAULT, config=None,
                             stop_grace_period_secs=120, log_step_count_steps=100, max_wait_secs=7200,
                             save_checkpoint_steps=_USE_DEFAULT, summary_dir=None):
    """A MonitoredSession for training: the chief restores the latest checkpoint of
    ``checkpoint_dir`` (or initializes), saves every ``save_checkpoint_steps`` steps or
    ``save_checkpoint_secs`` seconds (default 600 s when neither is given) and at the end, writes
    summaries (``tw.summary.merge_all()``) every ``save_summaries_steps`` steps or
    ``save_summaries_secs`` seconds (default 100 steps) and the global step rate every
    ``log_step_count_steps`` steps to ``summary_dir`` (default ``checkpoint_dir``). A non-chief
    worker (``is_chief=False``) waits for the chief's initialization and runs only ``hooks``
    (no saver, summary or chief-only hooks), as in TF1. With a cluster as ``master`` it recovers
    from lost tasks (waiting ``max_wait_secs`` at most for them; see the module docstring)."""
    scaffold = scaffold or Scaffold()
    if not is_chief:
        creator = WorkerSessionCreator(scaffold, master, config, max_wait_secs=max_wait_secs)
        return MonitoredSession(creator, list(hooks or []), stop_grace_period_secs, max_wait_secs=max_wait_secs)
    if save_checkpoint_secs is _USE_DEFAULT and save_checkpoint_steps is _USE_DEFAULT:
        save_checkpoint_secs, save_checkpoint_steps = 600, None
    elif save_checkpoint_secs is _USE_DEFAULT:
        save_checkpoint_secs = None
    elif save_checkpoint_steps is _USE_DEFAULT:
        save_checkpoint_steps = None
    if save_summaries_steps is _USE_DEFAULT and save_summaries_secs is _USE_DEFAULT:
        save_summaries_steps, save_summaries_secs = 100, None
    elif save_summaries_steps is _USE_DEFAULT:
        save_summaries_steps = None
    elif save_summaries_secs is _USE_DEFAULT:
        save_summaries_secs = None
    summary_dir = summary_dir or checkpoint_dir
    all_hooks = list(hooks or []) + list(chief_only_hooks or [])
    # Step rates and summaries are written at the global step: without one there is nothing
    # to write them at (TF1 fails in the hooks' begin(); a model without a global step that
    # trained here before keeps training).
    if summary_dir and get_global_step() is not None:
        if log_step_count_steps and log_step_count_steps > 0:
            all_hooks.append(StepCounterHook(every_n_steps=log_step_count_steps, output_dir=summary_dir))
        if (save_summaries_steps or 0) > 0 or (save_summaries_secs or 0) > 0:
            all_hooks.append(SummarySaverHook(
                save_steps=save_summaries_steps if (save_summaries_steps or 0) > 0 else None,
                save_secs=save_summaries_secs if (save_summaries_secs or 0) > 0 else None,
                output_dir=summary_dir, scaffold=scaffold))
    if checkpoint_dir and ((save_checkpoint_secs or 0) > 0 or (save_checkpoint_steps or 0) > 0):
        all_hooks.append(CheckpointSaverHook(
            checkpoint_dir, save_secs=save_checkpoint_secs if (save_checkpoint_secs or 0) > 0 else None,
            save_steps=save_checkpoint_steps if (save_checkpoint_steps or 0) > 0 else None, scaffold=scaffold))
    creator = ChiefSessionCreator(scaffold, master, config, checkpoint_dir)
    return MonitoredSession(creator, all_hooks, stop_grace_period_secs, max_wait_secs=max_wait_secs)
