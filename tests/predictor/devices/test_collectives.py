"""The all-reduce model (predictor/emulator/devices/collectives.py): the ring formula by hand, placements,
the fit recovering known parameters, `ets devices comm` and its refusals, and the out-of-sample
error on the real collectives of ../shared."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.cli import main as ets
from predictor.common import gpus
from predictor.common.inputs import InputError
from predictor.emulator.devices import collective_fit
from predictor.emulator.devices.collectives import (
    CollectiveError,
    CommParams,
    Link,
    Network,
    Placement,
    Protocol,
    allreduce,
    load_params,
    params_from_json,
    ring_seconds,
)
from tests.cli_checks import one_line_error


def toy_params(ll: Protocol | None = None) -> CommParams:
    simple = Protocol(10e-6, 1.0)
    links = {"nvlink": Link(2e-6, 0.5), "pcie": Link(3e-6, 0.8), "pcie_host": Link(4e-6, 0.4)}
    return CommParams({"ll": ll or simple, "simple": simple}, links, Network(20e-6, 5e9, 2), {})


def toy_gpu(topology: str = "all", nvlink_gbs: float = 100.0) -> gpus.GpuEntry:
    link = gpus.Interconnect(4, 16, nvlink_gbs if topology != "none" else 0.0, topology, True, "test")
    return dataclasses.replace(gpus.entry("A100-SXM4"), interconnect=link)


def test_the_ring_formula_by_hand():
    # N = 4 on one NVLink board, 100 MB, α = 2 µs per step, B = 0.5 × 100 GB/s, 10 µs per call:
    # 10 µs + 2 µs × 2(4 − 1) + 2(4 − 1)/4 × 1e8 B / 50e9 B/s = 10 µs + 12 µs + 3 ms.
    result = allreduce(1e8, Placement(4, 4), toy_gpu(), toy_params())
    assert result["seconds"] == pytest.approx(10e-6 + 12e-6 + 3e-3, rel=1e-12)
    assert (result["link"], result["nodes"], result["label"]) == ("nvlink", 1, "spec-derived")
    # Two nodes of 2: the network (20 µs a step; 5 GB/s a stream, 2 streams) is the slowest link.
    spread = allreduce(1e8, Placement(4, 2), toy_gpu(), toy_params())
    assert spread["seconds"] == pytest.approx(10e-6 + 20e-6 * 6 + 1.5 * 1e8 / 10e9, rel=1e-12)
    assert spread["link"] == "network" and spread["nodes"] == 2


def test_the_faster_protocol_is_taken():
    ll = Protocol(1e-6, 0.5)  # cheaper per call, half the bandwidth
    small, large = (float(ring_seconds(b, 2, 2, "nvlink", 100e9, 0, toy_params(ll))) for b in (1e3, 1e9))
    assert small == pytest.approx(1e-6 + 2e-6 * 2 + 1e3 / 25e9)
    assert large == pytest.approx(10e-6 + 2e-6 * 2 + 1e9 / 50e9)


def test_one_gpu_costs_nothing_and_a_bridged_pair_ends_at_two():
    assert allreduce(1e9, Placement(1, 1), toy_gpu(), toy_params())["seconds"] == 0.0
    assert float(ring_seconds(1e9, 1, 1, "", 0.0, 0, toy_params())) == 0.0
    pair, four = (allreduce(1e8, Placement(n, n), toy_gpu("pairs"), toy_params()) for n in (2, 4))
    assert pair["link"] == "nvlink" and four["link"] == "pcie"  # a third GPU is over PCIe (Gen4 x16)
    assert four["seconds"] == pytest.approx(10e-6 + 3e-6 * 6 + 1.5 * 1e8 / (0.8 * 16 * 16 * 128 / 130 / 8 * 1e9))


def test_spreading_over_nodes_is_slower_with_the_shipped_fit():
    a100 = gpus.entry("A100-SXM4")
    packed = allreduce(100e6, Placement(8, 8), a100)
    spread = allreduce(100e6, Placement(8, 4), a100)
    assert spread["seconds"] > 2 * packed["seconds"] and spread["link"] == "network"
    t4 = gpus.entry("T4")
    assert allreduce(100e6, Placement(1, 1), t4)["seconds"] == allreduce(100e6, Placement(1, 1), a100)["seconds"] == 0


@pytest.mark.parametrize("gpus_, per_node", [(0, 1), (4, 3), (4, 8), (True, 1)])
def test_a_bad_placement_names_the_value(gpus_, per_node):
    with pytest.raises(CollectiveError, match=str(per_node if gpus_ not in (0, True) else gpus_)):
        Placement(gpus_, per_node)


def _synthetic_rows(params: CommParams) -> pd.DataFrame:
    sizes = np.geomspace(2e3, 5e8, 40)
    frames = []
    for n, k, intra, bps in [(2, 2, "nvlink", 300e9), (4, 4, "nvlink", 300e9), (8, 8, "nvlink", 300e9),
                             (2, 2, "pcie", 15.75e9), (8, 8, "pcie", 15.75e9), (2, 2, "pcie_host", 15.75e9),
                             (8, 8, "pcie_host", 15.75e9), (2, 1, "", 0.0), (8, 4, "nvlink", 300e9),
                             (16, 8, "nvlink", 300e9)]:
        frames.append(pd.DataFrame({"setup": "synthetic", "gpus": n, "per_node": k, "nbytes": sizes,
                                    "intra": intra, "intra_bps": bps, "streams": 0}))
    rows = pd.concat(frames, ignore_index=True)
    rows["seconds"] = collective_fit.predict(rows, params)
    return rows


def test_the_fit_recovers_known_parameters():
    truth = CommParams({"ll": Protocol(30e-6, 0.7), "simple": Protocol(120e-6, 1.0)},
                       {"nvlink": Link(0.5e-6, 0.7), "pcie": Link(2e-6, 0.7), "pcie_host": Link(3e-6, 0.38)},
                       Network(9e-6, 4.8e9, 3), {})
    fitted = collective_fit.fit(_synthetic_rows(truth))
    assert fitted.network.streams == 3
    assert fitted.network.stream_bps == pytest.approx(4.8e9, rel=1e-3)
    assert fitted.network.alpha_s == pytest.approx(9e-6, rel=1e-2)
    for name in ("ll", "simple"):
        assert fitted.protocols[name].call_s == pytest.approx(truth.protocols[name].call_s, rel=1e-2)
    assert fitted.protocols["ll"].share == pytest.approx(0.7, rel=1e-3)
    for name, link in truth.links.items():
        assert fitted.links[name].efficiency == pytest.approx(link.efficiency, rel=1e-3)
        assert fitted.links[name].alpha_s == pytest.approx(link.alpha_s, rel=5e-2)
    assert fitted.provenance["rms_log_error"] < 1e-3


def test_the_shipped_parameters_load_and_a_broken_file_is_one_line(tmp_path):
    shipped = load_params()
    assert shipped.provenance["label"] == "spec-derived" and "Vidur" in shipped.provenance["fitted_on"]
    assert 0 < shipped.links["nvlink"].efficiency <= 1 and shipped.network.streams >= 1
    body = shipped.to_json()
    body["links"]["pcie"]["efficiency"] = -1
    with pytest.raises(CollectiveError, match="positive finite"):
        params_from_json(body)
    (tmp_path / "p.json").write_text("[1]")
    with pytest.raises(CollectiveError, match="p.json: not a JSON object"):
        load_params(tmp_path / "p.json")
    with pytest.raises(CollectiveError, match="nowhere.json: no such collective parameter file"):
        load_params(tmp_path / "nowhere.json")


def test_the_catalogue_says_each_fitted_gpus_links():
    for name, (topology, nvlink) in {"A100-SXM4": ("all", 300), "A100-SXM4-80GB": ("all", 300),
                                     "A100": ("pairs", 300), "A100-80GB": ("pairs", 300), "A40": ("pairs", 56.25),
                                     "V100-SXM2": ("all", 150), "V100": ("none", 0), "P100": ("none", 0),
                                     "T4": ("none", 0), "GTX1080Ti": ("none", 0), "M40": ("none", 0)}.items():
        link = gpus.entry(name).interconnect
        assert (link.nvlink_topology, link.nvlink_gbs) == (topology, nvlink), name
        assert link.source
    assert gpus.entry("A100").interconnect.pcie_gbs == pytest.approx(31.5, rel=1e-3)
    assert gpus.entry("T4").interconnect.pcie_gbs == pytest.approx(15.75, rel=1e-3)


@pytest.mark.parametrize("table, message", [
    ('pcie_generation = 7\npcie_lanes = 16\nnvlink_gbs = 0.0\nnvlink_topology = "none"\nsource = "x"',
     r"\[interconnect\]: field 'pcie_generation' must be one of"),
    ('pcie_generation = 4\npcie_lanes = 16\nnvlink_gbs = 50.0\nnvlink_topology = "none"\nsource = "x"',
     r"'none' exactly when nvlink_gbs is 0"),
    ('pcie_generation = 4\npcie_lanes = 16\nnvlink_gbs = -1.0\nnvlink_topology = "pairs"\nsource = "x"',
     r"field 'nvlink_gbs' must be a non-negative"),
    ('pcie_generation = 4\nnvlink_gbs = 0.0\nnvlink_topology = "none"\nsource = "x"', r"must hold"),
])
def test_a_broken_interconnect_is_refused_naming_file_and_field(tmp_path, monkeypatch, table, message):
    import shutil

    folder = tmp_path / "catalogue"
    shutil.copytree(gpus.CATALOG_DIR, folder)
    text = (folder / "T4.toml").read_text().split("\n[interconnect]")[0]
    (folder / "T4.toml").write_text(text + "\n[interconnect]\n" + table + "\n")
    monkeypatch.setenv(gpus.CATALOG_ENV, str(folder))
    with pytest.raises(InputError, match="T4.toml.*" + message):
        gpus.catalog()


def test_devices_comm_prints_one_allreduce():
    result = CliRunner().invoke(ets, ["devices", "comm", "--bytes", "100MB", "--gpus", "16", "--per-node", "8",
                                      "--device", "emulated:A100-SXM4", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert {"ms", "gpus", "nodes", "link", "label"} <= set(out)
    assert (out["gpus"], out["nodes"], out["link"], out["label"]) == (16, 2, "network", "spec-derived")
    packed = json.loads(CliRunner().invoke(ets, ["devices", "comm", "--bytes", "1e8", "--gpus", "8", "--device",
                                                 "emulated:A100-SXM4", "--json"]).output)
    assert packed["nodes"] == 1 and packed["link"] == "nvlink" and packed["ms"] < out["ms"]
    text = CliRunner().invoke(ets, ["devices", "comm", "--bytes", "25MiB", "--gpus", "4", "--device", "emulated:A100"])
    assert text.exit_code == 0 and "bottleneck pcie" in text.output and "spec-derived" in text.output


@pytest.mark.parametrize("args, needle", [
    (["--bytes", "1e8", "--gpus", "0"], "--gpus: 0"),
    (["--bytes", "1e8", "--gpus", "4", "--per-node", "3"], "--per-node: 3"),
    (["--bytes", "1e8", "--gpus", "4", "--per-node", "8"], "--per-node: 8"),
    (["--bytes", "-5", "--gpus", "4"], "--bytes: '-5'"),
    (["--bytes", "abc", "--gpus", "4"], "--bytes: 'abc'"),
    (["--bytes", "1e8", "--gpus", "12"], "--gpus: 12"),
    (["--bytes", "1e8", "--gpus", "2", "--device", "emulated:X9"], "'emulated:X9'"),
    (["--bytes", "1e8", "--gpus", "2", "--device", "emulated:B200"], "B200 has no [interconnect]"),
])
def test_devices_comm_refuses_bad_input_in_one_line(args, needle):
    if "--device" not in args:
        args = [*args, "--device", "emulated:T4"]
    one_line_error(CliRunner().invoke(ets, ["devices", "comm", *args]), needle)


def test_out_of_sample_on_a100_pairwise_nvlink(shared_dir):
    """Fitted on Vidur's DGX A100 and DeepBench, Vidur's pairwise-NVLink A100s (never seen) are
    priced within 15 % (median, messages ≥ 1 MB) — per placement too."""
    from experiments.validate_collectives import held_out_split
    from predictor.emulator.devices import collective_data

    calibration = shared_dir / "calibration"
    if not (calibration / collective_data.VIDUR_DIR / "a100_pairwise_nvlink").is_dir():
        pytest.skip(f"{calibration}: no Vidur network profiles")
    rows = collective_data.load_all(calibration)
    fit_rows, held = held_out_split(rows)
    assert set(held["setup"]) == {"Vidur A100 pairwise NVLink"} and not fit_rows["setup"].isin(held["setup"]).any()
    scored = collective_fit.errors(held, collective_fit.fit(fit_rows))
    large = scored[scored["nbytes"] >= 1e6]
    assert large["abs_error"].median() <= 0.15
    for _, g in large.groupby("gpus"):
        assert g["abs_error"].median() <= 0.15


def test_the_units_of_the_shared_files(shared_dir):
    """Vidur's size is bytes (the largest, 2 × 4096 × 8192, is twice the profiler's default
    element count); DeepBench's GB/s column is N × 4 bytes × floats / time."""
    calibration = shared_dir / "calibration"
    vidur = calibration / "vidur" / "network" / "a100_dgx" / "all_reduce.csv"
    deepbench = calibration / "deepbench" / "deepbench_allreduce.csv"
    if not (vidur.is_file() and deepbench.is_file()):
        pytest.skip(f"{calibration}: no Vidur or DeepBench all-reduce file")
    assert pd.read_csv(vidur)["size"].max() == 2 * 4096 * 8192
    d = pd.read_csv(deepbench).dropna(subset=["Mean All Reduce Time (msec)", "# chips / accelerator cards"])
    rate = (d["# chips / accelerator cards"] * d["Size # floats"] * 4 / d["Mean All Reduce Time (msec)"] / 1e6)
    assert np.allclose(rate, d["Gigabytes/sec"], rtol=1e-6)
