"""tests/e2e/order.py (SLUICE_TEST_ORDER) moves test files as wholes: reverse and seeded random
orders keep every test once, each file's tests together and in their own order, and a seed gives
the same order again; a bad value names what is accepted. tests/e2e/stack.py's free_port() hands
out ports from SLUICE_TEST_PORTS only, each once per round. No process is started."""

import types
from pathlib import Path

import pytest

import order
import stack


def items(*spec):
    """Fake collected items: `("a.py", "t1")` -> an object with .path and .name."""
    return [types.SimpleNamespace(path=Path(f"/t/{file}"), name=name) for file, name in spec]


COLLECTED = items(("a.py", "a1"), ("a.py", "a2[x]"), ("a.py", "a2[y]"), ("b.py", "b1"),
                  ("c.py", "c1"), ("c.py", "c2"), ("d.py", "d1"))


def names(found):
    return [item.name for item in found]


def test_reverse_moves_files_and_keeps_each_files_order():
    assert names(order.reordered(COLLECTED, "reverse", None)) == \
        ["d1", "c1", "c2", "b1", "a1", "a2[x]", "a2[y]"]


def test_forward_is_as_collected():
    assert order.reordered(COLLECTED, "forward", None) == COLLECTED


@pytest.mark.parametrize("seed", [1, 2, 3, 1234])
def test_random_keeps_every_test_once_with_its_file_together(seed):
    shuffled = order.reordered(COLLECTED, "random", seed)
    assert sorted(names(shuffled)) == sorted(names(COLLECTED))
    files = [item.path.name for item in shuffled]
    # each file's tests are one run, in their collected order
    runs = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    assert len(runs) == len(set(runs)) == 4
    for file in set(files):
        assert [i.name for i in shuffled if i.path.name == file] == \
            [i.name for i in COLLECTED if i.path.name == file]
    assert order.reordered(COLLECTED, "random", seed) == shuffled  # the seed repeats it


def test_some_seed_changes_the_order():
    orders = {tuple(names(order.reordered(COLLECTED, "random", seed))) for seed in range(20)}
    assert len(orders) > 1


@pytest.mark.parametrize("value,expected", [(None, ("forward", None)), ("forward", ("forward", None)),
                                            ("reverse", ("reverse", None)), ("random:42", ("random", 42))])
def test_parse(value, expected):
    assert order.parse(value) == expected


def test_parse_random_draws_a_seed():
    kind, seed = order.parse("random")
    assert kind == "random" and seed > 0


@pytest.mark.parametrize("value", ["backwards", "random:x", "random:"])
def test_parse_refuses_naming_the_choices(value):
    with pytest.raises(pytest.UsageError, match="forward, reverse, random or random:SEED"):
        order.parse(value)


def test_free_port_stays_in_its_range_and_repeats_no_port_within_a_round(monkeypatch):
    monkeypatch.setattr(stack, "_PORT_LOW", 29000)
    monkeypatch.setattr(stack, "_PORT_HIGH", 29049)
    monkeypatch.setattr(stack, "_port_order", [])
    monkeypatch.setattr(stack, "_issued_ports", set())
    handed = [stack.free_port() for _ in range(40)]
    assert all(29000 <= port <= 29049 for port in handed)
    assert len(set(handed)) == len(handed)
