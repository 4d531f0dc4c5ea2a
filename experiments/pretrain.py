"""Build the emulated training data, the pretrained checkpoints and the workload set that ship
with the package, and the comparison of ETS against its baselines on the held-out families.

Why: `simrun --predictor ets|habitat|dnnperf` must work right after install, so the package
carries one small checkpoint per method and GPU type of the default simulator cluster (T4, P100,
V100), trained here on emulated execution traces of zoo configs, plus the op sequences of the
held-out configs that cluster jobs are bound to.

    python -m experiments.pretrain [--configs 700] [--devices T4,P100,V100] [--minutes 15]
                                   [--methods ets,opbased,habitat,dnnperf (all)]

Stages (each resumable: a rerun skips what exists):
1. op sequences of the first ``--configs`` zoo configs (all kinds, stratified by family), of
   :data:`LLM_CONFIGS` LLM configs (:func:`llm_configs`; GPT-2 and BERT train, GPT-3 and OPT are
   held out) and of :data:`EXTRA_CONFIGS`
   (64 more LSTM configs, training side only: :func:`dataset_configs`) on the meta device, in
   ``OUT/sequences``;
2. each sequence emulated on every device (seeded noise), in ``OUT/data`` (one Parquet per device);
3. the split: the test units are pinned (:func:`held_out_units`) so that every job class of the
   cluster traces (image, language, speech) has held-out configs and RandWire is held out whole
   (the paper's random-graph test); validation configs are drawn with seed 0 from the rest
   (``predictor.dataset``);
4. per method and device: train, calibrate its prediction intervals on the test units
   (leave-family-out, :mod:`predictor.intervals`), save ``predictor/checkpoints/<method>-<GPU>.pt``,
   evaluate on the test units; one JSON line per result in ``OUT/results.jsonl`` (the resume point), the
   tables in ``OUT/report.md``;
5. the workload set: the held-out configs' op sequences, ``traces/workloads/sequences.parquet``.

Budgets: ETS ``--minutes``, DNNPerf-style ``--dnnperf-minutes`` (their convergence curves are
compared), the operator-based MLP and Habitat-style's MLP ``--baseline-minutes``. Habitat-style predicts each
device from another one's trace: P100 and V100 from T4, T4 from V100 (:func:`habitat_source` reads
it from the shipped checkpoints' configs).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pandas as pd
from tqdm import tqdm

from predictor import methods
from predictor.checkpoints import CHECKPOINT_DIR, checkpoint_path
from predictor.common.op_trace import device_file, read_dataset, write_traces
from predictor.dataset import split_by_family
from predictor.emulator.collect import collect
from predictor.emulator.devices.specs import EMULATED_PREFIX, load_params
from predictor.emulator.devices.timing import emulate
from predictor.emulator.zoo.registry import zoo_configs
from predictor.evaluate import fit_intervals, markdown
from traces.workloads import WORKLOADS_FILE, write_workloads

TEST_UNITS = ["densenet", "efficientnet", "mobilenet_v3", "regnet", "randwire", "transformer:transformer_seq2seq",
              "gpt3", "opt"]


EXTRA_CONFIGS = {"lstm": 64}
LLM_CONFIGS = 42  # 2 per model and dtype; GPT-2 and BERT train, GPT-3, OPT (the workload LLM jobs) held out


def llm_configs(count: int = LLM_CONFIGS) -> list:
    """``count`` configs of the LLM zoo, every model and dtype in turn (``llm.grid()`` order within
    each). Why both sides: LLMs are the jobs whose predictions were furthest off (2.4-4.4x too slow
    with no LLM in training); training on GPT-2 and BERT and testing on the unseen GPT-3 and OPT
    families measures whether a decoder or encoder in training carries to other LLMs."""
    from predictor.emulator.zoo import llm

    groups: dict[tuple, list] = {}
    for c in llm.grid():
        groups.setdefault((c.model, c.dtype), []).append(c)
    keys = sorted(groups)
    out = []
    for i in range(count):
        k, j = i % len(keys), i // len(keys)
        group = groups[keys[k]]
        if j < len(group):  # a different (sequence, batch) point for each model and round
            out.append(group[(k * 7 + j * 11) % len(group)])
    return out


def dataset_configs(configs: int) -> tuple[list, list]:
    """(base, extra): the first ``configs`` zoo configs (stratified, so every family gets the same
    count), and :data:`EXTRA_CONFIGS` more of some families, which only ever train or validate.

    Why the extra LSTM configs: an LSTM iteration is one ``lstm`` op and a few
    ``MkldnnRnnLayerBackward0`` ops whose time is the sum of a per-step latency (2 kernels per
    time step) and the GEMM work; the 16 LSTM configs of the stratified prefix that land in
    training did not pin that down (held-out speech configs off by up to +82 %), while an LSTM
    config is 130-200 ops against about 1,000 for a CNN, so 64 more cost little training time."""
    every = zoo_configs("all")
    extra = []
    for family, count in EXTRA_CONFIGS.items():
        extra += [c for c in every[configs:] if c.family == family][:count]
    return every[:configs] + llm_configs(), extra


def held_out_units(traces: pd.DataFrame, base: set[str]) -> list[str]:
    """:data:`TEST_UNITS` plus every other config (in id order) of the LSTM speech model among
    the ``base`` config ids: the LSTM family splits by config (see predictor.dataset)."""
    speech = sorted(c for c in traces.loc[traces["model"] == "lstm_speech", "config_id"].unique() if c in base)
    return TEST_UNITS + [f"lstm:{c}" for c in speech[::2]]


# hidden: docs/predictor.md (inference time)
ETS_SETTINGS = {"hidden": 32, "batch_size": 512, "lr": 3e-3, "patience": 12}
# Per method, the settings its shipped checkpoints were trained with beyond its config's defaults.
SHIPPED_SETTINGS: dict[str, dict] = {"ets": ETS_SETTINGS}
# The source GPU of a Habitat model for a GPU no shipped checkpoint records one for (the shipped
# habitat-<GPU>.pt files record theirs in their config: habitat_source reads it there).
HABITAT_SOURCE_UNSHIPPED = {"A100": "V100", "H100": "V100", "L4": "T4"}


def habitat_source(gpu: str) -> str:
    """The GPU whose traces the Habitat model of ``gpu`` scales: the ``source_device`` its shipped
    checkpoint was trained with (so a retrain reproduces it), else :data:`HABITAT_SOURCE_UNSHIPPED`."""
    from predictor import checkpoint_file

    path = checkpoint_path(gpu, CHECKPOINT_DIR, "habitat")
    if path.exists():
        return str(checkpoint_file.read(path)["config"]["source_device"]).removeprefix(EMULATED_PREFIX)
    return HABITAT_SOURCE_UNSHIPPED[gpu]


def emulated_datasets(sequences: pd.DataFrame, devices: list[str], out: Path) -> None:
    params = load_params()
    for gpu in devices:
        name = EMULATED_PREFIX + gpu
        path = device_file(out, name)
        if path.exists() and (set(pd.read_parquet(path, columns=["config_id"])["config_id"])
                              >= set(sequences["config_id"])):
            continue
        parts = [emulate(seq, name, params, seed=0) for _, seq in
                 tqdm(sequences.groupby("config_id", sort=True), desc=f"emulate {gpu}", unit="config")]
        write_traces(out, pd.concat(parts, ignore_index=True))


def train_one(method: str, gpu: str, data: dict[str, pd.DataFrame], split, minutes: float):
    target = EMULATED_PREFIX + gpu
    options = {"max_minutes": minutes, **SHIPPED_SETTINGS.get(method, {})}
    if methods.info(method).reads_source_device:
        options["source_device"] = EMULATED_PREFIX + habitat_source(gpu)
        traces = pd.concat(data.values(), ignore_index=True)  # its MLPs learn from every device
    else:
        traces = data[target]
    config = methods.make_config(method, **options)
    model = methods.module(method).train(split.part(traces, "train"), split.part(traces, "val"), config,
                                         device=target, split=split.to_dict())
    return model, split.part(traces, "test")


@click.command()
@click.option("--configs", type=click.IntRange(10), default=700, show_default=True)
@click.option("--devices", default="T4,P100,V100", show_default=True)
@click.option("--methods", "method_list", default=",".join(methods.METHODS), show_default=True)
@click.option("--minutes", type=float, default=15.0, show_default=True, help="ETS training time limit per device.")
@click.option("--dnnperf-minutes", type=float, default=8.0, show_default=True,
              help="DNNPerf-style training time limit per device.")
@click.option("--baseline-minutes", type=float, default=2.0, show_default=True,
              help="Training time limit for the operator-based and Habitat-style MLPs.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/pretrain"),
              show_default=True)
@click.option("--checkpoints", type=click.Path(file_okay=False, path_type=Path), default=CHECKPOINT_DIR,
              show_default=True)
@click.option("--catalog", type=click.Path(dir_okay=False, path_type=Path), default=WORKLOADS_FILE, show_default=True)
@click.option("--workers", type=click.IntRange(1), default=2, show_default=True)
def main(configs: int, devices: str, method_list: str, minutes: float, dnnperf_minutes: float, baseline_minutes: float,
         out: Path,
         checkpoints: Path, catalog: Path, workers: int) -> None:
    base, extra = dataset_configs(configs)
    failures = out / "sequences" / "failures.jsonl"
    failed = _failed_ids(failures)
    if failed:  # e.g. LSTM captures beyond the machine's memory: not retried on every resume
        click.echo(f"{len(failed)} configs failed to capture in an earlier run ({failures}); skipped. "
                   "Delete that file to retry them.")
    chosen = [c for c in base + extra if c.config_id not in failed]
    gpus = devices.split(",")
    if not _complete(out / "data", chosen, gpus):
        collect(chosen, "meta", out / "sequences", workers=workers)
        sequences = read_dataset(out / "sequences")
        emulated_datasets(sequences[sequences["config_id"].isin({c.config_id for c in chosen})], gpus, out / "data")
    data = {EMULATED_PREFIX + g: pd.read_parquet(device_file(out / "data", EMULATED_PREFIX + g)) for g in gpus}
    first = next(iter(data.values()))
    split = split_by_family(first, seed=0, test_families=held_out_units(first, {c.config_id for c in base}))
    click.echo(f"split: {len(split.train)} train / {len(split.val)} validation / {len(split.test)} test configs; "
               f"validation drawn from {len(split.val_units)} units")
    results_file = out / "results.jsonl"
    done = {(r["method"], r["device"]) for r in _results(results_file)}
    for method in method_list.split(","):
        for gpu in gpus:
            if (method, EMULATED_PREFIX + gpu) in done:
                continue
            budget = {"ets": minutes, "dnnperf": dnnperf_minutes}.get(method, baseline_minutes)
            model, test = train_one(method, gpu, data, split, budget)
            result = fit_intervals(model, test, f"{out / 'data'}: held-out families (emulated {gpu})")
            path = model.save(checkpoint_path(gpu, checkpoints, method))
            best = min(model.history, key=lambda h: h["val_mre"])
            row = {"method": method, "device": model.device, "checkpoint": str(path), "epochs": len(model.history),
                   "train_minutes": round(model.history[-1]["wall_s"] / 60, 2),
                   "best_val_mre": best["val_mre"], "best_at_minutes": round(best["wall_s"] / 60, 2),
                   **result.headline(), **{k: v for k, v in result.intervals().items() if k != "intervals"},
                   "by_op_count": result.by_bucket().to_dict("records"),
                   "randwire_by_op_count": _randwire_buckets(result)}
            with results_file.open("a") as f:
                f.write(json.dumps(row, default=float) + "\n")
            click.echo(json.dumps({k: v for k, v in row.items() if not isinstance(v, list)}, default=float))
    rows = _results(results_file)
    (out / "split.json").write_text(json.dumps(split.to_dict(), indent=1) + "\n")
    (out / "report.md").write_text(report(rows) + "\n")
    test_sequences = split.part(next(iter(data.values())), "test")
    write_workloads(test_sequences, catalog)
    click.echo(f"report: {out / 'report.md'}; catalog: {catalog}")


def _failed_ids(failures: Path) -> set[str]:
    """Config ids recorded in ``failures`` (``predictor.emulator.collect``'s failures.jsonl), if any."""
    if not failures.exists():
        return set()
    return {json.loads(line)["config_id"] for line in failures.read_text().splitlines() if line.strip()}


def _complete(data_dir: Path, chosen, gpus: list[str]) -> bool:
    """Whether every device's dataset already holds every chosen config (stages 1-2 done)."""
    ids = {c.config_id for c in chosen}
    for gpu in gpus:
        path = device_file(data_dir, EMULATED_PREFIX + gpu)
        if not path.exists() or not set(pd.read_parquet(path, columns=["config_id"])["config_id"]) >= ids:
            return False
    return True


def _results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _randwire_buckets(result) -> list[dict]:
    from predictor.evaluate import Evaluation

    randwire = result.per_trace[result.per_trace["family"] == "randwire"]
    return Evaluation(randwire).by_bucket().to_dict("records") if len(randwire) else []


def report(rows: list[dict]) -> str:
    """The comparison tables: headline per method and device; RandWire by op-count bucket."""
    table = pd.DataFrame([{k: r[k] for k in ("method", "device", "traces", "mre", "rmse_ms", "wape", "epochs",
                                             "train_minutes", "best_val_mre", "best_at_minutes")} for r in rows])
    buckets = pd.DataFrame([{"method": r["method"], "device": r["device"], **b} for r in rows
                            for b in r["randwire_by_op_count"]])
    return ("## Held-out families, emulated devices\n\n" + markdown(table)
            + "\n\n## RandWire by op count\n\n" + (markdown(buckets) if len(buckets) else "(no RandWire test traces)"))


if __name__ == "__main__":
    main()
