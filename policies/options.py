"""Parsers for ``--policy NAME:key=value`` option strings, with errors that name the option.

Why: options arrive as strings from the command line and sweeps; each policy states its options
with these parsers so a bad value fails with one clear message.
"""

from __future__ import annotations

from predictor.common.inputs import SpecError, short


def count_or_all(name: str, value: int | str | None) -> int | None:
    """A positive int, or None for ``all``."""
    if value is None or value == "all":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise SpecError(f"option {name}={value!r}: expected a positive integer or 'all'") from None
    if number < 1:
        raise SpecError(f"option {name}={value!r}: expected a positive integer or 'all'")
    return number


def number(name: str, value: float | str, low: float, high: float, *, low_open: bool = False,
           high_open: bool = False, unit: str = "") -> float:
    """A number in the range from ``low`` to ``high`` (each end closed unless ``*_open``); a value
    outside it (NaN included) is refused naming the option, the range and its ``unit``."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise SpecError(f"option {name}={short(value)}: expected a number") from None
    above = low < x if low_open else low <= x
    below = x < high if high_open else x <= high
    if not (above and below):
        opening, closing = "(" if low_open else "[", ")" if high_open else "]"
        raise SpecError(f"option {name}={short(value)}: must lie in {opening}{low:g}, {high:g}{closing}"
                        + (f" {unit}" if unit else ""))
    return x


def quantile_level(name: str, value: float | str | None) -> float | None:
    """None when unset, else a quantile's level strictly inside (0, 1) (the 0- and 1-quantiles of a
    run time are unbounded)."""
    return None if value is None else number(name, value, 0.0, 1.0, low_open=True, high_open=True)


def switch(name: str, value: bool | str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("on", "true", "yes", "1"):
        return True
    if str(value).lower() in ("off", "false", "no", "0"):
        return False
    raise SpecError(f"option {name}={value!r}: expected on or off")


def choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise SpecError(f"option {name}={value!r}: expected one of {', '.join(allowed)}")
    return value


MODES = ("online", "offline")
RENAMED_MODES = {"oneshot": "offline"}  # Hydra's former spelling


def planning_mode(value: str) -> str:
    """The planning mode, spelled the same for every policy that has one: ``online`` re-plans at
    every event and starts only idle GPUs' queue heads; ``offline`` plans each batch of arrivals
    once and installs whole queues (later arrivals are planned behind them)."""
    if value in RENAMED_MODES:
        raise SpecError(f"option mode={value!r} is now spelled mode={RENAMED_MODES[value]}")
    return choice("mode", value, MODES)
