"""The GPU tests run on a lent machine under a time limit: a failure's report is printed as soon as the test ends,
so a run cut by the limit still says why the tests before the cut failed."""

import sys


def pytest_runtest_logreport(report):
    if report.failed:
        sys.stdout.write(f"\n--- {report.nodeid} ({report.when}) failed:\n{report.longreprtext[-3000:]}\n")
        sys.stdout.flush()
