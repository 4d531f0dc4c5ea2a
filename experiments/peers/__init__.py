"""Peer simulators run as their authors run them: the reference our reimplementations must match.

Why (issue 51): a reimplemented policy is trusted only if it gives what the original gives on the
original's inputs. This package runs a peer's *own* simulator, unmodified, at a pinned commit, in a
scratch directory with its own virtual environment, and reads its output into plain numbers that
our side (``simrun``) can be put beside, job by job and round by round.

One module a job, imports pointing down this list (none back up, no cycle):

* :mod:`~experiments.peers.cli`: the command line (``python -m experiments.peers``, :mod:`.__main__`);
* :mod:`~experiments.peers.gavel`: Gavel (``stanford-futuredata/gavel``): its run, its log, the msr
  trace conversion, and our ``gavel`` beside it (``gavel_table``);
* :mod:`~experiments.peers.tiresias`: Tiresias (``SymbioticLab/Tiresias``): Python 2.7, its run,
  its output, the inputs of the stored cases, and our ``tiresias`` beside it (``tiresias_table``);
* :mod:`~experiments.peers.common`: what both share: the scratch directory, locking, git,
  ``PeerUnavailable`` / ``PeerFailed``, writing a run as JSON, and ``DATA``
  (experiments/data/peers/, where the stored runs and their inputs are kept, a README per peer).

Anything missing for that (git, the network or mirror, the packages) raises ``PeerUnavailable``
with the reason: a harness skips on it. A peer that ran and failed raises ``PeerFailed``.

    python -m experiments.peers gavel --trace traces/physical_cluster/medium_test.trace --cluster v100:4,p100:4,k80:4
    python -m experiments.peers gavel-refs        # re-measure experiments/data/peers/gavel/*.json
    python -m experiments.peers table             # ours (gavel:restart=0) beside the stored Gavel runs
    python -m experiments.peers tiresias --trace 60_job.csv --cluster 1:1:8
    python -m experiments.peers tiresias-refs     # re-make inputs/ and experiments/data/peers/tiresias/*.json
    python -m experiments.peers tiresias-table    # ours (tiresias:restart=0) beside the stored runs

To add a peer: a module here with its run (``<peer>_reference``), its stored cases and its table
(ours beside the stored runs), built on :mod:`~experiments.peers.common`, and its commands in
:mod:`~experiments.peers.cli`.
"""

from experiments.peers.common import DATA, EXIT_UNAVAILABLE, PeerFailed, PeerUnavailable, write_json
from experiments.peers.gavel import (
    GAVEL_COMMIT,
    OUR_GAVEL,
    REFERENCE_CASES,
    gavel_reference,
    gavel_table,
    ours_gavel,
    parse_cluster,
    table_markdown,
)
from experiments.peers.tiresias import (
    OUR_TIRESIAS,
    TIRESIAS_CASES,
    TIRESIAS_COMMIT,
    ours_tiresias,
    tiresias_reference,
    tiresias_table,
    tiresias_table_markdown,
)

__all__ = [
    "DATA", "EXIT_UNAVAILABLE", "PeerFailed", "PeerUnavailable", "write_json",
    "GAVEL_COMMIT", "OUR_GAVEL", "REFERENCE_CASES", "gavel_reference", "gavel_table", "ours_gavel", "parse_cluster",
    "table_markdown",
    "OUR_TIRESIAS", "TIRESIAS_CASES", "TIRESIAS_COMMIT", "ours_tiresias", "tiresias_reference", "tiresias_table",
    "tiresias_table_markdown",
]
