"""``ets zoo``: the model zoo's families — where each comes from, its group, whether it is reserved.

Why a module of its own: the zoo grew to a hundred families from three libraries; a user choosing
``ets collect --family`` needs to see them, and a reviewer needs to see which ones are reserved
(never profiled, trained or evaluated on, :mod:`predictor.common.families`).
"""

from __future__ import annotations

import json

import click


@click.group()
def zoo() -> None:
    """The model zoo's families."""


@zoo.command("list")
@click.option("--zoo", "zoo_name", type=click.Choice(["hpo", "randwire", "nlp", "llm", "all", "timm", "hf", "wide",
                                                      "every"]),
              default="every", show_default=True, help="every: all zoos (wide and llm).")
@click.option("--excluded", is_flag=True, help="Also the timm modules and transformers architectures left out, "
                                               "and why.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def zoo_list(zoo_name: str, excluded: bool, as_json: bool) -> None:
    """Each family: source library and version, group, models, and whether it is reserved."""
    from predictor.emulator.zoo import hf_models, timm_models
    from predictor.emulator.zoo.registry import zoo_families

    families = ({**zoo_families("wide"), **zoo_families("llm")} if zoo_name == "every" else zoo_families(zoo_name))
    left_out = {**{f"timm:{k}": v for k, v in timm_models.EXCLUDED.items()},
                **{f"transformers:{k}": v for k, v in hf_models.EXCLUDED.items()}}
    if as_json:
        click.echo(json.dumps({"families": [f.to_dict() for f in families.values()],
                               **({"excluded": left_out} if excluded else {})}, indent=1))
        return
    width = max(len(name) for name in families)
    source_width = max(len(f.source) for f in families.values())
    for f in sorted(families.values(), key=lambda f: (f.group, f.name)):
        models = ", ".join(f.models[:3]) + (f" (+{len(f.models) - 3})" if len(f.models) > 3 else "")
        click.echo(f"{f.name:<{width}}  {f.source:<{source_width}}  {f.group:<18}  "
                   f"{'reserved' if f.reserved else '        '}  {models}")
    groups = {}
    for f in families.values():
        groups[f.group] = groups.get(f.group, 0) + 1
    reserved = sum(f.reserved for f in families.values())
    click.echo(f"{len(families)} families ({', '.join(f'{g} {n}' for g, n in sorted(groups.items()))}); {reserved} "
               "reserved: never profiled, trained or evaluated on (`ets collect --family NAME` captures one)")
    if excluded:
        for name, why in sorted(left_out.items()):
            click.echo(f"left out: {name}: {why}")
