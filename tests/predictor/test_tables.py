"""The iteration-time table: lookups, round trip, refusals."""

from __future__ import annotations

import pandas as pd
import pytest

from predictor.common.inputs import InputError
from predictor.tables import IterationTimeTable


def test_iteration_time_table_round_trip_and_errors(tmp_path):
    table = IterationTimeTable(pd.DataFrame({"config_id": ["m1", "m1", "m2"], "device": ["V100", "T4", "V100"],
                                             "seconds": [0.1, 0.2, 0.05]}))
    path = tmp_path / "t.parquet"
    table.save(path)
    again = IterationTimeTable.load(path)
    assert again.seconds("m1", "T4") == 0.2 and len(again) == 3
    assert again.matrix(["m1", "m2"], ["V100"]).tolist() == [[0.1], [0.05]]
    with pytest.raises(KeyError, match="config 'm2' on device 'T4'"):
        again.seconds("m2", "T4")
    with pytest.raises(ValueError, match="non-positive"):
        IterationTimeTable(pd.DataFrame({"config_id": ["x"], "device": ["V100"], "seconds": [0.0]}))
    with pytest.raises(ValueError, match="lacks column"):
        IterationTimeTable(pd.DataFrame({"config_id": ["x"], "seconds": [1.0]}))


# -- the cache: authenticated tables, checked before any work (issue 50) --------------------------

def _cache_table(monkeypatch, tmp_path, key="truth-0123", seconds=(0.1, 0.2)):
    """``_cached`` with a counting builder in a private cache under ``tmp_path``: (table, builds, path)."""
    from predictor import tables

    monkeypatch.setenv("ETS_SIM_CACHE", str(tmp_path / "cache"))
    builds: list[int] = []

    def build() -> pd.DataFrame:
        builds.append(1)
        return pd.DataFrame({"config_id": ["m1", "m2"], "device": ["T4", "T4"], "seconds": list(seconds)})

    heard: list[str] = []
    table = tables._cached(key, build, "test", heard.append)
    return table, builds, tmp_path / "cache" / "tables" / f"{key}.parquet", heard


def _rewrite(path, change) -> None:
    """Edit a cache table as a forger would: new content, its content hash recomputed, the old
    HMAC kept (a forger without the key can do no better)."""
    import pyarrow.parquet as pq

    from predictor.tables import HASH_KEY, MAC_KEY, write_table

    old = pq.read_table(path).schema.metadata
    write_table(change(pd.read_parquet(path)), path)
    arrow = pq.read_table(path)
    pq.write_table(arrow.replace_schema_metadata({**arrow.schema.metadata, MAC_KEY: old[MAC_KEY]}), path)
    assert pq.read_table(path).schema.metadata[HASH_KEY] != old[HASH_KEY]


@pytest.mark.parametrize("forgery", ["times ten", "permuted", "mac dropped"])
def test_a_cache_table_forged_with_a_recomputed_hash_is_rebuilt_with_a_warning(monkeypatch, tmp_path, forgery):
    from predictor import tables

    first, builds, path, _ = _cache_table(monkeypatch, tmp_path)
    assert builds == [1] and first.seconds("m1", "T4") == 0.1
    if forgery == "times ten":
        _rewrite(path, lambda t: t.assign(seconds=t["seconds"] * 10))
    elif forgery == "permuted":
        _rewrite(path, lambda t: t.assign(seconds=t["seconds"].to_numpy()[::-1]))
    else:  # a table with a valid content hash and no HMAC: what the old code wrote, or a forger
        tables.write_table(pd.read_parquet(path).assign(seconds=[5.0, 6.0]), path)
    again, builds, _, heard = _cache_table(monkeypatch, tmp_path)
    assert builds == [1], "the forged table was used instead of rebuilt"
    assert again.to_frame().equals(first.to_frame())
    assert len(heard) == 1 and heard[0].startswith(f"cache table {path} does not match its hash: rebuilt (")
    assert ("no HMAC recorded" if forgery == "mac dropped" else "HMAC does not match") in heard[0]
    # rewritten, signed: trusted silently the next time
    _, builds, _, heard = _cache_table(monkeypatch, tmp_path)
    assert builds == [] and heard == []


def test_a_valid_cache_table_copied_under_another_key_is_rebuilt(monkeypatch, tmp_path):
    import shutil

    _, _, path, _ = _cache_table(monkeypatch, tmp_path, key="truth-aaaa", seconds=(9.0, 9.0))
    shutil.copy(path, path.with_name("truth-bbbb.parquet"))
    table, builds, _, heard = _cache_table(monkeypatch, tmp_path, key="truth-bbbb")
    assert builds == [1] and table.seconds("m1", "T4") == 0.1 and "HMAC does not match" in heard[0]


def test_the_cache_key_is_private_and_a_shared_or_linked_key_is_refused(monkeypatch, tmp_path):
    import os
    import stat


    _, _, path, _ = _cache_table(monkeypatch, tmp_path)
    key = path.parent / ".key"
    info = key.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_size == 32 and info.st_uid == os.geteuid()
    key.chmod(0o644)
    with pytest.raises(InputError, match=r"table cache key .*\.key is readable or writable by others \(mode 644\)"):
        _cache_table(monkeypatch, tmp_path)
    key.unlink()
    (tmp_path / "elsewhere").write_bytes(b"k" * 32)
    key.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InputError, match="cannot be opened as a private file"):
        _cache_table(monkeypatch, tmp_path)
    key.unlink()  # removed: a new key is made, and every table (signed with the old one) rebuilt
    _, builds, _, heard = _cache_table(monkeypatch, tmp_path)
    assert builds == [1] and "HMAC does not match" in heard[0]
    if os.geteuid() == 0:  # only root can give a file away
        os.chown(key, 12345, -1)
        with pytest.raises(InputError, match="owned by user 12345, not by you"):
            _cache_table(monkeypatch, tmp_path)


@pytest.mark.parametrize("cache", ["", "   ", "a file", "links"])
def test_an_unusable_cache_is_refused_before_any_table_is_built(monkeypatch, tmp_path, cache):
    from predictor import tables

    if cache == "a file":
        (tmp_path / "file").write_text("not a folder")
        value, match = str(tmp_path / "file"), "set ETS_SIM_CACHE to a writable folder"
    elif cache == "links":
        (tmp_path / "c").mkdir()
        (tmp_path / "victim").mkdir()
        (tmp_path / "c" / "tables").symlink_to(tmp_path / "victim")
        value, match = str(tmp_path / "c"), "is a symbolic link"
    else:
        value, match = cache, "ETS_SIM_CACHE is set but empty"
    monkeypatch.setenv("ETS_SIM_CACHE", value)
    monkeypatch.chdir(tmp_path)
    built = []
    with pytest.raises(InputError, match=match):
        tables._cached("truth-0", lambda: built.append(1), "test")
    assert built == [] and not (tmp_path / "tables").exists()
    if cache == "links":
        assert list((tmp_path / "victim").iterdir()) == []


def test_a_link_planted_at_a_cache_table_is_replaced_never_written_through(monkeypatch, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    _cache_table(monkeypatch, tmp_path, key="truth-x")  # makes the cache
    path = tmp_path / "cache" / "tables" / "truth-y.parquet"
    path.symlink_to(victim)
    table, builds, _, heard = _cache_table(monkeypatch, tmp_path, key="truth-y")
    assert victim.read_text() == "precious" and not path.is_symlink() and builds == [1]
    assert table.seconds("m2", "T4") == 0.2
