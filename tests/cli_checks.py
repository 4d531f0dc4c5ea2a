"""The one check of a CLI refusal, shared by the hostile-input tests of every package."""

from __future__ import annotations


def one_line_error(result, *needles: str, codes: tuple[int, ...] = (1, 2), alone: bool = False) -> str:
    """``result`` (a click ``CliRunner`` result) is a refusal: an exit code in ``codes`` (1: ours, 2:
    click's usage errors), no traceback,
    exactly one ``Error:`` line of at most 1,000 characters holding every needle — and, ``alone``,
    nothing else on the output (no progress, no usage block). Returns that line."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in codes, result.output[:2000]
    assert "Traceback" not in result.output, result.output[:2000]
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and len(errors[0]) <= 1000, result.output[:2000]
    if alone:
        assert result.output.strip() == errors[0], result.output[:2000]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]
