import statistics

import pytest

from flagperf_ansible.stats import describe, numeric_fields


def test_describe_matches_the_standard_library():
    values = [812.5, 799.0, 805.25, 790.0]
    result = describe(values)
    assert result["n"] == 4
    assert result["mean"] == pytest.approx(statistics.mean(values))
    assert result["std"] == pytest.approx(statistics.stdev(values))
    assert (result["min"], result["max"]) == (790.0, 812.5)


def test_single_value_has_zero_spread():
    assert describe([3.0]) == {"n": 1, "mean": 3.0, "std": 0.0, "cv": 0.0, "min": 3.0,
                               "max": 3.0, "olympic_mean": None}


def test_empty_is_an_error():
    with pytest.raises(ValueError):
        describe([])


def test_numeric_fields_skip_bools_and_text():
    records = [{"p_whole": 1.0, "converged": True, "name": "x"}, {"e2e_time": 2, "p_whole": 3.0}]
    assert numeric_fields(records) == ["p_whole", "e2e_time"]
