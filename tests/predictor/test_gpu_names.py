"""One resolver of GPU names (issue 56, step 3): ``canonical_gpu_type`` accepts every name the
three resolvers accepted before it (the catalogue's own lookup, the emulator's ``device_key``
with its ``emulated:`` prefix, Habitat's ``_key`` with vendor words and part suffixes) and gives
the same GPU; the vendor-word tolerance cannot make a catalogue name ambiguous."""

from __future__ import annotations

import re

import pytest

from predictor.common import gpus
from predictor.common.gpus import EMULATED_PREFIX, UnknownGpuTypeError, canonical_gpu_type
from predictor.emulator.devices.specs import DeviceParamsError, device_key
from predictor.methods import habitat

_VENDOR = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b", re.IGNORECASE)
PREFIXES = ("", "NVIDIA ", "Tesla ", "NVIDIA Tesla ", "NVIDIA GeForce ", "Quadro ", EMULATED_PREFIX,
            EMULATED_PREFIX + "NVIDIA ")
SUFFIXES = ("", "-PCIE-32GB", " 80GB HBM3", "-SXM2-16GB", "_X")
UNKNOWN = ("H900", "emulated:H900", "NVIDIA H900", "", "emulated:", "Tesla", "NVIDIA-", " - ", "emulated:emulated:T4")


def _old_device_key(name: str) -> str:
    """device_key as it was: strip one 'emulated:' prefix, then the catalogue's lookup."""
    return gpus.canonical_gpu_type(name.removeprefix(EMULATED_PREFIX))


def _old_habitat_key(name: str) -> str:
    """habitat._key as it was: device_key, else without vendor words, cut at '-', cut at ' '."""
    try:
        return _old_device_key(name)
    except UnknownGpuTypeError:
        pass
    bare = _VENDOR.sub(" ", name.removeprefix(EMULATED_PREFIX)).strip()
    for candidate in dict.fromkeys([bare, bare.split("-")[0].strip(), bare.split(" ")[0]]):
        try:
            return _old_device_key(candidate)
        except UnknownGpuTypeError:
            continue
    raise UnknownGpuTypeError(name)


def _spellings() -> list[str]:
    return sorted({s for e in gpus.catalog().values() for s in (e.name, e.marketing_name, *e.aliases)})


def _names() -> list[str]:
    return sorted({p + s + x for s in _spellings() for p in PREFIXES for x in SUFFIXES}) + list(UNKNOWN)


def _outcome(resolve, name: str) -> str | None:
    try:
        return resolve(name)
    except (UnknownGpuTypeError, DeviceParamsError, ValueError):
        return None


def test_every_catalogue_spelling_resolves_to_its_entry_in_every_mode():
    for entry in gpus.catalog().values():
        for spelling in (entry.name, entry.marketing_name, *entry.aliases):
            for mode in ({}, {"emulated": True}, {"loose": True}):
                assert canonical_gpu_type(spelling, **mode) == entry.name, (spelling, mode)
            assert canonical_gpu_type(EMULATED_PREFIX + spelling, emulated=True) == entry.name
            assert device_key(EMULATED_PREFIX + spelling) == entry.name
            assert habitat.gpu(EMULATED_PREFIX + spelling) is entry


def test_the_one_resolver_accepts_what_the_three_accepted_and_gives_the_same_gpu():
    names = _names()
    for name in names:
        assert _outcome(lambda n: canonical_gpu_type(n), name) == _outcome(gpus.canonical_gpu_type, name), name
        assert _outcome(device_key, name) == _outcome(_old_device_key, name), name
        assert _outcome(lambda n: canonical_gpu_type(n, emulated=True), name) == _outcome(_old_device_key, name), name
        assert _outcome(habitat._key, name) == _outcome(_old_habitat_key, name), name
    loose = [n for n in names if _outcome(habitat._key, n) is not None]
    assert len(loose) > len(_spellings()) * 8  # the vendor-prefixed and suffixed forms resolve, not only the bare


def test_vendor_prefixed_forms_name_the_entry_of_the_bare_name():
    """'NVIDIA T4', 'Tesla V100-PCIE-32GB', 'emulated:NVIDIA A100' and the like: a vendor word
    before a catalogue name or alias (a part name, without spaces: the loose reading cuts at the
    first space) gives that name's entry, except where the prefixed form is itself another entry's
    spelling (the exact spelling wins: 'NVIDIA V100' is the SXM2 board, 'V100' the PCIe one)."""
    exact = {gpus.normalized(s): canonical_gpu_type(s) for s in _spellings()}
    others = set()
    for entry in gpus.catalog().values():
        for spelling in (s for s in (entry.name, *entry.aliases) if " " not in s):
            for prefix in ("NVIDIA ", "Tesla ", "NVIDIA Tesla ", "GeForce ", "Quadro ", EMULATED_PREFIX + "NVIDIA "):
                name = prefix + spelling
                got = canonical_gpu_type(name, loose=True)
                if got != entry.name:  # only where the prefixed form is a spelling of its own
                    assert exact.get(gpus.normalized(name.removeprefix(EMULATED_PREFIX))) == got, (name, got)
                    others.add((name, got))
    assert others == {("NVIDIA V100", "V100-SXM2"), (EMULATED_PREFIX + "NVIDIA V100", "V100-SXM2")}


def test_no_two_entries_share_a_spelling_once_vendor_words_are_dropped_but_the_v100s():
    """The vendor-word tolerance applies only when the exact spelling fails; still, two entries
    whose spellings agree without vendor words are an ambiguity of the loose reading. Only the
    V100s share one ('NVIDIA V100' is an alias of V100-SXM2: DeepBench's SXM2 part; 'V100' names
    the PCIe reference), settled by the exact alias; a catalogue file adding another fails here."""
    owners: dict[str, set[str]] = {}
    for entry in gpus.catalog().values():
        for spelling in (entry.name, entry.marketing_name, *entry.aliases):
            owners.setdefault(gpus.normalized(_VENDOR.sub(" ", spelling)), set()).add(entry.name)
    assert {k: sorted(v) for k, v in owners.items() if len(v) > 1} == {"V100": ["V100", "V100-SXM2"]}
    assert canonical_gpu_type("NVIDIA V100", loose=True) == "V100-SXM2"
    assert canonical_gpu_type("Tesla V100", loose=True) == canonical_gpu_type("NVIDIA Tesla V100", loose=True) == "V100"


@pytest.mark.parametrize("name", UNKNOWN)
def test_unknown_names_are_refused_by_every_mode(name):
    if name == "emulated:emulated:T4":  # two prefixes: only the loose reading strips the second
        assert canonical_gpu_type(name, loose=True) == "T4"
        with pytest.raises(UnknownGpuTypeError):
            canonical_gpu_type(name, emulated=True)
        return
    for mode in ({}, {"emulated": True}, {"loose": True}):
        with pytest.raises(UnknownGpuTypeError) as info:
            canonical_gpu_type(name, **mode)
        assert info.value.name == name  # the message names what was typed, prefix included


def test_the_error_wordings_stay():
    with pytest.raises(DeviceParamsError, match=r"^unknown GPU type 'emulated:H900'; the catalogue .*"
                                                r"\(for emulation: emulated:<name>\)$"):
        device_key("emulated:H900")
    with pytest.raises(ValueError, match=r"^unknown GPU 'NVIDIA H900' for Habitat; known: .*'emulated:'\)$"):
        habitat.gpu("NVIDIA H900")


def test_an_emulated_device_is_its_catalogue_record_plus_the_fitted_terms(tmp_path):
    """One view of a GPU: the emulator's device holds the catalogue entry itself and only the
    fitted fields of its own; a GPU known by a spec file gets the same kind of record."""
    import dataclasses
    import json

    from predictor.emulator.devices.specs import FITTED_FIELDS, DeviceSpec, load_params, spec_sheets

    assert [f.name for f in dataclasses.fields(DeviceSpec)] == ["gpu", *FITTED_FIELDS, "fitted"]
    for name, device in load_params().devices.items():
        assert device.gpu is gpus.catalog()[name] and device.name == name
        assert (device.memory_gbs, device.boost_clock_mhz, device.fp32_tflops) == (
            device.gpu.memory_gbs, device.gpu.boost_clock_mhz, device.gpu.fp32_tflops)
    assert spec_sheets()["T4"].gpu is gpus.entry("Tesla T4")
    path = tmp_path / "mygpu.json"
    path.write_text(json.dumps({"Device": "My GPU", "Dev_Mem": 24, "Mem_Bw": 900, "Num_Sm": 50, "Freq": 1700,
                                "SingleFLOPs": 20000, "L2Cache": 6}))
    device = load_params().device(f"emulated:{path}")
    assert isinstance(device.gpu, gpus.GpuEntry) and device.gpu.file == path and device.gpu.aliases == ()
    assert (device.name, device.fp32_tflops, device.fp16_tflops, device.memory_gbs, device.sms) == (
        "mygpu", 20.0, 20.0, 900.0, 50)
