"""The session-start check of requirements.txt (tests/conftest.py): a pinned package that is not installed stops the
suite with one line naming it and the fix, instead of the tests that need it skipping."""
from pathlib import Path

import pytest

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements.txt"


def test_every_pinned_package_is_installed_here(pinned):
    assert pinned.missing(REQUIREMENTS) == []


def test_a_missing_pinned_package_stops_the_session_with_one_line(pinned, tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("# a comment\npytest==9.0.3\n\nno-such-package-for-bert-studio==1.0  # why it is pinned\n"
                   "another-missing-package==0.1\n", encoding="utf-8")
    assert pinned.missing(req) == ["no-such-package-for-bert-studio", "another-missing-package"]
    with pytest.raises(pytest.exit.Exception) as e:
        pinned.check(req)
    assert e.value.returncode == pytest.ExitCode.USAGE_ERROR
    msg = str(e.value.msg)
    assert "\n" not in msg and msg.startswith("no-such-package-for-bert-studio, another-missing-package are not installed")
    assert "pip install -r requirements.txt" in msg
    req.write_text("pytest==9.0.3\n", encoding="utf-8")
    pinned.check(req)  # nothing missing: the session goes on


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_missing_outside_resource_fails_under_ci_and_skips_elsewhere(missing_resource, monkeypatch, ci):
    """../shared/data and Chromium are provided by .ci/run: under CI=true their absence fails the test (a CI that lost
    them must not pass by skipping); on a developer's machine the test skips with the install line."""
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected) as e:
        missing_resource("Chromium is not installed at /usr/bin/chromium; install it with `apt-get install -y chromium`")
    assert "apt-get install -y chromium" in str(e.value)
