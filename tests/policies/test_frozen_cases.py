"""Every policy decides exactly as before on the frozen small cases (experiments/frozen_cases.py).

Why: the policies' speed-ups must not change a single record; the digests were recorded before
them. A failure here means a decision changed: if intended, explain it and re-record.
"""

from __future__ import annotations

import pytest

from experiments.frozen_cases import CASES, POLICIES, digest, key, load_digests
from experiments.hydra_cases import default_cases

DIGESTS = load_digests()
SMALL = [c for c in CASES if not c.big]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", SMALL, ids=[c.name for c in SMALL])
def test_records_equal_the_frozen_ones(case, policy):
    if case.needs_shared and not default_cases().exists():
        pytest.skip(f"Hydra's cases not found at {default_cases()} (set ETS_SHARED)")
    assert key(case, policy) in DIGESTS, "case not recorded"
    assert digest(case.run(policy)) == DIGESTS[key(case, policy)]


def test_the_digest_sees_a_one_ulp_change():
    import numpy as np
    import pandas as pd

    records = pd.DataFrame({"job_id": ["a", "b"], "end": [1.0, 2.0]})
    moved = records.assign(end=[1.0, np.nextafter(2.0, 3.0)])
    assert digest(records) != digest(moved)
    assert digest(records) == digest(records.copy())
