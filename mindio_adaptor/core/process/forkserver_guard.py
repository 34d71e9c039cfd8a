"""Imported by multiprocessing's forkserver as a preload module (orphan_guard.install_for_children), and
by nothing else. The forkserver is started by a rank but neither runs the training script nor is a
spawned child, so the rank's guards do not reach it: this ends the forkserver, and every process it
forked (Megatron's persistent checkpoint worker, for one), once the rank that started it is gone."""
from mindio_adaptor.core.process import orphan_guard

orphan_guard.end_with_parent(and_children=True)
