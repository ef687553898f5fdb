"""``tw.train``: optimizers, global step (and later Saver, checkpoints)."""

from tensorweave.train.adagrad import AdagradOptimizer
from tensorweave.train.adam import AdamOptimizer
from tensorweave.train.gradient_descent import GradientDescentOptimizer
from tensorweave.train.momentum import MomentumOptimizer
from tensorweave.train.optimizer import Optimizer
from tensorweave.train.rmsprop import RMSPropOptimizer
from tensorweave.train.training_util import (
    assert_global_step,
    create_global_step,
    get_global_step,
    get_or_create_global_step,
    global_step,
)

__all__ = [
    "Optimizer",
    "GradientDescentOptimizer",
    "MomentumOptimizer",
    "AdagradOptimizer",
    "AdamOptimizer",
    "RMSPropOptimizer",
    "get_global_step",
    "create_global_step",
    "get_or_create_global_step",
    "assert_global_step",
    "global_step",
]
