"""A classroom study's results as we measured them (engine/measured.py), as tables a page shows beside the
paper's numbers (the Start page's paper tables) and beside the user's own study of that table, finished or not (the
Ablations page), labelled with the machine and the date: `show`."""
import pandas as pd

from engine import measured


def measured_frames(study_key: str):
    """(results table or None, findings table, caption, where: '<machine>, <date>') of a classroom study as measured,
    or None for a study the table has no findings of."""
    m = measured.study(study_key)
    if m is None or not m.findings:
        return None
    table = pd.DataFrame(m.table).T if m.table else None
    findings = pd.DataFrame([{"finding of the paper": f.finding, "ours [95%]": f.ours, "verdict": f.verdict}
                             for f in m.findings])
    starts = f"{m.seeds} pre-training start{'s' if m.seeds != 1 else ''}"
    caption = (f"Measured at classroom scale on {m.minutes.where}: {starts}, dev scores in % "
               f"(`{m.results_command or m.minutes.command}`; one start takes {m.minutes.text()}). "
               "Your own study of this table is shown beside it on the Ablations page, never in its place.")
    return table, findings, caption, m.minutes.where


def show(study_key: str) -> bool:
    """Draw the study as measured (a heading, the results table, the verdicts, where and when) on the page; False
    when the table holds nothing for it."""
    import streamlit as st
    ours = measured_frames(study_key)
    if ours is None:
        return False
    table, findings, caption, where = ours
    st.markdown(f"**At classroom scale, as we measured it** ({where})")
    # st.table reads row labels as markdown: "+ BiLSTM" would be a list item ("• BiLSTM"), so a leading mark is escaped
    plain = lambda r: "\\" + r if str(r)[:1] in "+-*#>" else r  # noqa: E731
    if table is not None:
        st.table(table.rename(index=plain))
    st.table(findings.set_index("finding of the paper").rename(index=plain))
    st.caption(caption)
    return True
