"""The hostile-input audits of issues 31 and 50, rerunnable: every case a command line as a new user would
type it, on a file a stranger could hand them, each in its own process.

Why a script beside the tests: the tests guard each finding in seconds; this runs the whole
audit as the user meets it — the installed command lines, fresh processes, their peak memory and
wall time — and prints one table. A case passes when its command ends as expected (refused in
one ``Error:`` line of at most 1,000 characters naming the file, field or option; or done, or
warned), printed no traceback, ran no code of the file (a marker file stays absent), replaced no
file, and stayed under 1 GB RSS and 30 s (a command that does real work whatever its input, such
as a run whose cache table is rebuilt, i.e. a cold run: within 1.25x the same command's clean run,
measured beside it).

    python -m experiments.audit_inputs [--out reports/audit] [--only SUBSTRING]

Needs ``../shared`` (``$ETS_SHARED``) for the cases on real files (they are skipped without it).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click
import pandas as pd

from experiments.shared_data import shared_dir

REPO = Path(__file__).resolve().parents[1]
SHARED = shared_dir()
MAX_RSS_MB, MAX_SECONDS, MAX_LINE = 1024, 30.0, 1000
# What no output may carry raw: control characters but the line ends and tab (a progress bar's \r too)
RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Each case runs in a child that reports its own peak RSS (and its children's) when it exits; a
# 6 GB address-space cap keeps a regression from taking the machine down (torch maps ~3 GB). The
# peak is the kernel's VmHWM of the child's own image: getrusage's ru_maxrss would also count the
# audit process it was forked from (Linux keeps it across exec).
CHILD = ("import atexit, os, re, resource, sys\n"
         "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
         "def report():\n"
         "    status = open('/proc/self/status').read()\n"
         "    own = int(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))\n"
         "    peak = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
         "    open(os.environ['AUDIT_RSS_FILE'], 'w').write(str(peak))\n"
         "atexit.register(report)\n"
         "tool = sys.argv.pop(1)\n"
         "sys.argv[0] = tool\n"
         "from {module} import main\n"
         "main()\n")
TOOLS = {"ets": "predictor.cli", "simrun": "simulator.cli"}


def child(argv: list[str]) -> list[str]:
    """The command line running ``argv`` (``ets ...`` or ``simrun ...``) in a measured child."""
    return [sys.executable, "-c", CHILD.format(module=TOOLS[argv[0]]), *argv]


@dataclass
class Case:
    """One hostile input: the command (``{d}``: the case's folder, ``{c}``: the shared fixtures),
    what must happen (``refused`` | ``done`` | ``warned``, or ``failed``: exit 1 with each failed input named
    on a line of its own) and a text the output must hold."""

    finding: int | str  # round 1: 1-9; round 2 (issue 50): "2.<class>"
    name: str
    command: list[str]
    expect: str
    needle: str = ""
    setup: Callable[[Path, Path], object] | None = None
    check: Callable[[Path, Path], str | None] | None = None  # a problem, or None
    output_check: Callable[[str], str | None] | None = None  # a problem with the command's output, or None
    needs_shared: bool = False
    env: dict[str, str] = field(default_factory=dict)
    # The command does real work whatever the input (a cache rebuilt = a cold run): it is also run
    # once without the setup, and may take up to 1.25x that clean run's memory and time.
    costs_a_clean_run: bool = False


class WritesMarker:
    """Unpickling this calls ``open(marker, "w")``: the marker appears if the pickle ran code."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


# -- shared fixtures ------------------------------------------------------------------------------

def common_fixtures(c: Path) -> None:
    """A small emulated dataset, a run folder, the shipped checkpoint's copy, hostile pickles."""
    import torch

    c.mkdir(parents=True, exist_ok=True)
    if not (c / "data").is_dir():
        run_tool(["ets", "collect", "--zoo", "hpo", "--limit", "4", "--max-batch", "4", "--max-size", "64",
                  "--device", "emulated:T4", "--workers", "1", "--out", str(c / "data")], c)
    if not (c / "run").is_dir():
        run_tool(["simrun", "--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:20",
                  "--out", str(c / "run"), "--quiet"], c)
    shutil.copy(REPO / "predictor" / "checkpoints" / "ets-T4.pt", c / "ets-T4.pt")
    marker = str(c / "code-ran")
    torch.save({"format": 1, "method": "ets", "x": WritesMarker(marker)}, c / "raw.pt")
    body = io.BytesIO()
    torch.save({"format": 1, "method": "ets", "x": WritesMarker(marker)}, body)
    payload = body.getvalue()
    torch.save({"envelope": "ets-checkpoint/sha256", "sha256": hashlib.sha256(payload).hexdigest(),
                "payload": torch.frombuffer(bytearray(payload), dtype=torch.uint8)}, c / "sealed.pt")


def run_tool(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run a fixture's command line (``env`` added to this process's), or stop the audit naming it."""
    done = subprocess.run(child(argv), cwd=cwd,
                          capture_output=True, text=True,
                          env={**os.environ, **(env or {}), "AUDIT_RSS_FILE": os.devnull})
    if done.returncode:
        raise click.ClickException(f"fixture {' '.join(argv)} failed: {done.stderr.strip()[-500:]}")


# -- setups and checks ----------------------------------------------------------------------------

def write(name: str, data: bytes | str) -> Callable[[Path, Path], None]:
    def setup(d: Path, _c: Path) -> None:
        (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return setup


def fifo(name: str) -> Callable[[Path, Path], None]:
    return lambda d, _c: os.mkfifo(d / name)


def kept(name: str, content: str = "my notes") -> Callable[[Path, Path], str | None]:
    return lambda d, _c: None if (d / name).read_text() == content else f"{name} was replaced"


def billion_laughs(d: Path, _c: Path) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    (d / "laughs.yaml").write_text("\n".join(lines) + "\nnodes: *a9\n")


def wide_philly(d: Path, _c: Path) -> None:
    header = "jobid,submitted_time,num_gpu,duration," + ",".join(f"c{i}" for i in range(1_000_000))
    (d / "wide.csv").write_text(header + "\n")


def wide_ets_csv(d: Path, _c: Path) -> None:
    folder = d / "wide"
    folder.mkdir()
    shutil.copy(SHARED / "ets_traces" / "op_codes.txt", folder / "op_codes.txt")
    real = (SHARED / "ets_traces" / "T4" / "alexnet.1_7.csv").read_text().splitlines()
    (folder / "alexnet.1_7.csv").write_text(real[0] + "," + ",".join(f"x{i}" for i in range(1_000_000)) + "\n")


def gzip_bomb(d: Path, _c: Path) -> None:
    """~1 MB of gzip that inflates to 1 GiB of JSON, written in pieces (the audit stays small)."""
    spaces = b" " * (1 << 24)
    with gzip.open(d / "bomb.json.gz", "wb", compresslevel=9) as out:
        out.write(b'{"traceEvents": [')
        for _ in range(64):
            out.write(spaces)
        out.write(b"]}")


def deep_json(name: str) -> Callable[[Path, Path], None]:
    return write(name, "[" * 100_000 + "]" * 100_000)


def dataset_variant(change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path, Path], None]:
    """The fixture dataset with its file rewritten by ``change`` (bypassing the checked writer)."""
    def setup(d: Path, c: Path) -> None:
        (d / "data").mkdir()
        for f in (c / "data").glob("*.parquet"):
            change(pd.read_parquet(f)).to_parquet(d / "data" / f.name, index=False)
    return setup


def split_devices(df: pd.DataFrame) -> pd.DataFrame:
    first = df["config_id"].iloc[0]
    rows = df.index[df["config_id"] == first]
    df.loc[rows[len(rows) // 2:], "device"] = "emulated:V100"
    return df


def truncated_jobs(d: Path, c: Path) -> None:
    shutil.copytree(c / "run", d / "run")
    data = (d / "run" / "jobs.parquet").read_bytes()
    (d / "run" / "jobs.parquet").write_bytes(data[:len(data) // 2])


def with_cache(change: Callable[[Path], None]) -> Callable[[Path, Path], None]:
    """A private table cache built by one bound run, then ``change``d (edited, truncated)."""
    def setup(d: Path, _c: Path) -> None:
        run_tool(["simrun", "--policy", "fifo", "--predictor", "truth", "--bind", "--workload", "pai-like:20",
                  "--out", str(d / "first"), "--quiet"], d, env={"ETS_SIM_CACHE": str(d / "cache")})
        tables = sorted((d / "cache" / "tables").glob("truth-*.parquet"))
        if not tables:
            raise click.ClickException(f"fixture: the bound run left no truth table in {d / 'cache'}")
        for table in tables:
            change(table)
    return setup


def times_ten(table: Path) -> None:
    import pyarrow.parquet as pq

    arrow = pq.read_table(table)  # the content changed, its recorded hash kept
    frame = arrow.to_pandas()
    frame["seconds"] *= 10
    import pyarrow as pa

    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(arrow.schema.metadata),
                   table)


def forged(change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    """A cache table edited as a forger would: new content, its content hash recomputed (the
    forger has no cache key, so no valid HMAC)."""
    def edit(table: Path) -> None:
        from predictor.tables import write_table

        write_table(change(pd.read_parquet(table)), table)
    return edit


def truncate(table: Path) -> None:
    data = table.read_bytes()
    table.write_bytes(data[:len(data) // 2])


def dictionary_dataset(d: Path, c: Path) -> None:
    """The fixture dataset grown to 40,000 rows whose config id is one 100 KB string, stored as a
    Parquet dictionary without the Arrow schema: ~1 MB on disk, 4 GB once decoded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (d / "data").mkdir()
    frame = pd.read_parquet(next((c / "data").glob("*.parquet")))
    frame = frame.iloc[[i % len(frame) for i in range(40_000)]].reset_index(drop=True)
    arrow = pa.Table.from_pandas(frame, preserve_index=False)
    one = pa.DictionaryArray.from_arrays(pa.array([0] * len(frame), pa.int32()), pa.array(["x" * 100_000]))
    arrow = arrow.set_column(arrow.schema.get_field_index("config_id"), "config_id", one)
    pq.write_table(arrow, d / "data" / "emulated_T4.parquet", compression="zstd", store_schema=False)


def run_with_jobs(make: Callable[[], object], **options) -> Callable[[Path, Path], None]:
    """The fixture run with its jobs.parquet replaced by ``make()``'s table (a stranger's run folder)."""
    def setup(d: Path, c: Path) -> None:
        import pyarrow.parquet as pq

        shutil.copytree(c / "run", d / "run")
        pq.write_table(make(), d / "run" / "jobs.parquet", compression="zstd", **options)
    return setup


def long_lists():
    """A 300,000,000-value list column: 1.4 KB of run-length encoding, 2.4 GB decoded."""
    import numpy as np
    import pyarrow as pa

    offsets = pa.array(np.arange(0, 300_000_001, 30_000_000, dtype="int32"))
    return pa.table({"job_id": [str(i) for i in range(10)],
                     "x": pa.ListArray.from_arrays(offsets, pa.array(np.zeros(300_000_000, dtype="int8")))})


def many_row_groups():
    import numpy as np
    import pyarrow as pa

    return pa.table({"job_id": [str(i) for i in range(20_000)], "submit": np.zeros(20_000)})


def escaping_philly(d: Path, _c: Path) -> None:
    """A Philly trace whose job id carries a screen clear and a right-to-left override."""
    (d / "esc.csv").write_text("#job id,arrival time (sec),topology,shape,size,duration (sec)\n"
                               "a\x1b[2Jb\u202e,0.0,CLOS,1,1,100.0\n")


def crafted_checkpoint(change: Callable[[dict], None]) -> Callable[[Path, Path], None]:
    """The shipped ETS T4 checkpoint with its body ``change``d and sealed again with a valid
    SHA-256 (what anyone can do: the hash proves integrity, not origin), as {d}/x.pt."""
    def setup(d: Path, c: Path) -> None:
        from predictor import checkpoint_file

        body = checkpoint_file.read(c / "ets-T4.pt")
        change(body)
        (d / "x.pt").write_bytes(checkpoint_file.encode(body))
    return setup


def set_field(*path_value) -> Callable[[dict], None]:
    *path, value = path_value

    def change(body: dict) -> None:
        node = body
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


def nan_weights(body: dict) -> None:
    first = next(iter(body["state_dict"]))
    body["state_dict"][first] = body["state_dict"][first].clone().fill_(float("nan"))


def unsorted_intervals(body: dict) -> None:
    body["intervals"]["log_ratios"] = list(reversed(body["intervals"]["log_ratios"]))


def shared_lists_pickle(d: Path, _c: Path) -> None:
    """A small pickle of shared references (legal for torch's weights-only loader) that expands to
    ~10^9 list items: it reached 3 GB and a MemoryError."""
    import torch

    a = [0] * 1000
    b = [a] * 1000
    torch.save({"format": 1, "method": "ets", "x": [b] * 1000}, d / "shared.pt")


def self_containing_pickle(d: Path, _c: Path) -> None:
    import torch

    loop: list = []
    loop.append(loop)
    torch.save({"format": 1, "method": "ets", "x": loop}, d / "loop.pt")


def zero_time_dataset(d: Path, c: Path) -> None:
    """The fixture dataset with one iteration's times all zero (its MRE is infinite)."""
    (d / "data").mkdir()
    for f in (c / "data").glob("*.parquet"):
        frame = pd.read_parquet(f)
        first = frame["config_id"] == frame["config_id"].iloc[0]
        frame.loc[first, ["duration_us", "gap_us"]] = 0.0
        frame.to_parquet(d / "data" / f.name, index=False)


def strict_json(out: str) -> str | None:
    """A problem unless the output holds one strict JSON object (no NaN or Infinity), from its
    first line that opens one to its last closing brace."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    start = 0 if out.startswith("{") else out.find("\n{") + 1
    try:
        json.loads(out[start:out.rfind("}") + 1], parse_constant=refuse)
    except ValueError as exc:
        return f"not strict JSON ({str(exc)[:80]})"
    return None


def linked_in_run(entry: str) -> Callable[[Path, Path], None]:
    """The fixture run copied to {d}/run with ``entry`` a symbolic link to a victim's folder
    {d}/victim holding its own summary.json and a PNG (a stranger's shared run folder)."""
    def setup(d: Path, c: Path) -> None:
        shutil.copytree(c / "run", d / "run")
        (d / "victim").mkdir()
        (d / "victim" / "summary.json").write_text("my notes")
        (d / "victim" / "jct.png").write_text("my notes")
        (d / "run" / entry).symlink_to(d / "victim")
    return setup


def victim_kept(d: Path, _c: Path) -> str | None:
    changed = [f.name for f in (d / "victim").iterdir() if f.read_text() != "my notes"]
    added = sorted({f.name for f in (d / "victim").iterdir()} - {"summary.json", "jct.png"})
    return f"the victim's {changed + added} written" if changed or added else None


def looping_model_file(d: Path, _c: Path) -> None:
    (d / "loop.py").write_text("while True:\n    pass\n")


def big_cluster(d: Path, _c: Path) -> None:
    """The audit's 2 KB cluster file: a 2,000-character name, count 1,000,000 (2.6 GB of nodes)."""
    (d / "c.yaml").write_text("nodes:\n  - {gpu_type: V100, num_gpus: 1, count: 1000000, name: " + "n" * 2000 + "}\n")


def run_naming_big_cluster(d: Path, c: Path) -> None:
    """The fixture run whose manifest names that cluster file (a stranger's run folder)."""
    big_cluster(d, c)
    shutil.copytree(c / "run", d / "run")
    manifest = json.loads((d / "run" / "manifest.json").read_text())
    manifest["config"]["cluster"] = str(d / "c.yaml")
    (d / "run" / "manifest.json").write_text(json.dumps(manifest))


def far_submit(d: Path, _c: Path) -> None:
    (d / "far.csv").write_text("#job id,arrival time (sec),topology,shape,size,duration (sec)\n"
                               "0,1e300,CLOS,1,1,100.0\n1,1e300,CLOS,1,1,100.0\n")


def kineto_shared_flow_ids(d: Path, _c: Path) -> None:
    """The Kineto fixture with every flow sharing one id: imported, it gave 0 µs of kernel time."""
    doc = json.loads((REPO / "tests" / "fixtures" / "kineto" / "new_schema.json").read_text())
    for event in doc["traceEvents"]:
        if event.get("ph") in ("s", "f"):
            event["id"] = 7
        event.get("args", {}).pop("correlation", None)
    (d / "shared.json").write_text(json.dumps(doc))


def edited_sweep_point(d: Path, _c: Path) -> None:
    """A finished 20-job sweep whose one point file says its mean JCT was 1 s."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run_tool([*SWEEP, "--out", str(d / "s"), "--quiet"], d)
    point = next((d / "s" / "points").glob("*.parquet"))
    arrow = pq.read_table(point)
    arrow = arrow.set_column(arrow.schema.get_field_index("jct_mean"), "jct_mean", pa.array([1.0]))
    pq.write_table(arrow, point)


def point_not_edited(d: Path, _c: Path) -> str | None:
    got = pd.read_parquet(d / "s" / "results.parquet")["jct_mean"].tolist()
    return None if got != [1.0] else "the edited jct_mean 1.0 was trusted"


def long_run(d: Path, _c: Path) -> subprocess.Popen:
    """A real run into {d}/out that lasts minutes (killed after the case)."""
    run = subprocess.Popen(child(["simrun", "--policy", "fifo", "--predictor", "truth", "--workload",
                                  "pai-like:1000000", "--out", str(d / "out"), "--quiet"]),
                           cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "AUDIT_RSS_FILE": os.devnull})
    lock, pid = d / "out" / ".lock", f"{run.pid}\n"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text() == pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # the folder exists before the lock is taken: wait for the PID in it
    return run


def jobs_ran(count: int) -> Callable[[Path, Path], str | None]:
    def check(d: Path, _c: Path) -> str | None:
        got = len(pd.read_parquet(d / "out" / "jobs.parquet"))
        return None if got == count else f"{got:,} jobs ran, expected {count:,}"
    return check


def same_records_as_first(d: Path, _c: Path) -> str | None:
    """The run on the spoilt cache gave the records of the setup's run on the clean one: the
    rebuilt table was used, not the spoilt one."""
    first, again = (pd.read_parquet(d / run / "jobs.parquet") for run in ("first", "out"))
    return None if first.equals(again) else "records differ from the clean run's: the spoilt table was used"


def tardiness(expected: float) -> Callable[[Path, Path], str | None]:
    def check(d: Path, _c: Path) -> str | None:
        got = json.loads((d / "out" / "summary.json").read_text())["tardiness_total"]
        return None if abs(got - expected) < 0.5 else f"tardiness {got:,.0f} s, expected {expected:,.0f}"
    return check


HYDRA_HEAVY = ["simrun", "--policy", "hydra:mode=offline", "--predictor", "truth", "--trace",
               f"hydra:{SHARED / 'hydra_cases' / '30_ddl.csv'}", "--cluster", "hydra-heavy", "--limit", "400",
               "--out", "{d}/out", "--quiet"]
FIFO = ["simrun", "--policy", "fifo", "--predictor", "truth"]
BOUND = [*FIFO, "--bind", "--workload", "pai-like:20", "--out", "{d}/out"]  # a run that needs the table cache
SWEEP = ["simrun", "sweep", "--policies", "fifo", "--predictors", "truth", "--workloads", "pai-like:20"]

CASES: list[Case] = [
    # 1. a checkpoint never runs code
    Case(1, "predict a raw pickle", ["ets", "predict", "--ckpt", "{c}/raw.pt", "{c}/data/emulated_T4.parquet"],
         "refused", "a pickled checkpoint"),
    Case(1, "predict a sealed pickle", ["ets", "predict", "--ckpt", "{c}/sealed.pt", "{c}/data/emulated_T4.parquet"],
         "refused", "ets checkpoint convert --trust"),
    Case(1, "evaluate a sealed pickle", ["ets", "evaluate", "--ckpt", "{c}/sealed.pt", "--data", "{c}/data"],
         "refused", "a pickled checkpoint"),
    Case(1, "calibrate a sealed pickle", ["ets", "calibrate", "--ckpt", "{c}/sealed.pt", "--data", "{c}/data",
                                          "--out", "{d}/c.pt"], "refused", "a pickled checkpoint"),
    Case(1, "finetune a sealed pickle", ["ets", "finetune", "--ckpt", "{c}/sealed.pt", "--data", "{c}/data",
                                         "--out", "{d}/f.pt"], "refused", "a pickled checkpoint"),
    Case(1, "convert --trust a sealed pickle", ["ets", "checkpoint", "convert", "--trust", "{d}/s.pt"], "refused",
         "asks for more than data", setup=lambda d, c: shutil.copy(c / "sealed.pt", d / "s.pt")),
    # 2. sizes bounded before work
    Case(2, "sweep --seeds 100000000", [*SWEEP, "--seeds", "100000000", "--out", "{d}/s"], "refused", "--seeds"),
    Case(2, "workload 10^11 jobs --limit 10", ["simrun", "--policy", "fifo", "--predictor", "truth", "--workload",
                                               "pai-like:100000000000", "--limit", "10", "--out", "{d}/out",
                                               "--quiet"], "done", check=jobs_ran(10)),
    Case(2, "gzip bomb (1 MB -> 1 GB) as a Kineto trace", ["ets", "import", "kineto", "{d}/bomb.json.gz", "--out",
                                                           "{d}/o"], "refused", "inflated past", setup=gzip_bomb),
    Case(2, "/dev/zero as a Kineto trace", ["ets", "import", "kineto", "/dev/zero", "--out", "{d}/o"], "refused",
         "is a device"),
    Case(2, "/dev/zero as a Philly trace", ["simrun", "--policy", "fifo", "--predictor", "truth", "--trace",
                                            "philly:/dev/zero", "--out", "{d}/o"], "refused", "is a device"),
    Case(2, "/dev/zero as a checkpoint", ["ets", "predict", "--ckpt", "/dev/zero", "{c}/data/emulated_T4.parquet"],
         "refused", "is a device"),
    Case(2, "a FIFO as a Kineto trace", ["ets", "import", "kineto", "{d}/p.json", "--out", "{d}/o"], "refused",
         "named pipe", setup=fifo("p.json")),
    Case(2, "a FIFO as a Philly trace", ["simrun", "--policy", "fifo", "--predictor", "truth", "--trace",
                                         "philly:{d}/p.csv", "--out", "{d}/o"], "refused", "named pipe",
         setup=fifo("p.csv")),
    Case(2, "a FIFO as a checkpoint", ["ets", "predict", "--ckpt", "{d}/p.pt", "{c}/data/emulated_T4.parquet"],
         "refused", "named pipe", setup=fifo("p.pt")),
    Case(2, "a FIFO as a cluster file", ["simrun", "--policy", "fifo", "--predictor", "truth", "--cluster",
                                         "{d}/p.yaml", "--out", "{d}/o"], "refused", "named pipe",
         setup=fifo("p.yaml")),
    # 3. an error message is never the attack
    Case(3, "YAML billion laughs as a cluster", ["simrun", "--policy", "fifo", "--predictor", "truth", "--cluster",
                                                 "{d}/laughs.yaml", "--out", "{d}/o"], "refused", "YAML aliases expand",
         setup=billion_laughs),
    Case(3, "10^6-column Philly header", ["simrun", "--policy", "fifo", "--predictor", "truth", "--trace",
                                          "philly:{d}/wide.csv", "--out", "{d}/o"], "refused", "fields in one line",
         setup=wide_philly),
    Case(3, "10^6-column ETS CSV header", ["ets", "import", "ets-csv", "{d}/wide", "--features", "recorded",
                                           "--out", "{d}/o"], "refused", "fields in one line", setup=wide_ets_csv,
         needs_shared=True),
    # 4. nothing overwritten without --overwrite
    Case(4, "train --out an existing text file", ["ets", "train", "--data", "{c}/data", "--out", "{d}/notes.txt"],
         "refused", "already exists", setup=write("notes.txt", "my notes"), check=kept("notes.txt")),
    Case(4, "calibrate --out an existing text file", ["ets", "calibrate", "--ckpt", "{c}/ets-T4.pt", "--data",
                                                      "{c}/data", "--out", "{d}/notes.txt", "--overwrite"],
         "refused", "not a file this command writes", setup=write("notes.txt", "my notes"), check=kept("notes.txt")),
    Case(4, "timeline --out an existing text file", ["simrun", "timeline", "{c}/run", "--out", "{d}/notes.txt"],
         "refused", "already exists", setup=write("notes.txt", "my notes"), check=kept("notes.txt")),
    # 5. no silently wrong result
    Case(5, "evaluate a dataset with every row twice", ["ets", "evaluate", "--ckpt", "{c}/ets-T4.pt", "--data",
                                                        "{d}/data", "--split", "all"], "refused", "duplicate",
         setup=dataset_variant(lambda df: pd.concat([df, df], ignore_index=True))),
    Case(5, "a config split across two devices", ["ets", "dataset", "info", "{d}/data"], "refused", "two devices",
         setup=dataset_variant(split_devices)),
    Case(5, "the cached truth x10", ["simrun", "--policy", "fifo", "--predictor", "truth", "--bind", "--workload",
                                     "pai-like:20", "--out", "{d}/out"], "warned", "does not match its hash: rebuilt",
         setup=with_cache(times_ten), env={"ETS_SIM_CACHE": "{d}/cache"}, costs_a_clean_run=True,
         check=same_records_as_first),
    Case(5, "--load-scale 1e-308", ["simrun", "--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:20",
                                    "--load-scale", "1e-308", "--out", "{d}/o"], "refused", "--load-scale"),
    # 6. ordinary corruption: one line, or a warning and a rebuild
    Case(6, "timeline of a truncated jobs.parquet", ["simrun", "timeline", "{d}/run"], "refused", "jobs.parquet",
         setup=truncated_jobs),
    Case(6, "plot of a truncated jobs.parquet", ["simrun", "plot", "{d}/run"], "refused", "jobs.parquet",
         setup=truncated_jobs),
    Case(6, "a truncated cache table", ["simrun", "--policy", "fifo", "--predictor", "truth", "--bind", "--workload",
                                        "pai-like:20", "--out", "{d}/out"], "warned", "rebuilt",
         setup=with_cache(truncate), env={"ETS_SIM_CACHE": "{d}/cache"}, costs_a_clean_run=True),
    Case(6, "duration_us stored as strings", ["ets", "dataset", "info", "{d}/data"], "refused", "duration_us",
         setup=dataset_variant(lambda df: df.assign(duration_us=df["duration_us"].astype(str)))),
    Case(6, "a 100,000-deep Kineto JSON", ["ets", "import", "kineto", "{d}/deep.json", "--out", "{d}/o"], "refused",
         "levels deep", setup=deep_json("deep.json")),
    Case(6, "a 100,000-deep Philly JSON", ["simrun", "--policy", "fifo", "--predictor", "truth", "--trace",
                                           "philly-json:{d}/deep.json", "--out", "{d}/o"], "refused", "levels deep",
         setup=deep_json("deep.json")),
    Case(6, "a 100,000-deep cluster JSON", ["simrun", "--policy", "fifo", "--predictor", "truth", "--cluster",
                                            "{d}/deep.json", "--out", "{d}/o"], "refused", "levels deep",
         setup=deep_json("deep.json")),
    Case(6, "sweep --ray foo", [*SWEEP, "--ray", "foo", "--out", "{d}/s"], "refused", "--ray"),
    # 7. limits kept
    Case(7, "train --minutes 0", ["ets", "train", "--data", "{c}/data", "--out", "{d}/m.pt", "--minutes", "0"],
         "refused", "--minutes"),
    Case(7, "train --minutes -1", ["ets", "train", "--data", "{c}/data", "--out", "{d}/m.pt", "--minutes", "-1"],
         "refused", "--minutes"),
    Case(7, "finetune --minutes 0.05, 200 epochs", ["ets", "finetune", "--ckpt", "{c}/ets-T4.pt", "--data", "{c}/data",
                                                    "--out", "{d}/f.pt", "--tune", "all", "--epochs", "200",
                                                    "--minutes", "0.05"], "done", "fine-tuned"),
    # 8. the same result on any machine (the test suite checks it under a slowed clock)
    Case(8, "Hydra offline, heavy 400, defaults", HYDRA_HEAVY, "done", check=tardiness(4150), needs_shared=True),
    # -- round 2 (issue 50) --
    # 1. no write outside the target
    Case("2.1", "--compare-truth --overwrite, truth/ linked to a victim",
         ["simrun", "--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:20", "--compare-truth",
          "--out", "{d}/run", "--overwrite"], "refused", "is a symbolic link", setup=linked_in_run("truth"),
         check=victim_kept),
    Case("2.1", "plot --overwrite, plots/ linked to a victim", ["simrun", "plot", "{d}/run", "--overwrite"], "refused",
         "is a symbolic link", setup=linked_in_run("plots"), check=victim_kept),
    # 3. a checkpoint's config is checked before it is used
    Case("2.3", "a sealed checkpoint asking for hidden=40,000", ["ets", "predict", "--ckpt", "{d}/x.pt", "resnet18",
                                                                  "--batch", "2", "--size", "32"], "refused",
         "over the limit", setup=crafted_checkpoint(set_field("config", "hidden", 40_000))),
    Case("2.3", "a sealed checkpoint with NaN weights", ["ets", "predict", "--ckpt", "{d}/x.pt", "resnet18", "--batch",
                                                          "2", "--size", "32"], "refused", "non-finite",
         setup=crafted_checkpoint(nan_weights)),
    Case("2.3", "a sealed checkpoint with int8 weights", ["ets", "checkpoint", "info", "{d}/x.pt"], "refused",
         "floating-point", setup=crafted_checkpoint(lambda b: b["state_dict"].update(
             {k: v.to(__import__("torch").int8) for k, v in b["state_dict"].items()}))),
    Case("2.3", "a sealed checkpoint with a negative scale", ["ets", "predict", "--ckpt", "{d}/x.pt", "resnet18",
                                                               "--batch", "2", "--size", "32"], "refused", "scale",
         setup=crafted_checkpoint(set_field("scale", [-1.0, 1.0]))),
    Case("2.3", "a sealed checkpoint with unsorted intervals", ["ets", "predict", "--ckpt", "{d}/x.pt", "resnet18",
                                                                 "--batch", "2", "--size", "32"], "refused",
         "ascending", setup=crafted_checkpoint(unsorted_intervals)),
    Case("2.3", "checkpoint info with split of the wrong type", ["ets", "checkpoint", "info", "{d}/x.pt"], "refused",
         "field 'split'", setup=crafted_checkpoint(set_field("split", [1]))),
    # 4. converting a pickle is bounded before expansion
    Case("2.4", "convert --trust a pickle of shared lists", ["ets", "checkpoint", "convert", "--trust",
                                                             "{d}/shared.pt", "--out", "{d}/o.pt"], "refused",
         "expands past", setup=shared_lists_pickle),
    Case("2.4", "convert --trust a self-containing list", ["ets", "checkpoint", "convert", "--trust", "{d}/loop.pt",
                                                           "--out", "{d}/o.pt"], "refused", "contains itself",
         setup=self_containing_pickle),
    # 6. model construction is bounded; 10. JSON is strict
    Case("2.6", "train --layers 100000", ["ets", "train", "--data", "{c}/data", "--out", "{d}/m.pt", "--layers",
                                          "100000", "--minutes", "0.05"], "refused", "layers"),
    Case("2.10", "evaluate --json with zero-time rows", ["ets", "evaluate", "--ckpt", "{c}/ets-T4.pt", "--data",
                                                         "{d}/data", "--split", "all", "--json"], "done",
         setup=zero_time_dataset, output_check=strict_json),
    # 2. a cache table cannot be forged
    Case("2.2", "the cached truth x10, its hash recomputed", ["simrun", "--policy", "fifo", "--predictor", "truth",
                                                            "--bind", "--workload", "pai-like:20", "--out", "{d}/out"],
         "warned", "HMAC", setup=with_cache(forged(lambda t: t.assign(seconds=t["seconds"] * 10))),
         env={"ETS_SIM_CACHE": "{d}/cache"}, costs_a_clean_run=True, check=same_records_as_first),
    Case("2.2", "the cached truth permuted, its hash recomputed", ["simrun", "--policy", "fifo", "--predictor", "truth",
                                                                 "--bind", "--workload", "pai-like:20", "--out",
                                                                 "{d}/out"],
         "warned", "HMAC", setup=with_cache(forged(lambda t: t.assign(seconds=t["seconds"].to_numpy()[::-1]))),
         env={"ETS_SIM_CACHE": "{d}/cache"}, costs_a_clean_run=True, check=same_records_as_first),
    # 5. Parquet decoded size bounded before decoding
    Case("2.5", "a dataset of one 100 KB string x 40,000 (dictionary)", ["ets", "dataset", "info", "{d}/data"],
         "refused", "decodes to", setup=dictionary_dataset),
    Case("2.5", "timeline of a jobs.parquet of 300M-value lists", ["simrun", "timeline", "{d}/run"], "refused",
         "decodes to", setup=run_with_jobs(long_lists)),
    Case("2.5", "plot of a jobs.parquet of 20,000 row groups", ["simrun", "plot", "{d}/run"], "refused",
         "row groups", setup=run_with_jobs(many_row_groups, row_group_size=1)),
    # 6. every loop ends
    Case("2.6", "gavel lease=1e-12", ["simrun", "--policy", "gavel:lease=1e-12", "--predictor", "truth", "--workload",
                                      "pai-like:20", "--out", "{d}/o"], "refused", "lease"),
    Case("2.6", "srtf restart=1e17", ["simrun", "--policy", "srtf:lease=1,restart=1e17", "--predictor", "truth",
                                      "--workload", "pai-like:20", "--out", "{d}/o"], "refused", "restart"),
    Case("2.6", "srtf storage_gbps=1e-300", ["simrun", "--policy", "srtf:storage_gbps=1e-300", "--predictor", "truth",
                                             "--workload", "pai-like:20", "--out", "{d}/o"], "refused",
         "storage_gbps"),
    Case("2.6", "a model file that loops at import", ["ets", "devices", "time", "--model-file", "{d}/loop.py",
                                                      "--device", "emulated:T4"], "failed", "did not finish within 5 s",
         setup=looping_model_file, env={"ETS_SIM_MAX_MODEL_SECONDS": "5"}),
    # 7. sizes bounded
    Case("2.7", "a 2 KB cluster file of 10^6 long-named nodes", ["simrun", "--policy", "fifo", "--predictor", "truth",
                                                                 "--cluster", "{d}/c.yaml", "--out", "{d}/o"],
         "refused", "count", setup=big_cluster),
    Case("2.7", "timeline of a run whose manifest names that cluster", ["simrun", "timeline", "{d}/run", "--out",
                                                                        "{d}/t.json"], "warned", "one process per GPU",
         setup=run_naming_big_cluster),
    Case("2.7", "sweep --workers 12", [*SWEEP, "--workers", "12", "--out", "{d}/s", "--quiet"], "warned",
         "--workers 12"),
    # 8. no raw control character reaches the terminal
    Case("2.8", "a Philly trace with ESC and U+202E in a job id", [*FIFO, "--trace", "philly:{d}/esc.csv", "--out",
                                                                     "{d}/o"],
         "refused", "field 'job_id'", setup=escaping_philly),
    # 10. no silently wrong number
    Case("2.10", "two jobs submitted at 1e300", ["simrun", "--policy", "fifo", "--predictor", "truth", "--trace",
                                                 "philly:{d}/far.csv", "--out", "{d}/o"], "refused", "submit_s",
         setup=far_submit),
    Case("2.10", "Kineto flows sharing one id", ["ets", "import", "kineto", "{d}/shared.json", "--out", "{d}/o"],
         "refused", "is shared by the runtime calls", setup=kineto_shared_flow_ids),
    Case("2.10", "a sweep point edited, then resumed", [*SWEEP, "--out", "{d}/s", "--quiet"], "warned",
         "do not match their run folder", setup=edited_sweep_point, check=point_not_edited),
    # 11. an unusable cache fails before the work
    Case("2.11", "ETS_SIM_CACHE is a file", BOUND, "refused", "ETS_SIM_CACHE",
         setup=write("cache", "a file"), env={"ETS_SIM_CACHE": "{d}/cache"}),
    Case("2.11", "ETS_SIM_CACHE is empty", BOUND, "refused", "ETS_SIM_CACHE is set but empty",
         env={"ETS_SIM_CACHE": ""}),
    # 9. one run per output folder
    Case(9, "a second run into a folder in use", ["simrun", "--policy", "fifo", "--predictor", "truth", "--workload",
                                                  "pai-like:20", "--out", "{d}/out", "--overwrite"], "refused",
         "is in use by another run (PID", setup=long_run),
    Case(9, "a second sweep into a folder in use", [*SWEEP, "--out", "{d}/out"], "refused",
         "is in use by another run (PID", setup=long_run),
]


# -- running --------------------------------------------------------------------------------------

def run_child(case: Case, d: Path, c: Path, setup: bool = True) -> tuple[int | None, str, float, float]:
    """Run the case's command in a fresh folder ``d``: (exit code or None if timed out, output,
    peak RSS in MB, seconds). ``setup``: prepare the hostile input first (else a clean run)."""
    def fill(text: str) -> str:
        return text.replace("{d}", str(d)).replace("{c}", str(c))

    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    background = case.setup(d, c) if case.setup and setup else None
    argv = [fill(a) for a in case.command]
    rss_file = d / ".rss"
    env = {**os.environ, **{k: fill(v) for k, v in case.env.items()}, "AUDIT_RSS_FILE": str(rss_file)}
    started = time.perf_counter()
    try:
        done = subprocess.run(child(argv), cwd=d, env=env,
                              capture_output=True, text=True, timeout=120)
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out = None, str(exc.stdout or "") + str(exc.stderr or "")
    finally:
        if isinstance(background, subprocess.Popen):
            background.send_signal(signal.SIGKILL)
            background.wait()
    seconds = time.perf_counter() - started
    rss = int(rss_file.read_text()) / 1024 if rss_file.exists() else float("nan")
    return code, out, rss, seconds


def run_case(case: Case, d: Path, c: Path) -> dict:
    """The case's outcome: status, exit code, RSS (MB), seconds, its error line, problems."""
    marker = c / "code-ran"
    marker.unlink(missing_ok=True)
    code, out, rss, seconds = run_child(case, d, c)
    max_rss, max_seconds, clean = MAX_RSS_MB, MAX_SECONDS, ""
    if case.costs_a_clean_run:
        _, _, clean_rss, clean_s = run_child(case, d.with_name(d.name + "-clean"), c, setup=False)
        max_rss, max_seconds = max(max_rss, 1.25 * clean_rss), max(max_seconds, 1.25 * clean_s)
        clean = f"clean run {clean_rss:,.0f} MB, {clean_s:.1f} s"
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    problems = []
    if code is None:
        problems.append("timed out (120 s)")
    elif case.expect == "refused" and (code not in (1, 2) or len(errors) != 1):
        problems.append(f"exit {code} with {len(errors)} error line(s), expected one refusal")
    elif case.expect == "failed" and code != 1:  # a run of several inputs: each failed one named on its own line
        problems.append(f"exit {code}, expected 1")
    elif case.expect in ("done", "warned") and code != 0:
        problems.append(f"exit {code}: {(errors or out.strip().splitlines() or [''])[-1][:200]}")
    if "Traceback" in out:
        problems.append("traceback")
    if case.needle and case.needle not in (errors[0] if case.expect == "refused" and errors else out):
        problems.append(f"output lacks {case.needle!r}")
    raw = sorted({f"{ord(ch):#04x}" for ch in out if RAW_CONTROL.match(ch)})
    if raw:
        problems.append(f"raw control character(s) {', '.join(raw)} in the output")
    if any(len(line) > MAX_LINE for line in out.splitlines()):
        problems.append(f"a line of {max(len(line) for line in out.splitlines()):,} characters")
    if marker.exists():
        problems.append("THE FILE RAN CODE")
    if not rss <= max_rss:
        problems.append(f"peak RSS {rss:,.0f} MB")
    if seconds > max_seconds:
        problems.append(f"{seconds:.0f} s")
    if case.output_check and code == 0:
        problem = case.output_check(out)
        if problem:
            problems.append(problem)
    if case.check and (code == 0 or case.expect == "refused"):
        problem = case.check(d, c)
        if problem:
            problems.append(problem)
    return {"finding": case.finding, "case": case.name, "expect": case.expect, "exit": code,
            "rss_mb": round(rss), "seconds": round(seconds, 1), "ok": not problems,
            "problems": "; ".join(problems), "message": (errors or warnings or [""])[0][:300], "clean_run": clean}


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/audit"),
              show_default=True, help="Where results.csv, report.md and the cases' folders go.")
@click.option("--only", help="Run only the cases whose name holds this text.")
def main(out: Path, only: str | None) -> None:
    """Run every hostile case; print and write the table; exit 1 if any case failed."""
    from tqdm import tqdm

    out = out.resolve()
    cases = [k for k in CASES if not only or only in k.name]
    skipped = [k.name for k in cases if k.needs_shared and not SHARED.is_dir()]
    cases = [k for k in cases if k.name not in skipped]
    common = out / "common"
    click.echo("building the shared fixtures (a small emulated dataset, a run, hostile pickles) ...", err=True)
    common_fixtures(common)
    rows = []
    for i, case in enumerate(tqdm(cases, desc="hostile cases", unit="case", file=sys.stderr)):
        rows.append(run_case(case, out / "cases" / f"{i:02d}", common))
        pd.DataFrame(rows).to_csv(out / "results.csv", index=False)  # incrementally
    table = pd.DataFrame(rows)
    lines = ["| # | finding | case | expected | exit | peak RSS MB | s | ok | message or problem |",
             "|---:|---:|---|---|---:|---:|---:|---|---|"]
    for i, r in table.iterrows():
        text = "; ".join(t for t in (r["clean_run"], r["problems"] or r["message"]) if t).replace("|", "\\|")
        lines.append(f"| {i} | {r['finding']} | {r['case']} | {r['expect']} | {r['exit']} | {r['rss_mb']:,} | "
                     f"{r['seconds']} | {'yes' if r['ok'] else '**no**'} | {text[:200]} |")
    summary = (f"{int(table['ok'].sum())} of {len(table)} cases pass; peak RSS max {table['rss_mb'].max():,} MB, "
               f"longest {table['seconds'].max():.1f} s" + (f"; skipped (no {SHARED}): {', '.join(skipped)}"
                                                            if skipped else ""))
    report = "\n".join(lines) + "\n\n" + summary + "\n"
    (out / "report.md").write_text(report)
    click.echo(report)
    if not table["ok"].all():
        raise SystemExit(1)


if __name__ == "__main__":
    main()
