"""The op sequence of a zoo config on the meta device, without the profiler's noise.

Why: the meta capture runs the PyTorch profiler, whose C++ side (Kineto) prints ``USDT ...
profiler_start`` / ``profiler_stop`` on every run and, on a machine without a CUDA driver,
``ERROR ... gpuGetDeviceCount failed with code 35`` once. Kineto's own switch
(``KINETO_LOG_LEVEL``) silences those only together with every real Kineto error, so instead file
descriptor 2 is sent to a temporary file for the duration of the capture and replayed afterwards
without exactly those lines. Everything else (warnings, other errors) still reaches stderr, after
the capture. ``ETS_PROFILER_LOGS=1`` turns the filter off. Both ``ets predict`` and the emulator
(``ets devices time``) capture this way; it lives with the capture, below both.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

import pandas as pd

from predictor.emulator.zoo.config import ModelConfig

NOISE = (
    re.compile(rb"^USDT:[^\]\n]*\] profiler_(start|stop)\s*$"),
    re.compile(rb"^ERROR:[^\]\n]*\] gpuGetDeviceCount failed with code 35\s*$"),
)


@contextlib.contextmanager
def quiet_profiler() -> Iterator[None]:
    """Drop Kineto's known start/stop and no-driver lines from fd 2 while the block runs; every
    other byte written to stderr meanwhile is written back when it ends."""
    if os.environ.get("ETS_PROFILER_LOGS"):
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable stderr: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().splitlines(keepends=True)
                    if not any(p.match(line) for p in NOISE)]
            if kept:
                os.write(2, b"".join(kept))


def capture_quietly(config: ModelConfig) -> pd.DataFrame:
    """The op sequence of ``config`` on the meta device, without the profiler's noise."""
    from predictor.emulator.capture.opseq import capture  # torch: only when a capture runs

    with quiet_profiler():
        return capture(config, "meta")
