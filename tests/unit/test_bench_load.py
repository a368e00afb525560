"""The pure figures of benchmarks/fleet.py (benchmarks/common/load.py): the busiest window, request
kinds, percentiles (records are (time, agent, method, url, status, s))."""

import pytest

from benchmarks.common import load

RP = "5f0c6b84-6a0e-4a51-9c55-2d5a3b0e8d11"


def rec(t, method="GET", url="/resource_providers?in_tree=" + RP, status=200, seconds=0.01):
    return (t, 0, method, url, status, seconds)


@pytest.mark.parametrize(
    ("times", "width", "want"),
    [
        ([], 1.0, 0),
        ([0.0], 1.0, 1),
        ([0.0, 0.5, 0.99, 1.0, 1.5], 1.0, 3),  # [0, 1) holds 3; 1.0 starts a new one
        ([5.0, 0.0, 0.1, 0.2, 9.0], 0.5, 3),  # unsorted input
        ([0.0, 2.0, 4.0], 1.0, 1),
    ],
)
def test_peak_is_the_busiest_window(times, width, want):
    assert load.peak([rec(t) for t in times], width) == want


def test_kinds_name_paths_without_ids_or_queries():
    records = [
        rec(0),
        rec(1),
        rec(2, url=f"/resource_providers/{RP}/inventories"),
        rec(3, method="PUT", url=f"/resource_providers/{RP}/traits"),
    ]
    assert load.kinds(records) == (
        "GET_/resource_providers:2,"
        "GET_/resource_providers/{id}/inventories:1,"
        "PUT_/resource_providers/{id}/traits:1"
    )


def test_answered_leaves_out_requests_that_got_no_answer():
    assert load.answered([rec(0), rec(1, status=None), rec(2, status=409)]) == [
        rec(0),
        rec(2, status=409),
    ]


def test_percentile():
    assert load.percentile([], 0.99) == 0.0
    values = list(range(1, 101))
    assert load.percentile(values, 0.5) == 51
    assert load.percentile(values, 0.99) == 100
