"""`backoff(n)`: capped exponential backoff with full jitter, uniform in [0, min(cap, base * 2**(n-1))]."""

from __future__ import annotations

import statistics

import pytest
from pytest_django.fixtures import Settings

from hostapp.outbox.actions import backoff

SAMPLES = 4000


@pytest.fixture
def base_2_cap_300(settings: Settings) -> None:
    settings.PATCHBAY_OUTBOX_BACKOFF_BASE = 2
    settings.PATCHBAY_OUTBOX_BACKOFF_CAP = 300


@pytest.mark.parametrize(("attempts", "ceiling"), [(1, 2), (2, 4), (3, 8), (5, 32), (8, 256), (9, 300), (20, 300)])
def test_it_draws_every_delay_between_zero_and_the_capped_ceiling(
    base_2_cap_300: None, attempts: int, ceiling: float
) -> None:
    delays = [backoff(attempts) for _ in range(SAMPLES)]

    assert all(0 <= d <= ceiling for d in delays), (min(delays), max(delays))


@pytest.mark.parametrize(("attempts", "ceiling"), [(1, 2), (4, 16), (8, 256), (12, 300)])
def test_it_spreads_delays_over_the_whole_range_full_jitter(
    base_2_cap_300: None, attempts: int, ceiling: float
) -> None:
    delays = [backoff(attempts) for _ in range(SAMPLES)]

    # Full jitter, not "ceiling plus a little": short and long delays both occur, evenly.
    # (With 4000 uniform draws each bound below fails with a probability far under 1e-9.)
    assert min(delays) < 0.02 * ceiling
    assert max(delays) > 0.98 * ceiling
    assert statistics.mean(delays) == pytest.approx(ceiling / 2, rel=0.06)
    below_half = sum(d < ceiling / 2 for d in delays) / SAMPLES
    assert 0.45 < below_half < 0.55
    assert len(set(delays)) > SAMPLES * 0.99


def test_the_ceiling_doubles_with_each_attempt_until_the_cap(base_2_cap_300: None) -> None:
    highest = {n: max(backoff(n) for _ in range(SAMPLES)) for n in range(1, 12)}

    for n in range(1, 8):  # 2, 4, ... 128: each one about double the one before
        assert 2 * 2 ** (n - 1) * 0.97 < highest[n] <= 2 * 2 ** (n - 1)
    for n in range(9, 12):  # 512, 1024, ... are capped at 300
        assert 300 * 0.97 < highest[n] <= 300


@pytest.mark.parametrize("attempts", [50, 1_000, 100_000])
def test_a_huge_attempt_number_stays_at_the_cap_without_overflowing(base_2_cap_300: None, attempts: int) -> None:
    delays = [backoff(attempts) for _ in range(200)]

    assert all(0 <= d <= 300 for d in delays)
    assert all(isinstance(d, float) for d in delays)


@pytest.mark.parametrize("attempts", [0, 1])
def test_the_first_retry_waits_at_most_the_base(base_2_cap_300: None, attempts: int) -> None:
    assert all(0 <= backoff(attempts) <= 2 for _ in range(SAMPLES))


def test_the_settings_set_base_and_cap(settings: Settings) -> None:
    settings.PATCHBAY_OUTBOX_BACKOFF_BASE = 10
    settings.PATCHBAY_OUTBOX_BACKOFF_CAP = 25

    assert max(backoff(1) for _ in range(SAMPLES)) > 9.5
    assert all(backoff(1) <= 10 for _ in range(SAMPLES))
    assert all(backoff(3) <= 25 for _ in range(SAMPLES))  # 40 capped at 25


def test_a_zero_base_retries_at_once(settings: Settings) -> None:
    settings.PATCHBAY_OUTBOX_BACKOFF_BASE = 0

    assert {backoff(n) for n in (1, 2, 10)} == {0.0}
