"""The Ablations page's two groups of built-in studies (engine.ablations.GROUPS): the paper's own, "BERT, 2018", and
the family's, "after BERT" (engine/ablations/family.py): each study's label in the study picker, and the family's
studies listed with their papers' tables where no study has been run yet. A family study without a measured classroom
run (engine/measured.py STUDIES): the page says so and gives the command that estimates one here."""
import streamlit as st

from engine import ablations as A
from engine import paper_tables


def group_of(name: str) -> str:
    """The group a built-in study is listed under."""
    return next((g for g, names in A.GROUPS.items() if name in names), "")


def ordered_names() -> list:
    """Every built-in study, group by group (the paper's first)."""
    return [n for names in A.GROUPS.values() for n in names]


def label(name: str) -> str:
    """The study picker's line: its group, title and name."""
    return f"{group_of(name)} · {A.STUDIES[name]().title}  ({name})"


def never_run_note(name: str) -> None:
    """For a study with no measured classroom run (the family's): say so, and how to estimate its time here."""
    if name in A.REFERENCE_MINUTES:
        return
    st.caption(f"Not yet run on our machines: no measured table or verdicts. `python -m engine ablate estimate {name} "
               "--classroom` estimates its time here from its FLOPs and Table 5's measured evaluations; its BERT and "
               "MLM-only rows, where it has them, are Table 5's and are taken over from a finished or queued Table 5.")


def family_overview() -> None:
    """The family's studies, "after BERT": each with its paper's finding and table (where transcribed), and a note
    that none has been run here yet (shown where the runs folder holds no study)."""
    group = A.family.FAMILY_GROUP
    st.subheader(f"{group[:1].upper()}{group[1:]}: what the family changed, and why")
    for name in A.GROUPS[A.family.FAMILY_GROUP]:
        study = A.STUDIES[name]()
        with st.expander(f"{study.title}  ({name})"):
            st.markdown(f"{study.description}\n\n**The paper's finding:** {study.finding}")
            t = paper_tables.table(name)
            if t is not None:
                st.markdown(f"**{t.title}**")
                st.dataframe(paper_tables.frame(name), hide_index=True, width="stretch")
                st.caption(t.note)
            never_run_note(name)
