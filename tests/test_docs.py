"""The documentation cannot rot: every link in README.md and docs/ resolves, and every command they
show names a program, subcommand and options that exist.

Why: the README and docs/ hold hundreds of command lines; an option renamed in code and not in
the docs would mislead every user who copies it. Each command is resolved to its click command
(``simrun``, ``ets`` and every ``python -m experiments.<module>``) and each ``--option`` it names
is looked up among that command's parameters. The README's examples are run, in order, by
``python -m experiments.run_docs`` (all of them take longer than this suite may); here the script
is checked to run every one of them, and the `ets predict` example is run and its printed line
compared with the README's, doctest-style.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROGRAM = re.compile(r"(?:simrun|ets|python -m experiments\.\w+)(?=\s|$)")
OPTION = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def commands(text: str) -> list[str]:
    """Command lines of ``text``: fenced lines starting with a program (with their indented
    continuation lines) and inline code spans starting with one."""
    found, fenced, current = [], False, None
    for line in text.splitlines():
        if line.startswith("```"):
            fenced, current = not fenced, None
            continue
        if fenced:
            if PROGRAM.match(line):
                current = line
                found.append(current)
            elif current is not None and line.startswith(" ") and line.strip():
                found[-1] += " " + line.strip()
            else:
                current = None
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found += [span for span in re.findall(r"`([^`\n]+)`", prose) if PROGRAM.match(span)]
    return found


def resolve(line: str) -> tuple[click.Command, str]:
    """The click command a line runs, and the rest of the line after its (sub)command names."""
    program = PROGRAM.match(line).group(0)
    rest = line[len(program):]
    if program == "simrun":
        from simulator.cli import main as command
    elif program == "ets":
        from predictor.cli import main as command
    else:
        module = importlib.import_module(program.removeprefix("python -m "))
        if hasattr(module, "__path__"):  # a package run with -m: its commands are in its cli module
            module = importlib.import_module(module.__name__ + ".cli")
        found = [v for v in vars(module).values() if isinstance(v, click.Command)
                 and getattr(v.callback, "__module__", None) == module.__name__]
        inner = {id(sub) for v in found if isinstance(v, click.Group) for sub in v.commands.values()}
        found = [v for v in found if id(v) not in inner]  # a group's subcommands are reached through it
        assert len(found) == 1, f"{program}: {len(found)} click commands in the module"
        command = found[0]
    words = rest.split()
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        command = command.commands[words.pop(0)]
    return command, " ".join(words)


def documented_commands() -> list[tuple[str, str]]:
    return [(page.relative_to(ROOT).as_posix(), line) for page in PAGES for line in commands(page.read_text())]


def test_the_pages_show_commands_of_every_program():
    programs = {PROGRAM.match(line).group(0).split(".")[0] for _, line in documented_commands()}
    assert {"simrun", "ets", "python -m experiments"} <= programs
    assert len(documented_commands()) > 100


@pytest.mark.parametrize("page,line", documented_commands(), ids=lambda v: v[:60] if isinstance(v, str) else v)
def test_every_documented_option_exists(page, line):
    command, rest = resolve(line)
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
    unknown = sorted(set(OPTION.findall(rest)) - known)
    assert not unknown, f"{page}: `{line}` names {unknown}, not options of `{command.name}`"


def test_every_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+://|mailto:|#", target):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_script_runs_every_readme_example():
    from experiments.run_docs import readme_examples

    fenced = [line for page, line in documented_commands() if page == "README.md"
              and f"`{line}`" not in (ROOT / "README.md").read_text()]  # not the inline spans
    examples = readme_examples()
    assert examples and set(examples) == set(fenced)
    assert {PROGRAM.match(line).group(0).split(".")[0] for line in examples} == {"simrun", "ets",
                                                                                   "python -m experiments"}


def test_the_readme_prediction_is_what_the_command_prints(tmp_path):
    """Doctest-style: the README's `ets predict` example, run as printed, prints the README's line."""
    from experiments.run_docs import readme_examples, run_one, scratch

    text = (ROOT / "README.md").read_text()
    line = next(c for c in readme_examples() if c.startswith("ets predict"))
    shown = text[text.index(line):].split("```")[2].strip()  # the fenced block after the command's
    result = run_one(line, scratch(tmp_path, None), timeout=600)
    assert result["rc"] == 0, result["output_tail"]
    assert result["output_tail"].strip().splitlines()[-1] == shown
