"""Which timm and transformers architectures the zoo can train, at which sizes, and at what cost.

Why: the zoo's timm and Hugging Face families (``predictor/emulator/zoo/timm_models.py``,
``hf_models.py``) must each build with random weights, run a training step on the meta device
(the op sequence the emulated GPUs time) and on the CPU (the real benchmark), and be cheap
enough for one core. This probe tries every candidate and writes what it found to
``predictor/emulator/zoo/probed/{timm,hf}.json``, which the zoo reads: the models kept per family, the
image sizes each built at, the milliseconds of one CPU training step (what the CPU benchmark's
cost cap reads), and every architecture left out with its error.

    python -m experiments.zoo_probe [--library timm|hf|both] [--out predictor/emulator/zoo/probed]

timm candidates: per module, the two smallest models (by parameters, on the meta device) under
40 M parameters, at image sizes 64-224 with ``img_size`` where the model takes it; modules that
re-implement a zoo family under another name are skipped (``timm_models.SKIPPED``). transformers
candidates: ``hf_models.TASKS_OF``, preset L2-H128 at batch 2 (and the real size on the meta
device). One process, one intra-op thread; about half an hour per library on our machine.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import click
import torch
from tqdm import tqdm

OUT = Path(__file__).resolve().parents[1] / "predictor" / "emulator" / "zoo" / "probed"
PARAMETER_CAP = 40e6
TIMM_SIZES = (64, 96, 128, 160, 224)
# models of one architecture that differ only in their default image size (the zoo passes img_size)
TIMM_SAME_AS = {"cait_xxs24_384", "eva02_tiny_patch14_336", "xcit_nano_12_p8_384", "volo_d1_384",
                "vit_tiny_r_s16_p8_384", "swinv2_cr_tiny_384"}
CPU_MS_CAP = 1000.0  # a model slower than this at batch 2 and its smallest size is too slow for a CPU


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _step_ms(loss) -> float:
    """Milliseconds of the second of two training steps: ``loss()`` forward, then backward."""
    ms = 0.0
    for _ in range(2):
        start = time.perf_counter()
        loss().backward()
        ms = (time.perf_counter() - start) * 1000
    return round(ms, 1)


def probe_timm() -> dict:
    import timm

    from predictor.emulator.zoo import timm_models

    found: dict = {"timm": timm.__version__, "models": {}, "excluded": {}}
    modules = [m for m in sorted(timm.list_modules()) if m not in timm_models.SKIPPED]
    for module in tqdm(modules, desc="timm modules", unit="module"):
        sized = []
        for name in timm.list_models(module=module):
            if name.startswith("test_") or name in TIMM_SAME_AS:
                continue
            try:
                with torch.device("meta"):
                    sized.append((sum(p.numel() for p in timm.create_model(name).parameters()), name))
            except Exception:  # a model that cannot build is not a candidate
                continue
        picks = [n for p, n in sorted(sized) if p < PARAMETER_CAP][:2]
        if not picks:
            found["excluded"][module] = ("no model under 40 M parameters" if sized else "no model builds")
            continue
        for name in picks:
            sizes, takes, error = [], [], ""
            for size in TIMM_SIZES:
                for kwargs in ({"img_size": size}, {}):
                    try:
                        with torch.device("meta"):
                            model = timm.create_model(name, num_classes=10, **kwargs).train()
                        model(torch.empty(2, 3, size, size, device="meta")).sum().backward()
                        sizes.append(size)
                        takes.append(bool(kwargs))
                        break
                    except Exception as exc:
                        error = _error(exc)
            if not sizes:
                found["excluded"][f"{module}/{name}"] = f"fails on the meta device: {error}"
                continue
            kwargs = {"img_size": sizes[0]} if all(takes) else {}
            try:
                model = timm.create_model(name, num_classes=10, **kwargs).train()
                image = torch.randn(2, 3, sizes[0], sizes[0])
                ms = _step_ms(lambda model=model, image=image: model(image).sum())
            except Exception as exc:
                found["excluded"][f"{module}/{name}"] = f"fails on the CPU: {_error(exc)}"
                continue
            if ms > CPU_MS_CAP:
                found["excluded"][f"{module}/{name}"] = f"{ms:.0f} ms per step at batch 2, smallest size: too slow"
                continue
            found["models"][name] = {"family": module, "sizes": sizes, "takes_img_size": all(takes), "cpu_ms": ms}
    return found


def probe_hf() -> dict:
    import transformers

    from predictor.emulator.capture.opseq import capture
    from predictor.emulator.zoo import hf_models
    from predictor.emulator.zoo.registry import build

    found: dict = {"transformers": transformers.__version__, "models": {}, "excluded": {}}
    hf_models.EXCLUDED.clear()  # every candidate is tried again
    for model_type, task in tqdm(list(hf_models.TASKS_OF.items()), desc="transformers", unit="architecture"):
        seq = {"speech-seq2seq": 200, "ctc": 8000}.get(task, 64)
        try:
            config = hf_models.config_for(model_type, batch=2, seq=seq, preset="L2-H128")
            capture(config, "meta")
            workload = build(config, "cpu")
            x, y = workload.inputs(torch.device("cpu"))
            ms = _step_ms(lambda w=workload, x=x, y=y: w.loss(w.model(*x), y))
            capture(hf_models.config_for(model_type, batch=1, seq=seq, preset=None), "meta")
        except Exception as exc:
            found["excluded"][model_type] = _error(exc)
            continue
        found["models"][model_type] = {"family": model_type, "task": task, "cpu_ms": ms}
    return found


@click.command()
@click.option("--library", type=click.Choice(["timm", "hf", "both"]), default="both", show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=OUT, show_default=True)
def main(library: str, out: Path) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    for name, probe in (("timm", probe_timm), ("hf", probe_hf)):
        if library in (name, "both"):
            found = {**probe(), "probed": time.strftime("%Y-%m-%d"), "torch": torch.__version__}
            (out / f"{name}.json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
            click.echo(f"{name}: {len(found['models'])} models kept, {len(found['excluded'])} left out -> {out}")


if __name__ == "__main__":
    main()
