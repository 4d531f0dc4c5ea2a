"""One reader for the JSON, TOML and YAML documents we read from strangers: GPU catalogue entries,
fitted parameter files, cluster files, the peers' throughput files, a run's JSON.

Why one: each reader used to map the same failures (not a regular file, over the size limit,
nested too deep, not UTF-8, not JSON) onto its own error class by hand, with its own wording.
Here each failure is refused once, with the same one-line message naming the file, raised as the
caller's error class (the one its command line already reports). YAML is read with safe types only
and its alias expansion measured before anything is built (a 1 KB "billion laughs" expands to
~10^9 nodes).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path

from predictor.common.inputs import LIMITS, InputError, json_depth, limit, load_json, read_bytes

KINDS = {".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}

# Nodes a YAML document may expand to once its aliases are followed: a real file has a few per
# entry (a cluster inventory listed machine by machine: ~30,000); a 1 KB alias "billion laughs"
# expands to ~10^9. Refused from the composed graph, before anything is built.
MAX_YAML_NODES = 1_000_000

ErrorClass = Callable[[str], Exception]


def read_document(path: str | Path, what: str, error: ErrorClass = InputError, kind: str | None = None) -> object:
    """The parsed document at ``path`` (its kind from the suffix unless given: json, toml, yaml),
    read only if it is a regular file within the size limit; every failure an ``error`` whose
    message names the file and what is wrong."""
    return parse_document(document_bytes(path, what, error), path, what, error, kind)


def document_bytes(path: str | Path, what: str, error: ErrorClass = InputError) -> bytes:
    """The bytes of ``path`` if it is a regular file within the size limit, else ``error``."""
    try:
        return read_bytes(path, what)
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except InputError as exc:  # a FIFO, a device, an over-size file
        raise error(str(exc)) from None
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror or type(exc).__name__})") from None


def parse_document(data: bytes, path: str | Path, what: str, error: ErrorClass = InputError,
                   kind: str | None = None) -> object:
    """:func:`read_document` for bytes already read (``path`` names them in messages)."""
    kind = kind or KINDS.get(Path(path).suffix.lower())
    if kind not in ("json", "toml", "yaml"):
        raise ValueError(f"{path}: a {what} is JSON, TOML or YAML; say which (suffix .json, .toml, .yaml)")
    try:
        if kind == "json":
            return load_json(data, path)
        if kind == "toml":
            return tomllib.loads(data.decode("utf-8"))
        return _yaml_document(data, path, what)
    except InputError as exc:  # nested past the depth limit, an alias bomb
        raise error(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start:,})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not TOML ({exc})") from None
    except _YamlError as exc:
        raise error(f"{path}: not valid YAML: {exc}") from None


class _YamlError(ValueError):
    """PyYAML's parse error, in one line (the message of :class:`yaml.YAMLError` spans lines)."""


def _yaml_depth_error(path: str | Path, what: str) -> InputError:
    spec = LIMITS["json_depth"]
    return InputError(f"{path}: YAML nested deeper than {limit('json_depth'):,.0f} levels (aliases followed), "
                      f"deeper than any {what} (raise the limit with {spec.variable}=N)")


def _yaml_document(data: bytes, path: str | Path, what: str) -> object:
    """The YAML document of ``data`` (safe types only), its expansion checked before it is built.
    Flow brackets are counted first, so a 100,000-deep ``[[[...`` never reaches the recursive
    parser; deep block nesting stops at Python's recursion limit."""
    import yaml

    if json_depth(data) > limit("json_depth"):
        raise _yaml_depth_error(path, what)
    loader = yaml.SafeLoader(data)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_yaml_graph(root, path, what)
        return loader.construct_document(root)
    except RecursionError:
        raise _yaml_depth_error(path, what) from None
    except yaml.YAMLError as exc:
        raise _YamlError(" | ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:300]) from None
    finally:
        loader.dispose()


def _yaml_children(node) -> list:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_yaml_graph(root, path: str | Path, what: str) -> None:
    """Refuse a composed YAML document that aliases would expand past :data:`MAX_YAML_NODES`
    nodes or past the nesting limit, or whose aliases loop. Each shared (aliased) node is measured
    once, so the check costs the file's size, not its expansion's."""
    most_deep = limit("json_depth")
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, height)
    open_nodes: set[int] = set()

    def measure(node, depth: int) -> tuple[int, int]:
        if depth > most_deep:
            raise _yaml_depth_error(path, what)
        key = id(node)
        if key in measured:
            size, height = measured[key]
            if depth + height - 1 > most_deep:
                raise _yaml_depth_error(path, what)
            return size, height
        if key in open_nodes:
            raise InputError(f"{path}:{node.start_mark.line + 1}: a YAML alias refers to a node that contains it "
                             f"(a recursive document cannot describe a {what})")
        open_nodes.add(key)
        size, height = 1, 0
        for child in _yaml_children(node):
            child_size, child_height = measure(child, depth + 1)
            size, height = size + child_size, max(height, child_height)
            if size > MAX_YAML_NODES:
                raise InputError(f"{path}: YAML aliases expand this document to more than {MAX_YAML_NODES:,} "
                                 f"nodes (an alias bomb?); a {what} needs a few per entry")
        open_nodes.discard(key)
        measured[key] = (size, height + 1)
        return size, height + 1

    measure(root, 1)
