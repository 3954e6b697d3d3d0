"""The Jobs and Compare pages (AppTest) print the commands that open the runs folder's runs in TensorBoard and MLflow
(the runs that `--report-to tensorboard,mlflow` sent there): its folder as TensorBoard's logdir, its mlflow.db as
MLflow's store, or $MLFLOW_TRACKING_URI when set."""
import shlex
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow  # AppTest runs whole pages

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", ["8_Jobs.py", "9_Compare.py"])
def test_the_page_prints_the_tracker_commands_of_its_runs_folder(page, tmp_path, monkeypatch):
    root = tmp_path / "my runs"
    root.mkdir()
    for uri, store in ((None, f"sqlite:///{root}/mlflow.db"), ("http://tracking.example:5000", "http://tracking.example:5000")):
        if uri:
            monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        else:
            monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
        at = AppTest.from_file(str(REPO / "pages" / page), default_timeout=60)
        at.session_state["runs_root"] = str(root)
        at.run()
        assert not at.exception, at.exception
        commands = [f"tensorboard --logdir {shlex.quote(str(root))}", f"mlflow ui --backend-store-uri {shlex.quote(store)}"]
        shown = [c.value for c in at.code] + [c.value for c in at.caption]
        assert "\n".join(commands) in shown or any(all(f"`{c}`" in text for c in commands) for text in shown)
