"""SLUICE_TEST_ORDER: run the test files of a pytest suite in another order, to show that no test
depends on the state another left (issue 38). `forward` (the default: as collected), `reverse`,
or `random` / `random:SEED` (the seed is printed in the header, so a failing order can be run
again). Files move as wholes: the tests of one file keep their order, so their module fixtures
(and pytest's grouping of parametrized ones) stay as they are. Registered by tests/e2e and
tests/reliability conftests:

    SLUICE_TEST_ORDER=reverse .venv/bin/pytest tests/reliability
    SLUICE_TEST_ORDER=random:1234 .venv/bin/pytest tests/e2e
"""

import os
import random

import pytest


def parse(spec):
    """(kind, seed) from a SLUICE_TEST_ORDER value; a bad value names what is accepted."""
    spec = (spec or "forward").strip()
    if spec in ("forward", "reverse"):
        return spec, None
    if spec == "random":
        return "random", random.SystemRandom().randrange(1, 1 << 31)
    if spec.startswith("random:"):
        try:
            return "random", int(spec.split(":", 1)[1])
        except ValueError:
            pass
    raise pytest.UsageError(f"SLUICE_TEST_ORDER={spec!r}: expected forward, reverse, random or random:SEED")


def by_file(items):
    """The items grouped by file, files in their first appearance's order, each file's items in
    their own order."""
    groups = {}
    for item in items:
        groups.setdefault(str(item.path), []).append(item)
    return list(groups.values())


def reordered(items, kind, seed):
    files = by_file(items)
    if kind == "reverse":
        files.reverse()
    elif kind == "random":
        random.Random(seed).shuffle(files)
    return [item for group in files for item in group]


class FileOrder:
    """The plugin: reorders after every other collection hook (pytest's own fixture grouping and
    the native-pass skips run first)."""

    def __init__(self, spec):
        self.kind, self.seed = parse(spec)

    def line(self):
        seed = f" (SLUICE_TEST_ORDER=random:{self.seed} runs it again)" if self.kind == "random" else ""
        return f"sluice: test files in {self.kind} order{seed}"

    def pytest_collection_finish(self, session):
        # Written even under -q (which hides report headers): a failing order must be repeatable.
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if self.kind != "forward" and reporter is not None:
            reporter.write_line(self.line())

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if self.kind != "forward":
            items[:] = reordered(items, self.kind, self.seed)


def register(config):
    config.pluginmanager.register(FileOrder(os.environ.get("SLUICE_TEST_ORDER")), "sluice-test-order")
