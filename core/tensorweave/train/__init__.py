"""``tw.train``: optimizers, learning-rate schedules, global step, input pipelines, Saver and
checkpoints, hooks and MonitoredTrainingSession."""

from tensorweave.distributed.cluster import ClusterSpec
from tensorweave.distributed.server import Server
from tensorweave.ops.io_ops import match_filenames_once
from tensorweave.train.adagrad import AdagradOptimizer
from tensorweave.train.adam import AdamOptimizer
from tensorweave.train.all_reduce_sync import AllReduceSyncOptimizer
from tensorweave.train.coordinator import Coordinator, LooperThread
from tensorweave.train.device_setter import replica_device_setter
from tensorweave.train.ftrl import FtrlOptimizer
from tensorweave.train.gradient_descent import GradientDescentOptimizer
from tensorweave.train.hooks import (
    CheckpointSaverHook,
    CheckpointSaverListener,
    NanLossDuringTrainingError,
    NanTensorHook,
    SecondOrStepTimer,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    StopAtStepHook,
)
from tensorweave.train.input import (
    batch,
    input_producer,
    limit_epochs,
    range_input_producer,
    shuffle_batch,
    slice_input_producer,
    string_input_producer,
)
from tensorweave.train.learning_rate_decay import (
    cosine_decay,
    cosine_decay_restarts,
    exponential_decay,
    inverse_time_decay,
    linear_cosine_decay,
    natural_exp_decay,
    noisy_linear_cosine_decay,
    piecewise_constant,
    polynomial_decay,
)
from tensorweave.train.momentum import MomentumOptimizer
from tensorweave.train.monitored_session import (
    ChiefSessionCreator,
    MonitoredSession,
    MonitoredTrainingSession,
    Scaffold,
    WorkerSessionCreator,
)
from tensorweave.train.optimizer import Optimizer
from tensorweave.train.queue_runner import QueueRunner, add_queue_runner, start_queue_runners
from tensorweave.train.rmsprop import RMSPropOptimizer
from tensorweave.train.saver import (
    CheckpointState,
    NewCheckpointReader,
    Saver,
    checkpoint_exists,
    get_checkpoint_mtimes,
    get_checkpoint_state,
    latest_checkpoint,
    list_variables,
    load_checkpoint,
    load_variable,
    remove_checkpoint,
    update_checkpoint_state,
)
from tensorweave.train.summary_hooks import LoggingTensorHook, ProfilerHook, StepCounterHook, SummarySaverHook
from tensorweave.train.sync_replicas import SyncReplicasOptimizer
from tensorweave.train.training_util import (
    assert_global_step,
    create_global_step,
    get_global_step,
    get_or_create_global_step,
    global_step,
)

__all__ = [
    "ClusterSpec",
    "Server",
    "Optimizer",
    "GradientDescentOptimizer",
    "MomentumOptimizer",
    "AdagradOptimizer",
    "AdamOptimizer",
    "RMSPropOptimizer",
    "FtrlOptimizer",
    "SyncReplicasOptimizer",
    "AllReduceSyncOptimizer",
    "replica_device_setter",
    "get_global_step",
    "create_global_step",
    "get_or_create_global_step",
    "assert_global_step",
    "global_step",
    "Coordinator",
    "WorkerSessionCreator",
    "SummarySaverHook",
    "StepCounterHook",
    "LoggingTensorHook",
    "NanTensorHook",
    "NanLossDuringTrainingError",
    "ProfilerHook",
    "LooperThread",
    "QueueRunner",
    "add_queue_runner",
    "start_queue_runners",
    "input_producer",
    "string_input_producer",
    "range_input_producer",
    "slice_input_producer",
    "limit_epochs",
    "batch",
    "shuffle_batch",
    "match_filenames_once",
    "Saver",
    "CheckpointState",
    "NewCheckpointReader",
    "checkpoint_exists",
    "get_checkpoint_mtimes",
    "get_checkpoint_state",
    "latest_checkpoint",
    "list_variables",
    "load_checkpoint",
    "load_variable",
    "remove_checkpoint",
    "update_checkpoint_state",
    "SessionRunHook",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunValues",
    "SecondOrStepTimer",
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "StopAtStepHook",
    "Scaffold",
    "ChiefSessionCreator",
    "MonitoredSession",
    "MonitoredTrainingSession",
    "exponential_decay",
    "piecewise_constant",
    "polynomial_decay",
    "natural_exp_decay",
    "inverse_time_decay",
    "cosine_decay",
    "cosine_decay_restarts",
    "linear_cosine_decay",
    "noisy_linear_cosine_decay",
]
