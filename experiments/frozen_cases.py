"""Frozen scheduling cases: the per-job records of every policy on fixed inputs, as digests.

Why: speeding up the policies (incremental state, vectorised hot paths) must not change what they
decide. The digests of the records were taken before that work; the suite checks the small
cases, ``python -m experiments.frozen_cases check --big`` (and the policy benchmark) the big ones.
A digest is over every record column, bit for bit (``pandas.util.hash_pandas_object``).

Re-recorded on purpose: AlloX's digests, when its matching began to offer positions lazily. The
plan's total completion time is the same optimum (checked decision by decision against the old
full matrix on these cases: at most 9e-16 apart, i.e. summation order), but among equal-cost
matchings (same-type GPUs swapping equally long queues) the solver may now pick another one.

Hydra was first frozen with a node budget and a time budget that never binds (``budget_ms`` is
read from the clock: binding, it makes the plan depend on the CPU's speed; ``bnb=off`` needs the
large budget too since the budget bounds the heuristic as well). Since issue 31 its budget is in
work units by default, so its default specs are frozen too, and the same searches bounded by work
alone (``work=all``: the records of the never-binding time budget, with no clock read); these hold
under an artificially slowed clock (tests/policies/test_hydra_determinism.py).

    python -m experiments.frozen_cases record [--big]   # only before an intended change
    python -m experiments.frozen_cases check [--big]
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import click
import pandas as pd

from experiments.hydra_cases import default_cases

DIGESTS = Path(__file__).resolve().parent / "frozen_cases.json"

POLICIES = (
    "fifo", "sjf", "edf",
    "allox", "allox:window=all", "allox:mode=offline,window=all",
    "hydra:nodes=2000,budget_ms=3600000",
    "hydra:mode=offline,nodes=2000,budget_ms=3600000",
    "hydra:bnb=off,budget_ms=3600000",
    # work-bound (issue 31): the defaults, and the specs above without the clock
    "hydra", "hydra:mode=offline",
    "hydra:nodes=2000,work=all", "hydra:mode=offline,nodes=2000,work=all", "hydra:bnb=off,work=all",
)


@dataclass(frozen=True)
class Case:
    """One input: a Hydra case file (from ../shared) on its cluster, or a synthetic workload."""

    name: str
    workload: str            # hydra-light:N | hydra-heavy:N | pai-like:N | philly-like:N
    predictor: str = "truth"
    big: bool = False

    def run(self, policy: str) -> pd.DataFrame:
        from simulator.cluster import resolve
        from simulator.run import RunConfig, execute

        kind, _, n = self.workload.partition(":")
        if kind.startswith("hydra-"):
            from traces.hydra_cases import load

            file = {"hydra-light": "20_ddl.csv", "hydra-heavy": "30_ddl.csv"}[kind]
            trace = load(default_cases() / file).head(int(n))
            config = RunConfig(policy=policy, predictor=self.predictor)
            return execute(config, trace=trace, cluster=resolve(kind)).records
        config = RunConfig(policy=policy, predictor=self.predictor, workload=self.workload)
        return execute(config).records

    @property
    def needs_shared(self) -> bool:
        return self.workload.startswith("hydra-")


CASES = (
    Case("hydra-light-100", "hydra-light:100"),
    Case("hydra-heavy-100", "hydra-heavy:100"),
    Case("pai-like-300-noisy", "pai-like:300", predictor="noisy:0.2"),
    Case("philly-like-300-noisy", "philly-like:300", predictor="noisy:0.2"),  # gang jobs
    Case("hydra-light-400", "hydra-light:400", big=True),
    Case("hydra-heavy-400", "hydra-heavy:400", big=True),
    Case("pai-like-2000-noisy", "pai-like:2000", predictor="noisy:0.2", big=True),
    Case("philly-like-2000-noisy", "philly-like:2000", predictor="noisy:0.2", big=True),
)


def digest(records: pd.DataFrame) -> str:
    """SHA-256 over the exact bits of every record (values and column names, in order)."""
    h = hashlib.sha256(",".join(records.columns).encode())
    h.update(pd.util.hash_pandas_object(records, index=False).to_numpy().tobytes())
    return h.hexdigest()


def key(case: Case, policy: str) -> str:
    return f"{case.name} | {policy}"


def load_digests() -> dict[str, str]:
    return json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}


def selected(big: bool) -> list[Case]:
    return [c for c in CASES if c.big == big and (not c.needs_shared or default_cases().exists())]


@click.group()
def main() -> None:
    """Record or check the frozen cases' digests."""


@main.command()
@click.option("--big", is_flag=True, help="The big cases (minutes) instead of the suite's small ones.")
@click.option("--policy", "policies", multiple=True, help="Only these policy specs (default: all).")
def record(big: bool, policies: tuple[str, ...]) -> None:
    """Run each case and store its digest (only before an intended change of decisions)."""
    from tqdm import tqdm

    digests = load_digests()
    todo = [(c, p) for c in selected(big) for p in (policies or POLICIES)]
    for case, policy in tqdm(todo, desc="frozen cases", unit="run"):
        digests[key(case, policy)] = digest(case.run(policy))
        DIGESTS.write_text(json.dumps(dict(sorted(digests.items())), indent=1) + "\n")  # incremental


@main.command()
@click.option("--big", is_flag=True)
@click.option("--policy", "policies", multiple=True)
def check(big: bool, policies: tuple[str, ...]) -> None:
    """Rerun each recorded case and compare digests."""
    digests = load_digests()
    bad = 0
    for case in selected(big):
        for policy in policies or POLICIES:
            want = digests.get(key(case, policy))
            if want is None:
                click.echo(f"{key(case, policy)}: not recorded")
                continue
            same = digest(case.run(policy)) == want
            bad += not same
            click.echo(f"{key(case, policy)}: {'same' if same else 'DIFFERENT'}")
    if bad:
        raise click.ClickException(f"{bad} case(s) decide differently from their frozen records")


if __name__ == "__main__":
    main()
