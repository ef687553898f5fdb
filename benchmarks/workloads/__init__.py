"""Benchmark workloads. Each module defines ``NAME``, ``DESCRIPTION`` and
``build() -> Workload``; ``run.py`` times every variant of a workload in the same process."""

WORKLOADS = ("chain", "matmul", "branches", "mlp", "while_loop", "while_loop_grad", "autoencoder", "convnet", "sparse",
             "lstm")
