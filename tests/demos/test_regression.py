"""Regression of every demo against the values pinned in ``tests/regression/<name>.json``:
AMR counts exactly, totals, error norms, gauges and the like to the tolerances in
``pinned.py`` (one case per pinned file; the runs are those the demo's own tests check).

After an intended change of results, regenerate them with
``FORESTPY_REGEN=1 pytest tests/demos/test_regression.py`` (``-k <name>`` for one) and
say why in the commit message.
"""

import pytest
from pinned import CASES
from testsupport import REGRESSION, check_pinned

PINNED = sorted(p.stem for p in REGRESSION.glob("*.json"))


def test_every_pinned_file_has_a_case():
    assert PINNED == sorted(CASES)


@pytest.mark.parametrize("name", PINNED)
def test_pinned(name, request):
    case = CASES[name]
    runs = [request.getfixturevalue(f) for f in case.fixtures]
    check_pinned(name, case.record(*runs), case.spec)
