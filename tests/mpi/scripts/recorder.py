"""A callback shared by tests/mpi/test_distributed.py and run_demo.py: samples the depth along a
line after every step (in a distributed run: on rank 0, on the gathered state)."""

import numpy as np


class Recorder:
    def __init__(self):
        self.rows = []

    def on_step(self, sim):
        x = np.linspace(-2.0, 2.0, 41)
        self.rows.append(np.concatenate([[sim.t], sim.sample(x, 0.3 * x)[:, 0]]))
