"""A pytest plugin for the Envoy version matrix (tests/matrix/run.py): when SLUICE_MATRIX_RESULTS
names a file, each test's outcome is appended to it as one JSON line, with whether the test loads
the sluice filter (a filter test, counted under the pass's build) or only Envoy's own ratelimit
filter (an RLS test). The matrix builds the README's compatibility table from these lines only."""

import json
import os

import builds
import stack


class MatrixReport:
    def __init__(self, path):
        self.path = path
        self.outcomes = {}

    def pytest_runtest_logreport(self, report):
        item_outcome = self.outcomes.get(report.nodeid)
        if report.when == "call" or report.outcome != "passed":
            # A failed setup or teardown is a failure; a skip in setup is a skip; the call decides
            # the rest. The worst outcome of a test's phases is kept.
            rank = {"passed": 0, "skipped": 1, "failed": 2}
            if item_outcome is None or rank[report.outcome] > rank[item_outcome[0]]:
                reason = ""
                if report.skipped and isinstance(report.longrepr, tuple):
                    reason = report.longrepr[2]
                self.outcomes[report.nodeid] = (report.outcome, reason)

    @staticmethod
    def _filter_test(item):
        return bool(item.stash.get(builds.FILTER_TEST, True))

    def pytest_collection_finish(self, session):
        self.kinds = {item.nodeid: self._filter_test(item) for item in session.items}

    def pytest_sessionfinish(self, session):
        with open(self.path, "a") as out:
            for nodeid, (outcome, reason) in self.outcomes.items():
                out.write(json.dumps({
                    "envoy": stack.ENVOY, "build": stack.FILTER_BUILD, "test": nodeid,
                    "kind": "filter" if self.kinds.get(nodeid, True) else "rls",
                    "outcome": outcome, "reason": reason,
                }) + "\n")


def register(config):
    path = os.environ.get("SLUICE_MATRIX_RESULTS")
    if path:
        config.pluginmanager.register(MatrixReport(path), "sluice-matrix-report")
