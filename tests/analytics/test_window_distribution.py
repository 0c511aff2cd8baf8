"""A window's distribution: exact while few samples, beyond that a fixed-scale log-bucketed
histogram whose every reported quantile is within the stated relative error of the exact one; exact
sums of values and squares; removal; falling back under the exact range; order independence."""

from __future__ import annotations

import math
import random
from collections import Counter
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meritlens.analytics._accumulate import EXTREME_DEPTH, WindowBook, _Extreme
from meritlens.analytics._distribution import (
    EXACT_SAMPLES,
    SUM_SCALE,
    Distribution,
    bucket_indices,
    exact_square_sum,
    exact_sum,
    sample_stddev,
    sample_variance,
)
from meritlens.analytics._scale import relative_error_of, scale_for
from meritlens.analytics._samples import SAMPLE_ROW_COLUMNS, SAMPLE_VALUES

_QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)


def _samples(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    return {
        "lognormal": lambda: rng.lognormal(-1.0, 1.5, n),
        "heavy": lambda: rng.pareto(1.2, n) * 1e-4 + 1e-6,
        "uniform": lambda: rng.uniform(0.0, 50.0, n),
        "integers": lambda: rng.integers(0, 5000, n).astype(float),
        "signed": lambda: np.concatenate([rng.lognormal(0, 2, n // 2), -rng.lognormal(0, 2, n - n // 2 - n // 10),
                                          np.zeros(n // 10)]),
    }[kind]()


@pytest.mark.parametrize("error", [0.05, 0.01, 0.002])
@pytest.mark.parametrize("kind", ["lognormal", "heavy", "uniform", "integers", "signed"])
@pytest.mark.parametrize("n", [EXACT_SAMPLES + 1, 20_000, 300_000])
def test_every_reported_quantile_is_within_the_stated_relative_error(kind, n, error):
    rng = np.random.default_rng(n + len(kind))
    values = _samples(kind, n, rng)
    scale = scale_for(error)
    bound = relative_error_of(scale)
    assert bound <= error
    distribution = Distribution(scale)
    for part in np.array_split(values, 7):
        distribution.add(part)
    assert not distribution.exact and distribution.relative_error == bound
    got = distribution.quantiles(_QS)
    expected = np.quantile(values, _QS)  # numpy's default: linear interpolation, as the windows'
    for q, g, e in zip(_QS, got, expected):
        assert abs(g - e) <= bound * abs(e) * (1 + 1e-9), (q, g, e)


def test_the_exact_range_reports_numpys_quantiles_to_the_last_bit():
    values = np.random.default_rng(3).lognormal(0, 1, EXACT_SAMPLES)
    distribution = Distribution(scale_for(0.01))
    distribution.add(values)
    assert distribution.exact and distribution.relative_error == 0.0
    assert distribution.quantiles(_QS) == pytest.approx(list(np.quantile(values, _QS)), rel=1e-15, abs=0)
    assert distribution.order_statistics([0, EXACT_SAMPLES - 1]) == [values.min(), values.max()]


def test_removing_samples_leaves_the_state_of_the_samples_left():
    rng = np.random.default_rng(4)
    values = rng.lognormal(0, 1, 50_000)
    scale = scale_for(0.01)
    both, rest = Distribution(scale), Distribution(scale)
    both.add(values)
    assert both.remove(values[:20_000])
    rest.add(values[20_000:])
    assert both.export()[0] == rest.export()[0]
    assert all((a == b).all() for a, b in zip(both.export()[1], rest.export()[1]))


def test_a_histogram_falling_back_to_the_exact_range_asks_to_be_recomputed():
    values = np.arange(1.0, EXACT_SAMPLES + 2.0)
    distribution = Distribution(scale_for(0.01))
    distribution.add(values)
    assert not distribution.exact
    assert distribution.apply(values[:1], values[1:2] + 0.5)  # same count: it stays a histogram
    assert distribution.apply(values[2:3], np.empty(0)) is False  # EXACT_SAMPLES left: recompute
    exact = Distribution(scale_for(0.01))
    exact.add(values[:EXACT_SAMPLES])
    assert exact.apply(values[:1], values[:2] + 0.25)  # exact at the edge: one more makes it a histogram
    assert not exact.exact


def test_removing_what_is_not_held_asks_to_be_recomputed():
    distribution = Distribution(scale_for(0.01))
    distribution.add(np.array([1.0, 2.0]))
    assert distribution.remove(np.array([3.0])) is False
    big = Distribution(scale_for(0.01))
    big.add(np.arange(1.0, 3000.0))
    assert big.remove(np.array([1e9])) is False


def test_buckets_follow_opentelemetrys_exponential_histogram_mapping():
    scale = 3
    base = 2 ** (2 ** -scale)
    for index in range(-40, 40):
        upper = base ** (index + 1)
        inside = np.array([upper * 0.999, base ** index * 1.001])
        assert (bucket_indices(inside, scale) == index).all(), index
    powers = np.array([0.25, 0.5, 1.0, 2.0, 1024.0])  # exact powers of two close their bucket
    assert bucket_indices(powers, scale).tolist() == [(-2 << scale) - 1, (-1 << scale) - 1, -1, (1 << scale) - 1,
                                                      (10 << scale) - 1]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), cuts=st.integers(1, 12))
def test_the_state_is_a_function_of_the_samples_whatever_the_order_and_batching(seed, cuts):
    """Adds and removals in random order and batches: the same exported state as adding only the
    samples that remain, at once, in another order."""
    rng = np.random.default_rng(seed)
    kept = rng.lognormal(0, 2, int(rng.integers(EXACT_SAMPLES + 10, 6000)))
    dropped = rng.lognormal(0, 2, int(rng.integers(0, 500)))
    scale = scale_for(0.01)
    stepwise = Distribution(scale)
    order = rng.permutation(np.concatenate([kept, dropped]))
    for part in np.array_split(order, cuts):
        stepwise.add(part)
    for part in np.array_split(rng.permutation(dropped), cuts):
        assert stepwise.remove(part)
    at_once = Distribution(scale)
    at_once.add(rng.permutation(kept))
    assert stepwise.export()[0] == at_once.export()[0]
    assert [a.tolist() for a in stepwise.export()[1]] == [a.tolist() for a in at_once.export()[1]]
    assert stepwise.quantiles(_QS) == at_once.quantiles(_QS)


def _sample_rows(values: np.ndarray, target: str = "bot") -> pa.Table:
    """Sample rows of one metric (end_to_end_latency), one task each."""
    n = values.size
    columns = {name: pa.nulls(n, pa.float64()) for name in SAMPLE_VALUES}
    columns["end_to_end_latency"] = pa.array(values)
    ints = np.arange(n, dtype=np.int64)
    columns.update(target_id=pa.array([target] * n), scope=pa.array(["all"] * n),
                   first_end_us=pa.array(1_700_000_000_000_000 + ints), last_end_us=pa.array(1_700_000_000_000_000 + ints),
                   start_ns=pa.array(ints * 1000), end_ns=pa.array(ints * 1000 + 5), success=pa.nulls(n, pa.bool_()),
                   span_count=pa.array(np.ones(n, dtype=np.int64)),
                   key_high=pa.array((ints * 7919).astype(np.uint64)), key_low=pa.array((ints * 104729).astype(np.uint64)))
    return pa.table({name: columns[name] for name in SAMPLE_ROW_COLUMNS})


def test_a_books_windows_are_the_same_whatever_the_batching_of_many_samples():
    values = np.random.default_rng(8).lognormal(-1, 1, 12_000)
    rows = _sample_rows(values)
    at_once, batched = WindowBook(), WindowBook()
    at_once.apply_delta(None, rows)
    order = list(range(rows.num_rows))
    random.Random(8).shuffle(order)
    shuffled = rows.take(order)
    for start in range(0, rows.num_rows, 997):
        batched.apply_delta(None, shuffled.slice(start, 997))
    key = ("bot", "all")
    assert batched.export_key(key) == at_once.export_key(key)
    window = next(w for w in at_once.windows(key, "db", None) if w.metric == "end_to_end_latency")
    assert window.sample_count == 12_000 and window.quantile_error == relative_error_of(at_once.scale)
    assert window.mean == float(sum(Fraction(v) for v in values.tolist()) / 12_000)
    assert window.stddev == pytest.approx(float(np.std(values, ddof=1)), rel=1e-12)
    assert abs(window.p99 - np.quantile(values, 0.99)) <= window.quantile_error * np.quantile(values, 0.99)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=40))
def test_sums_of_values_and_squares_are_exact(values):
    array = np.array(values, dtype=float)
    assert Fraction(exact_sum(array), 1 << SUM_SCALE) == sum(map(Fraction, values))
    squares = sum(Fraction(v) ** 2 for v in values)
    assert Fraction(exact_square_sum(array), 1 << (2 * SUM_SCALE)) == squares
    variance = sample_variance(len(values), exact_sum(array), exact_square_sum(array))
    if len(values) < 2:
        assert variance is None
    else:
        n, total = len(values), sum(map(Fraction, values))
        exact = (n * squares - total * total) / (n * (n - 1))
        assert variance == (float(exact) if exact < Fraction(2) ** 1024 else math.inf)
        stddev = sample_stddev(n, exact_sum(array), exact_square_sum(array))
        assert math.isfinite(stddev)  # also where the variance is beyond the doubles
        if exact:
            expected = math.exp((math.log(exact.numerator) - math.log(exact.denominator)) / 2)  # logs of big ints
            assert stddev == pytest.approx(expected, rel=1e-9)
        else:
            assert stddev == 0.0


def test_the_quantile_error_setting_is_checked_in_one_line():
    for bad in (0.0, 1.0, -0.1, 1e-12):
        with pytest.raises(ValueError) as refused:
            scale_for(bad)
        assert "\n" not in str(refused.value)
    assert relative_error_of(scale_for(0.01)) <= 0.01 < relative_error_of(scale_for(0.01) - 1)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10**6), lowest=st.booleans(), growing=st.booleans())
def test_a_windows_first_and_last_times_follow_deltas_or_say_they_cannot(seed, lowest, growing):
    """The few best times a window keeps give its first (or last) time after any delta, or say the
    window must be recomputed; a growing task's delta (its old times out, times as good or better in)
    never needs that."""
    rng = random.Random(seed)
    extreme, held = _Extreme(lowest), []
    top = rng.choice([3, 12, 1000])
    for _ in range(rng.randint(1, 15)):
        removed = rng.sample(held, rng.randint(0, min(len(held), 12)))
        added = [v - rng.randint(0, 2) if lowest else v + rng.randint(0, 2) for v in removed] if growing else []
        added += [rng.randint(0, top) for _ in range(rng.randint(0, 20))]
        known = extreme.apply(np.array(removed, dtype=np.int64), np.array(added, dtype=np.int64), len(held))
        held += added
        for v in removed:
            held.remove(v)
        if not known:
            assert not growing
            return
        assert extreme.value == ((min(held) if lowest else max(held)) if held else None)
        assert len(extreme.kept) <= EXTREME_DEPTH
        # every kept time has the count of samples that have it; every other time lies beyond them all
        adjusted = Counter(v if lowest else -v for v in held)
        assert all(adjusted[v] == n for v, n in extreme.kept.items())
        assert all(v > max(extreme.kept) for v in adjusted if v not in extreme.kept)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), parts=st.integers(1, 6))
def test_merged_states_of_parts_are_the_state_of_all_their_samples(seed, parts):
    """Windows over a longer time are merges of shorter ones' states (hours into days): the merge of
    the parts' states renders the rows of one state fed every sample, exact or histogram alike."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([40, 900, 3000]))
    rows = _sample_rows(rng.lognormal(0, 1, n)).take(rng.permutation(n))
    whole, pieces = WindowBook(), WindowBook()
    whole.apply_delta(None, rows)
    cuts = sorted(rng.choice(np.arange(1, n), size=parts - 1, replace=False).tolist()) if parts > 1 else []
    keys = []
    for i, (start, end) in enumerate(zip([0, *cuts], [*cuts, n])):
        part = rows.slice(start, end - start).set_column(1, "scope", pa.array([f"part-{i}"] * (end - start)))
        pieces.apply_delta(None, part)
        keys.append(("bot", f"part-{i}"))
    saved = [pieces.export_key(k) for k in keys]
    merged = pieces.merged(keys, ("bot", "all"))
    assert merged.windows(("bot", "all"), "db", None) == whole.windows(("bot", "all"), "db", None)
    assert [pieces.export_key(k) for k in keys] == saved  # the parts are untouched
