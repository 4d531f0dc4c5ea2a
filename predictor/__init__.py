"""Execution traces and iteration-time prediction (ETS and baselines)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ets-sim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+source"
