"""Session hooks shared by the tests."""


def pytest_sessionfinish(session, exitstatus):
    import sys

    support = sys.modules.get("serve_support")     # only when a serving test ran
    if support is not None:
        support.FIGURES.write()
