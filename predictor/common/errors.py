"""The last word on every error both command lines print: one line, of bounded length, never a
traceback for input we refused.

Why one place: each command turns its own error types into messages, but a limit hit deep in a
loader (:class:`predictor.common.inputs.UserError`) may surface from any of them, and a message built
from a hostile file must not print megabytes. ``ets`` and ``simrun`` are both :class:`UserErrorGroup`.
"""

from __future__ import annotations

import click

from predictor.common.inputs import UserError, printable

MAX_MESSAGE = 1000  # characters of one error line


def one_line(message: str, width: int = MAX_MESSAGE) -> str:
    """``message`` on one line (line breaks become " | "), every other control character escaped
    (:func:`predictor.common.inputs.printable`: a value from a hostile file never reaches the terminal
    raw) and at most ``width`` characters."""
    text = " | ".join(part for part in message.splitlines() if part.strip()) if "\n" in message else message
    text = printable(text)
    if len(text) <= width:
        return text
    tail = f"… ({len(text) - width:,}+ more characters)"
    return text[:width - len(tail)] + tail


class UserErrorGroup(click.Group):
    """A click group whose commands' refusals print as one bounded ``Error:`` line."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:  # any refusal of input a user can fix, wherever it was raised
            raise click.ClickException(one_line(str(exc))) from None
        except click.ClickException as exc:
            exc.message = one_line(exc.message)
            raise
