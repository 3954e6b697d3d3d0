"""Compare: any runs' curves on one chart (studio.compare holds the logic): steps, tokens seen or wall time on
the x axis, debiased EMA smoothing over the faint raw curve, runs grouped by variant with a mean line and a
seed band, the settings that differ, and one CSV of every selected run's metrics."""
import streamlit as st

from engine.trackers import open_commands
from studio import compare as C
from studio.common import chart_config, guard, runs_root

st.title("Compare runs")
st.caption("Pick any runs (pre-training, fine-tuning, a study's variants) and see one metric of all of them on one chart.")

root = runs_root()
with st.expander("Open these runs in TensorBoard or MLflow"):
    st.caption("Runs started with `--report-to tensorboard,mlflow` write there too (`pip install -r requirements-trackers.txt`).")
    st.code("\n".join(open_commands(root)), language="bash")
entries = C.find_runs(root)
if not entries:
    st.info(f"No runs under `{root}` yet. Pre-train one (Pre-train page) or run a study (Ablations page), then compare here.")
    st.stop()
by_label = {e.label: e for e in entries}
labels = list(by_label)
wanted = [x for x in st.session_state.get("compare_preselect", []) if x in by_label]
if wanted and "compare_runs" not in st.session_state:
    st.session_state["compare_runs"] = wanted
chosen = st.multiselect("Runs", labels, default=None if "compare_runs" in st.session_state else labels[: min(4, len(labels))],
                        key="compare_runs")
if not chosen:
    st.info("Pick at least one run.")
    st.stop()
sel = [by_label[x] for x in chosen]
df = C.metrics_frame(sel)
metrics = C.numeric_metrics(df)
if not metrics:
    st.info("The selected runs have no metrics yet (a run writes its first record after a few steps).")
    st.stop()

c1, c2, c3, c4 = st.columns([2, 2, 2, 1.4])
metric = c1.selectbox("Metric", metrics, key="compare_metric", format_func=C.metric_label)
x = c2.radio("x axis", list(C.CURVE_X), format_func=C.CURVE_X.get, horizontal=True, key="compare_x")
weight = c3.slider("Smoothing", 0.0, 0.99, 0.6, 0.01, key="compare_smooth",
                   help="debiased exponential moving average (as TensorBoard); 0 = the raw curve")
grouped = c4.checkbox("Group by variant", value=any(sum(e.group == g.group for e in sel) > 1 for g in sel), key="compare_group",
                      help="runs of the same variant (seeds) as one mean line with a band from the lowest to the highest run")

with guard("Drawing the comparison"):
    cv = C.curves(df, metric, x, weight)
    missing = [e.label for e in sel if e.label not in cv]
    if missing:
        st.caption(f"Not drawn (no {C.metric_label(metric)} against {C.CURVE_X[x]}): " + ", ".join(missing))
    if cv:
        st.plotly_chart(C.comparison_figure(cv, metric, x, grouped), config=chart_config(f"compare-{metric}"), key="compare_fig")

st.subheader("Settings that differ")
diff = C.differing_settings(sel)
if diff.shape[1] <= 2:
    st.caption("The selected runs have the same settings.")
st.dataframe(diff, hide_index=True, width="stretch")
st.download_button(f"Download the metrics of the {len(sel)} selected run(s) as CSV", df.to_csv(index=False),
                   file_name="compare-metrics.csv", mime="text/csv", on_click="ignore", key="compare_csv")
