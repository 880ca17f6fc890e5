"""The sampling lab reproduces the seeds' hand exercise on logits [4, 3, 2, 1, 0.5]."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tokenstep.sampling import distribution, exercise

SEEDS_LOGITS = [4.0, 3.0, 2.0, 1.0, 0.5]
LABELS = ["the", "a", "an", "and", "or"]


def test_softmax_matches_the_exercise():
    result = exercise(SEEDS_LOGITS, LABELS)
    assert [round(r.prob, 3) for r in result.rows] == [0.632, 0.232, 0.085, 0.031, 0.019]
    assert [round(r.cumulative, 3) for r in result.rows] == [0.632, 0.864, 0.949, 0.981, 1.0]
    assert result.greedy == "the"


def test_top_3_and_nucleus_match_the_exercise():
    result = exercise(SEEDS_LOGITS, LABELS, top_k=3, top_p=0.9)
    assert [r.label for r in result.rows if r.in_top_k] == ["the", "a", "an"]
    assert [r.label for r in result.rows if r.in_nucleus] == ["the", "a", "an"]
    # The exercise divides the rounded 0.632 by 0.949 (= 0.666); exactly it is 0.6652.
    assert round(0.632 / 0.949, 3) == 0.666
    assert result.rows[0].top_k_prob == pytest.approx(0.6652, abs=1e-4)


def test_temperature_matches_the_exercise():
    assert round(float(distribution(SEEDS_LOGITS, temperature=2.0)[0]), 3) == 0.422
    assert [round(float(p), 3) for p in distribution(SEEDS_LOGITS, temperature=2.0)] == [0.422, 0.256, 0.155, 0.094, 0.073]
    # The seeds print 0.866 for T=0.5; e^8 / (e^8 + e^6 + e^4 + e^2 + e^1) is 0.8643 (their slip).
    assert float(distribution(SEEDS_LOGITS, temperature=0.5)[0]) == pytest.approx(0.8643, abs=1e-4)
    assert [round(float(p), 3) for p in distribution(SEEDS_LOGITS, temperature=0.5)][1:] == [0.117, 0.016, 0.002, 0.001]


def test_nucleus_adapts_to_the_shape_of_the_distribution():
    peaked = distribution([8.0, 3.0, 2.0, 1.0, 0.5], top_p=0.9)
    flat = distribution([1.0, 0.9, 0.8, 0.7, 0.6], top_p=0.9)
    assert int((peaked > 0).sum()) == 1 and int((flat > 0).sum()) == 5


def test_greedy_and_invalid_settings():
    assert distribution(SEEDS_LOGITS, temperature=0).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="top_p"):
        distribution(SEEDS_LOGITS, top_p=0)
    with pytest.raises(ValueError, match="finite"):
        distribution([1.0, float("nan")])
    with pytest.raises(ValueError, match="2 labels for 5 logits"):
        exercise(SEEDS_LOGITS, ["a", "b"])


def _lab(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tokenstep", "lab", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_lab_command_prints_the_exercise_table():
    out = _lab("4,3,2,1,0.5", "--labels", "the,a,an,and,or", "--top-k", "3", "--top-p", "0.9", "-T", "0.5")
    for expected in ("0.632", "0.232", "0.085", "0.031", "0.019", "0.864", "0.949",
                     "the = 0.632 / 0.949 = 0.666", "nucleus at p=0.9: {the, a, an}", "greedy picks: the"):
        assert expected in out
    assert "p(#0) = 0.422" in _lab("4,3,2,1,0.5", "-T", "2")


def test_lab_command_rejects_bad_vectors():
    result = subprocess.run([sys.executable, "-m", "tokenstep", "lab", "4,x"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "comma-separated numbers" in result.stderr and "Traceback" not in result.stderr
