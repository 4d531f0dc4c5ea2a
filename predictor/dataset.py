"""Train / validation / test splits of an execution-trace table, by model family.

Why: a predictor is only useful on models it has not seen, so families in the test split never
appear in training (ETS splits by model variant; we hold out whole families, which is harder).
RandWire networks form one family of many independent random graphs, so they split by graph:
all configs of one graph (batch sizes, image sizes) land in the same split. The transformer family
holds structurally different models (an encoder and a seq2seq model), so it splits by model:
a held-out split can contain a language model while training still sees attention. The LSTM
family splits by config (the ETS paper's granularity: unseen batch and sequence sizes of a known
architecture): with only two LSTM models in the zoo, a held-out LSTM architecture cannot be
learned — holding out the speech model gave errors of −61 % and +210 % on two GPUs.

Units are families (or RandWire graphs). They are shuffled with the seed; test units are taken
until they hold ``test_fraction`` of the configs (``test_families`` pins them instead). The
validation split is ``val_fraction`` of all configs, drawn (seeded) from the configs outside
the test units, so every family that is not tested trains. Holding out whole families for
validation as well took from training the structures that unseen families share: with
shufflenet (grouped and depthwise convolutions) drawn for validation, RegNet's test MRE was 13 %
on T4, against 5.6 % with it in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Split:
    train: tuple[str, ...]  # config_ids
    val: tuple[str, ...]
    test: tuple[str, ...]
    test_units: tuple[str, ...]
    val_units: tuple[str, ...]

    def part(self, traces: pd.DataFrame, name: str) -> pd.DataFrame:
        return traces[traces["config_id"].isin(set(getattr(self, name)))]

    def to_dict(self) -> dict:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test),
                "test_units": list(self.test_units), "val_units": list(self.val_units)}


def rows_of_units(traces: pd.DataFrame, units) -> pd.DataFrame:
    """The rows of ``traces`` whose config belongs to one of the split ``units`` (:func:`unit_of`)."""
    units = set(units)
    configs = traces.groupby("config_id")["family"].first()
    keep = {c for c, f in configs.items() if unit_of(f, c) in units}
    return traces[traces["config_id"].isin(keep)]


def unit_of(family: str, config_id: str) -> str:
    """The split unit: the family; for RandWire the graph (model + graph hash); for the
    transformer family the model; for the LSTM family the config."""
    parts = str(config_id).split(":")
    if family == "randwire":
        return f"randwire:{parts[0]}:{parts[-1]}"
    if family == "transformer":
        return f"transformer:{parts[0]}"
    if family == "lstm":
        return f"lstm:{config_id}"
    return family


def split_by_family(traces: pd.DataFrame, *, test_fraction: float = 0.25, val_fraction: float = 0.15,
                    seed: int = 0, test_families: list[str] | None = None) -> Split:
    configs = traces.groupby("config_id", sort=True)["family"].first()
    units = pd.Series([unit_of(f, c) for c, f in configs.items()], index=configs.index)
    sizes = units.value_counts()
    order = sorted(sizes.index)
    rng = np.random.default_rng(seed)
    order = [order[i] for i in rng.permutation(len(order))]
    total = len(configs)

    def take(candidates: list[str], fraction: float) -> list[str]:
        chosen, count = [], 0
        for unit in candidates:
            if count >= fraction * total:
                break
            chosen.append(unit)
            count += sizes[unit]
        return chosen

    if test_families is not None:
        unknown = {f for f in test_families if f not in set(configs.values) and f not in set(units.values)}
        if unknown:
            raise ValueError(f"test families not in the data: {', '.join(sorted(unknown))}; "
                             f"present: {', '.join(sorted(set(configs.values)))}")
        test = [u for u in order if u in set(test_families) or u.split(":")[0] in set(test_families)]
    else:
        test = take(order, test_fraction)
    rest = sorted(units.index[~units.isin(set(test))])
    n_val = int(round(val_fraction * total))
    if len(rest) - n_val < 1:
        raise ValueError(f"{len(rest)} configs outside the test units: nothing left to train on")
    val = sorted(rest[i] for i in rng.choice(len(rest), n_val, replace=False))
    train = sorted(set(rest) - set(val))
    return Split(tuple(train), tuple(val), tuple(sorted(units.index[units.isin(set(test))])), tuple(sorted(test)),
                 tuple(sorted(set(units[val]))))


def family_folds(traces: pd.DataFrame, k: int = 5, *, seed: int = 0, val_fraction: float = 0.15) -> list[Split]:
    """``k`` splits whose test units partition the data: every unit (family, RandWire graph, ...)
    held out exactly once. Units are shuffled with the seed and dealt, largest first, to the fold
    with the fewest configs, so the folds hold alike numbers of configs."""
    configs = traces.groupby("config_id", sort=True)["family"].first()
    units = pd.Series([unit_of(f, c) for c, f in configs.items()], index=configs.index)
    sizes = units.value_counts()
    if k < 2 or k > len(sizes):
        raise ValueError(f"{k} folds need 2 to {len(sizes)} (the data's split units)")
    order = sorted(sizes.index)
    order = [order[i] for i in np.random.default_rng(seed).permutation(len(order))]
    order.sort(key=lambda u: -sizes[u])  # stable: ties keep the seeded order
    folds: list[list[str]] = [[] for _ in range(k)]
    loads = [0] * k
    for unit in order:
        target = loads.index(min(loads))
        folds[target].append(unit)
        loads[target] += int(sizes[unit])
    return [split_by_family(traces, seed=seed, val_fraction=val_fraction, test_families=fold) for fold in folds]


def group_split(traces: pd.DataFrame, group: str, groups: dict[str, str], *, seed: int = 0,
                val_fraction: float = 0.15) -> Split:
    """Every family of ``group`` held out (``groups``: family -> group): the leave-one-group-out
    split, where the model has seen no architecture of that kind."""
    held = sorted({f for f in traces["family"].unique() if groups.get(f) == group})
    if not held:
        raise ValueError(f"no family of group {group!r} in the data")
    return split_by_family(traces, seed=seed, val_fraction=val_fraction, test_families=held)
