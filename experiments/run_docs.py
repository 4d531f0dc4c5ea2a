"""Run every example command of the README, in order, in a scratch directory, and record how each
ended: the documentation cannot rot.

Why a script beside the test: tests/test_docs.py resolves every command line of README.md and
docs/ to its click command and options on every test run, and runs the quick examples; the whole
example block (a 5-minute training, the quick reproduction, the generalisation protocol) takes
longer than the suite may, so this runs all of it, as a user would paste it. The commands run in
order because they build on one another (``ets collect`` writes the dataset ``ets train`` reads);
the scratch directory has ``predictor/checkpoints`` and ``../shared`` linked in, so the README's
relative paths resolve and nothing is written into the checkout (``PYTHONSAFEPATH``: the scratch
directory's ``predictor/`` must not shadow the installed package for ``python -m``). Results are appended to
``results.jsonl`` as each command ends; a rerun skips the commands already passed (``--again``:
run all).

    python -m experiments.run_docs [--out reports/run_docs] [--timeout 1800] [--only TEXT] [--again]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import click
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = re.compile(r"(?:simrun|ets|python -m experiments\.\w+)(?=\s|$)")


def readme_examples(readme: Path = ROOT / "README.md") -> list[str]:
    """The README's runnable examples: fenced lines that start with one of our programs."""
    found, fenced = [], False
    for line in readme.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced and PROGRAM.match(line):
            found.append(line.strip())
    return found


def scratch(directory: Path, shared: Path | None) -> Path:
    """A working directory where the README's relative paths resolve: ``predictor/checkpoints``
    linked to the checkout's, ``../shared`` linked to ``shared`` (when it exists)."""
    work = directory / "work"
    (work / "predictor").mkdir(parents=True, exist_ok=True)
    links = {work / "predictor" / "checkpoints": ROOT / "predictor" / "checkpoints"}
    if shared is not None and shared.exists():
        links[directory / "shared"] = shared.resolve()
    for link, target in links.items():
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
    return work


def run_one(line: str, work: Path, timeout: float) -> dict:
    """Run one command line in ``work``; its exit status, seconds and the tail of its output."""
    started = time.perf_counter()
    try:
        done = subprocess.run(line, shell=True, cwd=work, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1"})
        rc, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, output = None, f"timed out after {timeout:.0f} s\n{exc.stdout or ''}{exc.stderr or ''}"
    tail = output if isinstance(output, str) else output.decode(errors="replace")
    return {"command": line, "rc": rc, "seconds": round(time.perf_counter() - started, 1),
            "output_tail": tail[-2000:]}


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/run_docs"),
              show_default=True, help="Where results.jsonl and the scratch directory go.")
@click.option("--shared", type=click.Path(file_okay=False, path_type=Path), default=ROOT.parent / "shared",
              show_default=True, help="The shared data folder the README's ../shared paths name.")
@click.option("--timeout", type=click.FloatRange(1), default=1800.0, show_default=True,
              help="Seconds one command may run.")
@click.option("--only", help="Run only the examples containing this text.")
@click.option("--again", is_flag=True, help="Run every example, also those an earlier run passed.")
def main(out: Path, shared: Path, timeout: float, only: str | None, again: bool) -> None:
    """Run the README's examples in order; exit 1 when one fails."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "results.jsonl"
    passed = set()
    if log.exists() and not again:
        passed = {r["command"] for r in map(json.loads, log.read_text().splitlines()) if r["rc"] == 0}
    work = scratch(out.resolve(), shared)
    todo = [c for c in readme_examples() if (only is None or only in c) and c not in passed]
    failed = []
    with log.open("a") as sink:
        for line in tqdm(todo, desc="README examples", unit="command", file=sys.stderr):
            result = run_one(line, work, timeout)
            sink.write(json.dumps(result) + "\n")
            sink.flush()
            state = "ok" if result["rc"] == 0 else f"FAILED (exit {result['rc']})"
            click.echo(f"{state:>18}  {result['seconds']:7.1f} s  {line}")
            if result["rc"] != 0:
                failed.append(result)
    for result in failed:
        click.echo(f"\n--- {result['command']}\n{result['output_tail']}", err=True)
    click.echo(f"{len(todo) - len(failed)} of {len(todo)} examples ran ({len(passed)} passed earlier); "
               f"results in {log}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
