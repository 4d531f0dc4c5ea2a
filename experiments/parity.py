"""Feature parity of imported and captured traces: the ETS CSVs against our capture of each config.

Why: a model trained on ``ets collect`` traces must meet the same per-op features in an imported
trace. This measures, per file and family, how the ETS authors' rows align onto our meta capture
of the same zoo config (model, batch, image size, dtype, classes), and how far their recorded
features (op names, params, FLOPs, bytes) are from ours on the matched rows — the difference
``ets import ets-csv --features zoo`` removes by carrying the timings onto our capture.

    python -m experiments.parity [--ets-traces ../shared/ets_traces] [--out reports/parity]
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import pandas as pd

from predictor.emulator.capture.importers import import_onto_zoo
from predictor.evaluate import markdown

DEFAULT_TRACES = Path(os.environ.get("ETS_TRACES_DIR", "../shared/ets_traces"))
COLUMNS = {"real_rate": "imported rows matched", "matched_time_share": "time on matched rows",
           "name_agreement": "op name equal (raw)", "params_agreement": "params equal (raw)",
           "flops_agreement": "FLOPs equal (raw, ±1 %)", "bytes_agreement": "bytes equal (raw, ±1 %)"}


def per_family(report: pd.DataFrame) -> pd.DataFrame:
    rows = report.groupby(["device", "family"]).agg(
        files=("config_id", "size"), real_rows=("real_rows", "sum"), captured_rows=("captured_rows", "sum"),
        matched=("matched", "sum"), matched_time_share=("matched_time_share", "min"),
        name_agreement=("name_agreement", "mean"), params_agreement=("params_agreement", "mean"),
        flops_agreement=("flops_agreement", "mean"), bytes_agreement=("bytes_agreement", "mean")).reset_index()
    rows.insert(6, "real_rate", rows.pop("matched") / rows["real_rows"])
    return rows.rename(columns={**COLUMNS, "matched_time_share": "time on matched rows (worst file)"})


@click.command()
@click.option("--ets-traces", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_TRACES,
              show_default=True, help="The ETS CSV folders (also ETS_TRACES_DIR).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/parity"),
              show_default=True)
def main(ets_traces: Path, out: Path) -> None:
    if not ets_traces.is_dir():
        raise click.ClickException(f"{ets_traces}: not a directory (set --ets-traces or ETS_TRACES_DIR)")
    _, report, skipped = import_onto_zoo(ets_traces, progress=True)
    out.mkdir(parents=True, exist_ok=True)
    report.to_csv(out / "per_file.csv", index=False)
    lines = ["# Feature parity: ETS CSV rows against our capture of the same zoo config", "",
             f"{len(report)} files aligned ({report['matched'].sum():,} of {report['real_rows'].sum():,} imported "
             f"rows matched); raw columns compare the CSVs' recorded features with ours on matched rows "
             "(after `--features zoo` they are ours).", ""]
    if skipped:
        lines += ["Not aligned: " + "; ".join(s.reason for s in skipped), ""]
    lines += [markdown(per_family(report), digits=3), ""]
    (out / "report.md").write_text("\n".join(lines))
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
