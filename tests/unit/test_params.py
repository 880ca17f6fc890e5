"""SamplingParams validation, table-driven: every invalid value of every field raises ValueError
naming the field (and its allowed range where the code states one); valid edge values construct
and are normalised as documented."""

from __future__ import annotations

import math

import pytest

from tokenstep.params import MAX_LOGPROBS, MAX_TRACE, SamplingParams

NAN, INF = math.nan, math.inf
WRONG_TYPES = ["1", b"1", None, True, False, [1], {"a": 1}, object()]  # never a number

# field -> (text the error states, out-of-range values, wrong-type values it must also refuse)
FLOAT_FIELDS = {
    "temperature": (">= 0", [-0.01, -1, -INF], []),
    "top_p": ("(0, 1]", [0, 0.0, -0.5, 1.0001, 2], []),
    "min_p": ("[0, 1]", [-0.001, 1.0001, 5], []),
    "repetition_penalty": ("> 0", [0, 0.0, -1, -1e-9], []),
    "presence_penalty": ("[-2, 2]", [2.5, -2.5, 2.0001, -100], []),
    "frequency_penalty": ("[-2, 2]", [2.5, -2.5, -2.0001, 100], []),
    "timeout": ("> 0", [0, 0.0, -1, -0.5], []),  # None is valid (no timeout)
}
INT_FIELDS = {
    "n": (">= 1", [0, -1], []),
    "top_k": ("-1, 0 (off) or a positive integer", [-2, -100], [1.5, 2.0, -1.0]),
    "seed": (">= 0", [-1, -(2**63)], []),  # None is valid (random seed)
    "max_tokens": (">= 1", [0, -1], []),  # None is valid (up to the context window)
    "min_tokens": (">= 0", [-1], []),
    "logprobs": (f"[0, {MAX_LOGPROBS}]", [-1, MAX_LOGPROBS + 1, 1000], []),  # None is valid (off)
    "trace": (f"[0, {MAX_TRACE}]", [-1, MAX_TRACE + 1], []),
}
OPTIONAL = {"timeout", "seed", "max_tokens", "logprobs"}


def _cases():
    for table, non_numbers in ((FLOAT_FIELDS, [NAN, INF, -INF]), (INT_FIELDS, [1.5, NAN, INF, 3.0])):
        for name, (rule, out_of_range, extra_types) in table.items():
            for value in out_of_range:
                yield pytest.param(name, value, rule, id=f"{name}={value!r}")
            for value in [*non_numbers, *extra_types, *WRONG_TYPES]:
                if value is None and name in OPTIONAL:
                    continue
                yield pytest.param(name, value, None, id=f"{name}={value!r}")


@pytest.mark.parametrize("name, value, rule", list(_cases()))
def test_invalid_numbers_are_refused(name, value, rule):
    """Out of range, NaN/inf, or not a number (a string, bool, None, list...): ValueError naming the
    field, and stating its range where the value was a number out of it."""
    with pytest.raises(ValueError) as error:
        SamplingParams(**{name: value})
    assert name in str(error.value)
    if rule is not None:
        assert rule in str(error.value)


@pytest.mark.parametrize("kwargs, expected", [
    ({"min_tokens": 5, "max_tokens": 4}, ["min_tokens", "max_tokens"]),
    ({"min_tokens": 17}, ["min_tokens", "max_tokens"]),  # default max_tokens is 16
    ({"stop": ""}, ["stop", "non-empty"]),
    ({"stop": ["ok", ""]}, ["stop", "non-empty"]),
    ({"stop": [1]}, ["stop"]),
    ({"stop": ["ok", None]}, ["stop"]),
    ({"stop": [b"x"]}, ["stop"]),
    ({"stop": 5}, ["stop"]),
    ({"stop": 0}, ["stop"]),
    ({"stop": True}, ["stop"]),
    ({"stop_token_ids": [-1]}, ["stop_token_ids", ">= 0"]),
    ({"stop_token_ids": [1, 2.0]}, ["stop_token_ids"]),
    ({"stop_token_ids": ["3"]}, ["stop_token_ids"]),
    ({"stop_token_ids": [True]}, ["stop_token_ids"]),
    ({"stop_token_ids": "12"}, ["stop_token_ids"]),
    ({"stop_token_ids": 5}, ["stop_token_ids"]),
    ({"stop_token_ids": 0}, ["stop_token_ids"]),
    ({"logprobs_mode": "foo"}, ["logprobs_mode", "'raw' or 'processed'"]),
    ({"logprobs_mode": "RAW"}, ["logprobs_mode"]),
    ({"logprobs_mode": None}, ["logprobs_mode"]),
    ({"logprobs_mode": ["raw"]}, ["logprobs_mode"]),
    ({"ignore_eos": "false"}, ["ignore_eos"]),
    ({"ignore_eos": 1}, ["ignore_eos"]),
    ({"skip_special_tokens": "no"}, ["skip_special_tokens"]),
    ({"skip_special_tokens": None}, ["skip_special_tokens"]),
    ({"include_stop_str_in_output": "yes"}, ["include_stop_str_in_output"]),
    ({"include_stop_str_in_output": 0}, ["include_stop_str_in_output"]),
], ids=repr)
def test_invalid_other_fields_are_refused(kwargs, expected):
    """Stop strings/ids, min_tokens vs max_tokens, logprobs_mode and the boolean switches."""
    with pytest.raises(ValueError) as error:
        SamplingParams(**kwargs)
    for text in expected:
        assert text in str(error.value)


@pytest.mark.parametrize("bias, expected", [
    ({"abc": 1}, ["logit_bias", "integers >= 0"]),
    ({-1: 1}, ["logit_bias", "integers >= 0"]),
    ({"-1": 1}, ["logit_bias", "integers >= 0"]),
    ({"1.5": 1}, ["logit_bias", "integers >= 0"]),
    ({1.5: 1}, ["logit_bias", "integers >= 0"]),
    ({True: 1}, ["logit_bias", "integers >= 0"]),
    ({None: 1}, ["logit_bias", "integers >= 0"]),
    ({"": 1}, ["logit_bias", "integers >= 0"]),
    ({5: 101}, ["logit_bias", "[-100, 100]"]),
    ({5: -101}, ["logit_bias", "[-100, 100]"]),
    ({5: 100.001}, ["logit_bias", "[-100, 100]"]),
    ({5: NAN}, ["logit_bias", "[-100, 100]"]),
    ({5: INF}, ["logit_bias", "[-100, 100]"]),
    ({5: "1"}, ["logit_bias", "[-100, 100]"]),
    ({5: None}, ["logit_bias", "[-100, 100]"]),
    ({5: True}, ["logit_bias", "[-100, 100]"]),
    ([5, 1], ["logit_bias"]),
    ("5", ["logit_bias"]),
    ({1: 1, "x": 2}, ["logit_bias"]),  # one bad entry among good ones
], ids=repr)
def test_invalid_logit_bias_is_refused(bias, expected):
    """Keys must be token ids (ints >= 0, or their decimal strings); values finite numbers in [-100, 100]."""
    with pytest.raises(ValueError) as error:
        SamplingParams(logit_bias=bias)
    for text in expected:
        assert text in str(error.value)


def test_defaults_are_valid():
    """The defaults construct and match the documented OpenAI defaults."""
    params = SamplingParams()
    assert (params.n, params.temperature, params.top_p, params.top_k, params.max_tokens) == (1, 1.0, 1.0, 0, 16)
    assert params.stop == [] and params.stop_token_ids == [] and params.logit_bias is None
    assert not params.greedy


@pytest.mark.parametrize("kwargs, check", [
    ({"temperature": 0}, lambda p: p.greedy),
    ({"temperature": 0.0}, lambda p: p.greedy),
    ({"temperature": 1e-6}, lambda p: not p.greedy),
    ({"temperature": 100}, lambda p: p.temperature == 100),
    ({"top_k": -1}, lambda p: p.top_k == 0),
    ({"top_k": 0}, lambda p: p.top_k == 0),
    ({"top_k": 1}, lambda p: p.top_k == 1),
    ({"top_p": 1}, lambda p: p.top_p == 1),
    ({"top_p": 1e-9}, lambda p: p.top_p == 1e-9),
    ({"min_p": 0}, lambda p: p.min_p == 0),
    ({"min_p": 1}, lambda p: p.min_p == 1),
    ({"repetition_penalty": 1e-3}, lambda p: p.repetition_penalty == 1e-3),
    ({"presence_penalty": 2, "frequency_penalty": -2}, lambda p: (p.presence_penalty, p.frequency_penalty) == (2, -2)),
    ({"stop": "x"}, lambda p: p.stop == ["x"]),
    ({"stop": ("x", "yz")}, lambda p: p.stop == ["x", "yz"]),
    ({"stop": None}, lambda p: p.stop == []),
    ({"stop_token_ids": (3, 0)}, lambda p: p.stop_token_ids == [3, 0]),
    ({"stop_token_ids": None}, lambda p: p.stop_token_ids == []),
    ({"logit_bias": {"5": 1}}, lambda p: p.logit_bias == {5: 1.0} and isinstance(p.logit_bias[5], float)),
    ({"logit_bias": {0: -100, 7: 100}}, lambda p: p.logit_bias == {0: -100.0, 7: 100.0}),
    ({"logit_bias": {}}, lambda p: p.logit_bias == {}),
    ({"logprobs": 0}, lambda p: p.logprobs == 0),
    ({"logprobs": 20}, lambda p: p.logprobs == 20),
    ({"logprobs_mode": "processed"}, lambda p: p.logprobs_mode == "processed"),
    ({"max_tokens": None}, lambda p: p.max_tokens is None),
    ({"max_tokens": None, "min_tokens": 10**6}, lambda p: p.min_tokens == 10**6),
    ({"max_tokens": 1, "min_tokens": 1}, lambda p: p.min_tokens == p.max_tokens == 1),
    ({"seed": 0}, lambda p: p.seed == 0),
    ({"seed": 2**64}, lambda p: p.seed == 2**64),
    ({"timeout": 0.001}, lambda p: p.timeout == 0.001),
    ({"trace": 0}, lambda p: p.trace == 0),
    ({"trace": 100}, lambda p: p.trace == 100),
    ({"n": 3}, lambda p: p.n == 3),
    ({"ignore_eos": True, "skip_special_tokens": False, "include_stop_str_in_output": True},
     lambda p: p.ignore_eos and not p.skip_special_tokens and p.include_stop_str_in_output),
], ids=repr)
def test_valid_edge_values(kwargs, check):
    """Boundary values are accepted and normalised (T=0 greedy, top_k -1 -> 0, stop str -> list...)."""
    assert check(SamplingParams(**kwargs))


def test_stop_lists_are_copied():
    """The params own their lists: changing the caller's list afterwards changes nothing."""
    stop, ids = ["a"], [1]
    params = SamplingParams(stop=stop, stop_token_ids=ids)
    stop.append("b")
    ids.append(2)
    assert params.stop == ["a"] and params.stop_token_ids == [1]
