import statistics

import pytest

from flagperf_ansible.results.stats import case_passes, describe, numeric_fields


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


def test_cv_and_olympic_mean_follow_their_definitions():
    values = [100.0, 90.0, 110.0, 105.0, 95.0, 300.0]
    result = describe(values)
    assert result["cv"] == pytest.approx(statistics.stdev(values) / statistics.mean(values))
    # MLPerf olympic scoring: drop one smallest (90) and one largest (300).
    assert result["olympic_mean"] == pytest.approx(statistics.mean([95.0, 100.0, 105.0, 110.0]))


def test_olympic_mean_needs_five_values():
    assert describe([1.0, 2.0, 3.0, 4.0])["olympic_mean"] is None
    assert describe([1.0, 2.0, 3.0, 4.0, 10.0])["olympic_mean"] == pytest.approx(3.0)


def test_cv_is_undefined_at_zero_mean():
    assert describe([-1.0, 1.0])["cv"] is None


@pytest.mark.parametrize("planned, ran, passed, passes", [
    (3, 3, 3, True),
    (3, 3, 2, False),     # fewer than 5 rounds: every round must pass
    (5, 5, 4, True),      # MLPerf: one run of 5 that did not pass is allowed
    (5, 5, 3, False),
    (5, 4, 4, False),     # a round that crashed or timed out is never allowed
    (0, 0, 0, False),
])
def test_case_pass_rule(planned, ran, passed, passes):
    assert case_passes(planned, ran, passed) is passes
