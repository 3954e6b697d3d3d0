"""The Ablations page's study as one (engine.ablations.control): its state in words over a progress bar, and the
Cancel and Resume buttons that act on all its jobs at once (`show`); what a button did is said on the next run."""
import streamlit as st

from engine import ablations as A
from engine.status import FINISHED

NOTE = "abl_control_note"  # session state: (kind, text) of what the last Cancel or Resume did


def state_text(res) -> str:
    """The progress bar's text: the study's state in words (engine.ablations.control.study_state), with how many
    jobs are done when the words do not say it, and how many were reused from finished runs."""
    pr = res.progress
    state = A.study_state(res.jobs)
    done = f"{pr.get(FINISHED.name, 0)} of {pr['total']} done"
    text = state if done in state else f"{state} ({done})"
    return text + (f"; {pr['reused']} job(s) reused from finished runs" if pr.get("reused") else "")


def _act(what: str, study_dir) -> None:
    """A button's callback: cancel or resume the whole study; its lines (or its one-line error) kept for the next run."""
    lines = []
    try:
        if what == "cancel":
            A.cancel_study(study_dir, log=lines.append)
        else:
            A.resume_study(study_dir, log=lines.append)
        st.session_state[NOTE] = ("success", "  \n".join(lines))  # one line each
    except Exception as e:  # EngineError: one line naming the problem and the fix
        st.session_state[NOTE] = ("error", f"could not {what} the study: {e}")


def show(study_dir, res) -> None:
    """The state over a progress bar, then Cancel (while any job of the study is queued or running) and Resume (when
    none is and some are unfinished): each acts on every job of the study."""
    pr = res.progress
    st.progress(pr.get(FINISHED.name, 0) / pr["total"] if pr["total"] else 0.0, text=state_text(res))
    note = st.session_state.pop(NOTE, None)
    if note:
        getattr(st, note[0])(note[1])
    active = A.is_active(study_dir)
    unfinished = pr.get(FINISHED.name, 0) < pr["total"]
    c1, c2, _ = st.columns([1, 1, 1])
    c1.button("Cancel the study", key="abl_cancel", disabled=not active, on_click=_act, args=("cancel", study_dir),
              help="cancel every queued or running job of this study; a running pre-training saves its checkpoint first")
    c2.button("Resume the study", key="abl_resume", disabled=active or not unfinished, on_click=_act,
              args=("resume", study_dir),
              help="queue its unfinished jobs again, each after the pre-training it reads (which continues from its checkpoint)")
