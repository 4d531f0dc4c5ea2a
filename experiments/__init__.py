"""Experiments: every number the docs report is produced by a module here, run as
``python -m experiments.<name>`` (docs/experiments.md lists them), each resumable with its results
in ``reports/<name>/``; ``bench_*`` are the speed benchmarks (docs/benchmarks.md), ratios against
a baseline measured in the same run.

To add one: a module with a click command, its results written as they are made, and its line in
docs/experiments.md (tests/test_docs.py checks every documented option exists).
"""
