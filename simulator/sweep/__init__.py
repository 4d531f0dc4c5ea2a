"""Parameter sweeps over policy x predictor x workload x seed x load, resumable, local or on Ray.

The door to the room: :mod:`~simulator.sweep.driver` (``run_sweep``: the points of OUT not done
yet, each written as it finishes) runs the points of a grid (:mod:`~simulator.sweep.grid`:
``plan`` turns the command-line lists into ``RunConfig`` points), each point a run and its files
in OUT (:mod:`~simulator.sweep.points`), on a local process pool or a Ray cluster
(:mod:`~simulator.sweep.executors`), and compares every point with truth
(:mod:`~simulator.sweep.tables`: pooled ratios, the summary table).

To add a dimension to sweep over: a field of ``simulator.run.RunConfig`` (a point's key, its
columns in the results and its resume check follow from the fields), and its option in
``grid.plan`` and ``simrun sweep`` (``simulator/cli_sweep.py``).
"""
