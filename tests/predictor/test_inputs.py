"""The input limits (predictor/common/inputs.py): each checked before the work it bounds, each message
one short line naming the limit and how to raise it, and the table of docs/security.md in step with them."""

from __future__ import annotations

import gzip
import json
import os
import random
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.common import inputs
from predictor.common.inputs import LIMITS, InputError, inflate, json_depth, load_json, read_bytes, short

README = Path(__file__).resolve().parents[2] / "docs" / "security.md"  # the limits table


def reference_depth(text: str) -> int:
    """Bracket depth outside strings, one character at a time (a quote after an odd run of
    backslashes does not open or close a string)."""
    depth = deepest = 0
    inside, run = False, 0
    for ch in text:
        if ch == '"' and run % 2 == 0:
            inside = not inside
        elif not inside and ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif not inside and ch in "]}":
            depth -= 1
        run = run + 1 if ch == "\\" else 0
    return deepest


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='[]{}"\\a', max_size=60), st.sampled_from([1, 2, 3, 7, 1 << 20]))
def test_json_depth_agrees_with_a_character_by_character_count(text, chunk):
    old = inputs._CHUNK
    inputs._CHUNK = chunk  # chunk borders inside strings and backslash runs
    try:
        assert json_depth(text) == reference_depth(text)
    finally:
        inputs._CHUNK = old


def test_json_depth_of_real_json_and_of_escaped_brackets():
    doc = [{"name": 'aten::conv "x" [1]\\', "args": {"Input Dims": [[1, 2], [3]]}}]
    assert json_depth(json.dumps(doc)) == 5 == reference_depth(json.dumps(doc))
    assert json_depth('["[[[[", "\\"[[["]') == 1


def test_deep_json_is_refused_before_parsing(monkeypatch):
    deep = "[" * 100_000 + "]" * 100_000  # Python's parser would raise RecursionError
    with pytest.raises(InputError, match=r"^x.json: JSON nested 100,000 levels deep: .* limit of 100 .*"
                                         r"ETS_SIM_MAX_JSON_DEPTH=N"):
        load_json(deep, "x.json")
    monkeypatch.setenv("ETS_SIM_MAX_JSON_DEPTH", "200000")
    assert json_depth(deep) == 100_000  # raised: the limit is the user's to move
    with pytest.raises(InputError, match="JSON objects and arrays"):
        load_json(b"{}," * 5_000_001, "y.json")


def test_a_gzip_bomb_stops_at_the_limit_not_at_its_size():
    bomb = gzip.compress(b" " * 300 * 2**20, compresslevel=9)  # 300 MiB of spaces in ~300 KB
    started = time.perf_counter()
    with pytest.raises(InputError,
                       match=r"bomb.gz: gzip data inflated past .* limit of 200 .*ETS_SIM_MAX_INFLATE_RATIO"):
        inflate(bomb, "bomb.gz")
    assert time.perf_counter() - started < 10
    text = b'{"traceEvents": []}' * 1000
    assert inflate(gzip.compress(text), "ok.gz") == text and inflate(text, "plain") == text
    with pytest.raises(InputError, match="truncated gzip data"):
        inflate(gzip.compress(text)[:-12], "cut.gz")


def test_only_regular_files_within_the_size_limit_are_read(tmp_path, monkeypatch):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(InputError, match=f"^{pipe}: is a named pipe \\(FIFO\\), not a regular trace file$"):
        read_bytes(pipe, "trace file")
    with pytest.raises(InputError, match="^/dev/zero: is a device"):
        read_bytes("/dev/zero")
    with pytest.raises(InputError, match="is a directory"):
        read_bytes(tmp_path)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1000)
    monkeypatch.setenv("ETS_SIM_MAX_FILE_BYTES", "999")
    with pytest.raises(InputError, match="1,000 bytes exceeds the limit of 999"):
        read_bytes(big)
    monkeypatch.setenv("ETS_SIM_MAX_FILE_BYTES", "lots")
    with pytest.raises(InputError, match="ETS_SIM_MAX_FILE_BYTES='lots': not a number"):
        read_bytes(big)


def test_a_quoted_value_stays_short_however_large():
    laughs: list = ["lol"]
    for _ in range(30):
        laughs = [laughs] * 9  # 9**30 leaves when expanded: repr would never end
    assert len(short(laughs)) <= 80 and len(short("x" * 10**7)) <= 80  # a whole repr would never end
    assert short({"a": 1}) == "{'a': 1}"


def test_the_readme_lists_every_limit_with_its_default():
    text = README.read_text()
    for spec in LIMITS.values():
        default = f"{spec.default:,.0f}"
        assert f"`{spec.variable}`" in text and default in text.split(spec.variable, 1)[1][:200], spec.name


def test_json_depth_of_a_large_real_sized_document_matches_the_parser():
    rng = random.Random(0)
    doc = json.dumps([{"name": f"op{rng.random()}", "args": {"dims": [[1, 2], [3]]}} for _ in range(200_000)])
    assert json_depth(doc) == 5 and load_json(doc, "big.json") == json.loads(doc)  # [ { { [ [


# -- control characters (issue 50) ----------------------------------------------------------------

def test_printable_escapes_every_control_character_and_leaves_text_alone():
    from predictor.common.inputs import printable

    assert printable("résumé 東京 ok") == "résumé 東京 ok"
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("job\nresults in /etc") == "job\\nresults in /etc"
    assert printable("\r\t\x00\x7f\x9b\u202eevil\u200b\ufeff") == "\\r\\t\\x00\\x7f\\x9b\\u202eevil\\u200b\\ufeff"
    assert printable(3) == "3"
    for code in range(0x20):  # no C0 character survives
        assert not any(ord(c) < 0x20 for c in printable(f"x{chr(code)}y"))


def test_a_cli_error_line_never_carries_a_raw_control_character():
    from predictor.common.errors import one_line

    line = one_line("bad job id 'a\x1b[2J'\nresults in /tmp/x\u202e")
    assert line == "bad job id 'a\\x1b[2J' | results in /tmp/x\\u202e"


# -- Parquet: decoded size bounded before values are expanded (issue 50) -------------------------

def _write(path: Path, table, **options) -> Path:
    import pyarrow.parquet as pq

    pq.write_table(table, path, compression="zstd", **options)
    return path


@pytest.mark.parametrize("schema_stored", [True, False])
def test_a_parquet_dictionary_of_one_long_string_is_refused_from_its_dictionary(tmp_path, monkeypatch,
                                                                                  schema_stored):
    """One 10 KB string referenced by 20,000 rows: a few hundred bytes on disk, 200 MB decoded.
    Without the arrow schema stored, pyarrow would decode it into a plain string column."""
    import numpy as np
    import pyarrow as pa

    from predictor.common.inputs import read_parquet

    monkeypatch.setenv("ETS_SIM_MAX_DECODED_BYTES", str(10**7))
    column = pa.DictionaryArray.from_arrays(pa.array(np.zeros(20_000, dtype="int32")), pa.array(["x" * 10_000]))
    path = _write(tmp_path / "d.parquet", pa.table({"config_id": column}), store_schema=schema_stored)
    assert path.stat().st_size < 2_000
    with pytest.raises(InputError, match=f"^{path}: column 'config_id' decodes to 200,000,000 bytes of text: .* "
                                         "exceeds the limit of 10,000,000 .*ETS_SIM_MAX_DECODED_BYTES=N"):
        read_parquet(path)


def test_parquet_run_length_lists_and_row_groups_are_refused_from_the_footer(tmp_path, monkeypatch):
    import numpy as np
    import pyarrow as pa

    from predictor.common.inputs import read_parquet

    monkeypatch.setenv("ETS_SIM_MAX_DECODED_BYTES", str(10**7))
    zeros = pa.array(np.zeros(3_000_000, dtype="int64"))
    lists = pa.ListArray.from_arrays(pa.array([0, 1_000_000, 2_000_000, 3_000_000], type=pa.int32()), zeros)
    path = _write(tmp_path / "l.parquet", pa.table({"params": lists}))
    assert path.stat().st_size < 20_000  # 24 MB of values
    with pytest.raises(InputError, match=f"^{path}: decodes to at least 24,000,000 bytes: .*DECODED_BYTES"):
        read_parquet(path)
    monkeypatch.setenv("ETS_SIM_MAX_ROW_GROUPS", "10")
    many = _write(tmp_path / "g.parquet", pa.table({"a": np.arange(11)}), row_group_size=1)
    with pytest.raises(InputError, match=f"^{many}: 11 row groups exceeds the limit of 10 .*ETS_SIM_MAX_ROW_GROUPS"):
        read_parquet(many)


def test_the_bounded_parquet_reader_gives_what_pandas_gives(tmp_path):
    import pandas as pd

    from predictor.common.inputs import read_parquet

    frame = pd.DataFrame({"config_id": ["a", "bb", None, "a"], "n": [1, 2, 3, 4], "x": [0.5, None, 1.5, 2.0],
                          "params": [[1, 2], [], None, [3]], "flag": [True, False, True, True],
                          "kind": pd.Categorical(["u", "v", "u", "u"]), "raw": [b"\x00", b"", b"z", b"zz"]})
    path = tmp_path / "f.parquet"
    frame.to_parquet(path, index=False)
    pd.testing.assert_frame_equal(read_parquet(path), pd.read_parquet(path))
    pd.testing.assert_frame_equal(read_parquet(path, columns=["n", "config_id"]),
                                  pd.read_parquet(path, columns=["n", "config_id"]))
