"""Column-name checks on the second data set name it: a warning or error about ``Y``
said ``X`` (scikit-learn's message), although ``X`` was right."""

import warnings

import numpy as np
import pytest

from kernelkit.features import SDERF

pd = pytest.importorskip("pandas")


def _fitted():
    rng = np.random.default_rng(0)
    dfX = pd.DataFrame(rng.standard_normal((10, 3)), columns=list("abc"))
    return SDERF(4, random_state=0).fit(dfX), dfX, rng


def test_unnamed_y_warning_names_y():
    m, dfX, rng = _fitted()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        m.approx_kernel(dfX, rng.standard_normal((5, 3)))
    msgs = [str(w.message) for w in seen if "feature names" in str(w.message)]
    assert msgs and all(msg.startswith("Y does not have valid feature names") for msg in msgs)
    assert all(w.filename == __file__ for w in seen if "feature names" in str(w.message))


def test_misnamed_y_error_names_y():
    m, dfX, _ = _fitted()
    with pytest.raises(ValueError, match=r"^Y: The feature names should match"):
        m.approx_kernel(dfX, dfX.rename(columns={"a": "q"}))
    with pytest.raises(ValueError, match=r"^The feature names should match"):  # X: as is
        m.transform(dfX.rename(columns={"a": "q"}))


def test_y_check_leaves_the_warning_filters_alone():
    m, _, rng = _fitted()
    Y = rng.standard_normal((5, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = list(warnings.filters)
        m.transform_y(Y)  # ignored, and the filters are as they were
        assert warnings.filters == before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match=r"^Y does not have valid feature names"):
            m.transform_y(Y)


def test_ctx_invoke_of_report_gets_a_path():
    import click

    from kernelkit.cli import report

    with click.Context(report) as ctx:
        seen = {}
        real = report.callback

        def capture(out):
            seen["out"] = out

        report.callback = capture
        try:
            ctx.invoke(report)
        finally:
            report.callback = real
    from pathlib import Path

    assert seen["out"] == Path("results")
