"""Start: what BERT Studio is, the Prepare-this-machine panel (engine.classroom: `class prepare` as a button, with
what is done, what runs and the time left), the teacher's plan (docs/teaching.md), the guided first class
(studio.start: four steps, each with its time on this machine, a button that opens the page with its fields filled
in, a check mark once done) and the paper's own numbers for Tables 5-8 (engine.paper_tables), visible before
anything has run."""
import streamlit as st

from engine import paper_tables
from studio import measured_tables, start
from studio.common import guard, runs_root

st.title("BERT Studio")
st.markdown("BERT Studio lets you see BERT work end to end on your own machine, offline: pre-train it, fine-tune it, "
            "probe it and look inside it. It also reproduces the paper's ablations (Devlin et al. 2019) at a scale a "
            "laptop can afford, next to the paper's own numbers.")

root = runs_root()
st.header("Your first class")
st.caption(f"Four steps; a check mark appears once the runs folder (`{root}`) shows a step done. "
           "Each button opens the page with its fields filled in.")


@st.cache_resource(show_spinner=False)
def _precision():
    return start.machine_precision()


def prepare_panel(rows: list) -> None:
    """The parts `python -m engine class prepare` builds, their state and the time left; Prepare and Cancel buttons."""
    @st.fragment(run_every=3 if start.preparing(rows) else None)
    def panel():
        now = start.prepare_rows(root)
        lines, summary, details = start.prepare_lines(now)
        st.markdown("  \n".join(lines), help=details or None)
        st.caption(summary)
        b1, b2, _ = st.columns([2, 2, 3])
        if not start.ready(now) and b1.button("Prepare this machine for a class", key="class_prepare",
                                                                  type="primary"):
            with guard("Queuing the preparation"), st.spinner("timing this machine, then queuing …"):
                from engine import classroom
                classroom.prepare(root)
            st.rerun()
        if start.preparing(now) and b2.button("Cancel preparing", key="class_cancel"):
            with guard("Cancelling"), st.spinner("stopping (a run saves a checkpoint first) …"):
                from engine import classroom
                classroom.cancel(root)
            st.rerun()
        if start.preparing(now) != start.preparing(rows):
            st.rerun()  # started or ended: poll or stop polling
    panel()


prepared = []
with guard("Reading what is prepared"):
    prepared = start.prepare_rows(root)
with st.expander("Prepare this machine for a class (the day before)",
                 expanded=not start.ready(prepared)):
    st.caption("One button builds in the background, in this order, what the first class needs here: the classroom "
               "run's vocabulary and pre-training data (so the class's own run starts at once), a finished classroom "
               "run as a reference, the probe-ready model, and, when this machine is online, Google's "
               "bert-base-uncased in the Hugging Face cache (offline it is skipped: the class needs it not). It goes on "
               "with the tab closed; pressing it again skips what is done and continues what stopped.")
    if prepared:
        prepare_panel(prepared)
if start.TEACHING.is_file():
    with st.expander("The teacher's plan for a 50-minute class (docs/teaching.md)"):
        st.markdown(start.TEACHING.read_text(encoding="utf-8"))

steps = []
with guard("Reading the runs folder"):
    precision, device = _precision()
    steps = start.guided_steps(root, {"model": st.session_state.get("class_visited_model", False),
                                      "probed": st.session_state.get("class_probed", False)}, precision, device)
for s in steps:
    with st.container(border=True):
        c1, c2, c3 = st.columns([0.5, 6, 2])
        c1.markdown(f"### {'✅' if s.done else s.number}")
        c2.markdown(f"**{s.number}. {s.title}** · {s.time}", help=s.time_help or None)
        c2.caption(s.what)
        if s.status:
            c2.markdown(f"_{s.status}_")
        buttons = [(s.button, s.prefill, f"start_step_{s.number}")]
        if s.alt:
            buttons.append((s.alt[0], s.alt[1], f"start_step_{s.number}_alt"))
        for label, prefill, key in buttons:
            if c3.button(label, key=key, type="primary" if not s.done else "secondary"):
                for k, v in prefill.items():
                    st.session_state[k] = v
                st.switch_page(s.page)

title, plan = start.second_class_text()
with st.expander(title):
    st.markdown(plan)
    if st.button("Set up the NSP-vs-SOP study", key="start_second_class"):
        st.session_state.update(abl_study=start.SECOND_CLASS, abl_scale="classroom", abl_tab="New study")
        st.switch_page("pages/7_Ablations.py")

st.header("What the paper found")
st.caption("The paper's numbers for its four ablation tables (BERT-BASE pre-trained for 1M steps on 3.3B words). The "
           "Ablations page runs the same studies at classroom scale and says which findings reproduce.")
tabs = st.tabs([t.title.split(":")[0] for t in paper_tables.PAPER_TABLES.values()])
studies = start.table5_studies(root)
for tab, (name, t) in zip(tabs, paper_tables.PAPER_TABLES.items()):
    with tab:
        st.markdown(f"**{t.title}**")
        st.dataframe(paper_tables.frame(name), hide_index=True, width="stretch")
        st.caption(t.note)
        if name == start.TABLE5 and studies:  # step 4's study, beside the paper's numbers
            from engine import ablations
            d, n_done, n = studies[0]
            with guard("Reading your Table 5 study"):
                res = ablations.collect_results(d)
                st.markdown(f"**Your classroom Table 5** (`{d.name}`, {n_done} of {n} jobs finished; dev scores in %)")
                st.dataframe(res.table, width="stretch")
        else:  # until then, ours as measured
            measured_tables.show(name)
