"""Every error class a user can fix derives from one base and is one of a few kinds, and both command
lines print it as one line.

Why: simrun used to catch a list of 14 classes typed by hand; an input error of a class missing
from it (a broken params.json, a corrupted checkpoint) came out as a traceback. Now the list is
derived: a command catches :class:`predictor.common.inputs.UserError`, and this test makes each
new error class say whether it is one.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import click
from click.testing import CliRunner

from predictor.common.errors import UserErrorGroup
from predictor.common.inputs import UserError

# Errors that are not the user's input: a policy's own bug, a measurement disturbed by the machine,
# PyYAML's message carried inside the document reader.
NOT_USER_ERRORS = {"policies.base.PolicyError", "predictor.emulator.capture.disturbance.DisturbedError",
                   "predictor.common.documents._YamlError"}
# The kinds a user can tell apart (predictor.common.inputs): a wrong file or value, the same located
# at a file's line and field, a wrong command-line spec, an unusable checkpoint, an unwritable
# output, a run that cannot finish.
KINDS = {f"predictor.common.inputs.{name}" for name in
         ("UserError", "InputError", "LocatedError", "SpecError", "CheckpointError", "OutputError", "SimulationError")}
# Classes of their own beside the kinds, each derived from one, and why it is more than a name.
KEPT = {
    "predictor.common.gpus.UnknownGpuTypeError": "its name attribute, brief form and pickling by name",
    "predictor.common.op_trace.OpTraceFormatError": "its row attribute and (path, message, row, field) form",
    "predictor.emulator.capture.model_file.ModelFileError": "its path attribute and one-line message",
    "predictor.emulator.devices.measurements.MeasurementError": "its file, problem, where and field attributes",
    "predictor.emulator.zoo.config.ModelBuildError": "its config_id and reason attributes",
    "predictor.emulator.devices.kernels.KernelModelError": "caught alone: the installation's model stops a run "
                                                           "that skips a bad input file",
    "predictor.emulator.devices.specs.DeviceParamsError": "caught alone: an unknown device name is tried again "
                                                          "(Habitat's aliases) or listed as missing",
    "predictor.emulator.devices.collectives.CollectiveError": "caught alone: the option or field that set the "
                                                             "placement is named in front of it",
}
PACKAGES = ("predictor", "simulator", "policies", "traces")
SKIP_IMPORT = ("predictor.emulator.capture.model_process",)  # its child-process entry point


def error_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if info.name in SKIP_IMPORT:
                continue
            module = importlib.import_module(info.name)
            for attr, value in vars(module).items():
                if (inspect.isclass(value) and issubclass(value, Exception) and value.__module__ == info.name
                        and attr.endswith("Error")):
                    found[f"{info.name}.{attr}"] = value
    return found


def test_every_error_class_says_whether_it_is_the_users():
    classes = error_classes()
    assert len(classes) >= len(KINDS | set(KEPT) | NOT_USER_ERRORS)  # the walk found the packages' error classes
    assert NOT_USER_ERRORS <= set(classes)  # the exceptions still exist
    neither = sorted(n for n, c in classes.items() if not issubclass(c, UserError) and n not in NOT_USER_ERRORS)
    assert not neither, f"derive from UserError or list in NOT_USER_ERRORS: {neither}"
    assert not any(issubclass(classes[n], UserError) for n in NOT_USER_ERRORS)


def test_user_errors_are_a_few_kinds():
    """A user error raises one of the kinds; a new class that only renames one is not added."""
    users = {n for n, c in error_classes().items() if issubclass(c, UserError)}
    extra = sorted(users - KINDS - set(KEPT))
    assert not extra, f"raise a kind of predictor.common.inputs, or list in KEPT why not: {extra}"
    assert KINDS | set(KEPT) <= users  # the list is not stale
    classes = error_classes()
    kinds = tuple(classes[n] for n in KINDS - {"predictor.common.inputs.UserError"})
    assert all(issubclass(classes[n], kinds) for n in KEPT)  # each of a kind, not a bare UserError


def test_a_user_error_of_any_class_prints_as_one_line():
    from predictor.checkpoint_file import CheckpointError
    from predictor.emulator.devices.specs import DeviceParamsError

    for error in (DeviceParamsError("params.json: field 'format' is 3\nrefit"), CheckpointError("x.pt: corrupted")):
        @click.group(cls=UserErrorGroup)
        def cli():
            pass

        @cli.command()
        def run(raised: Exception = error):
            raise raised

        result = CliRunner().invoke(cli, ["run"])
        assert result.exit_code == 1 and result.exception is not None and isinstance(result.exception, SystemExit)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and str(error).split("\n")[0] in lines[0]


def test_simrun_prints_a_broken_cluster_file_as_one_line(tmp_path):
    from simulator.cli import main

    cluster = tmp_path / "c.json"
    cluster.write_text('{"nodes": [')
    result = CliRunner().invoke(main, ["--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:5",
                                       "--cluster", str(cluster), "--out", str(tmp_path / "o"), "--quiet"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert f"{cluster}: not JSON" in result.output
