"""Ablations: launch one of the paper's ablation studies (Tables 5-8, Figure 5) or of the family's after BERT
(RoBERTa, ALBERT, SpanBERT, ELECTRA, the masking rate: studio/study_groups.py) as queued jobs, and watch its
dashboard fill in: the study's state in words with Cancel and Resume for all its jobs at once, the results table in
the paper's layout (mean ± std over seeds x restarts) beside the table as we measured it (machine and date), bar
charts, the pre-training curves of all variants, and the paper's finding with whether it reproduced. CSV download."""
from dataclasses import replace

import pandas as pd
import streamlit as st

from engine import ablations as A
from engine import paper_tables
from engine.commands import PRETRAIN, kind_of
from engine.status import FAILED, status_of
from studio import ablation_figures as F
from studio import measured_tables, study_controls, study_groups
from studio.common import chart_config, guard, runs_root

st.title("Ablation studies")
st.caption("An ablation study is a base configuration plus named variants. Each variant is pre-trained and evaluated "
           "downstream over several seeds; the runs are queued one at a time and survive a reload.")

root = runs_root()
tab_results, tab_new = st.tabs(["Results", "New study"], key="abl_tab", on_change="rerun")  # the Start page opens New study


def variants_frame(study: A.Study) -> pd.DataFrame:
    return pd.DataFrame([{"variant": v.name, "override of the base": v.change() or "(the base)", "note": v.note}
                         for v in study.variants])


def paper_numbers(study_name: str, measured: bool = True) -> None:
    """The paper's own table for this study (engine.paper_tables), in an expander, with ours as measured unless
    `measured` is False (the dashboard shows ours in the open); nothing for a study it lacks."""
    t = paper_tables.table(study_name)  # the 2018 paper's, or a family paper's
    if t is None:
        return
    with st.expander(f"The paper's numbers: {t.title}"):
        st.dataframe(paper_tables.frame(study_name), hide_index=True, width="stretch")
        st.caption(t.note)
        if measured:
            measured_tables.show(study_name)


def base_frame(study: A.Study) -> pd.DataFrame:
    if study.model:
        return pd.DataFrame([{"setting": "model", "value": f"{study.model} (evaluated as is, no pre-training)"}])
    b = study.base
    rows = [("corpus", b.corpus), ("preset", b.preset), ("layers / hidden / heads", f"{b.layers or '-'} / {b.hidden or '-'} / {b.heads or '-'}"),
            ("objective", b.objective), ("steps", b.steps), ("batch size", b.batch_size), ("sequence length", b.seq_len),
            ("mask rate", b.mask_rate), ("mask ratios (MASK, RANDOM, SAME)", ", ".join(str(x) for x in b.mask_ratios))]
    f = study.finetune
    rows += [("fine-tune lr", ", ".join(str(x) for x in f.lr)), ("fine-tune batch", ", ".join(str(x) for x in f.batch_size)),
             ("fine-tune epochs", ", ".join(str(x) for x in f.epochs)), ("fine-tune max train", f.max_train or "all")]
    if any(v.features for v in study.variants) or any(e.features for e in study.evaluations):
        rows.append(("feature classifier epochs", A.feature_epochs(study)))
    return pd.DataFrame([{"setting": k, "value": str(v)} for k, v in rows])


def time_estimate(study: A.Study, root) -> None:
    """How long this classroom study should take here: a speed check (seconds, once per session) against the machine
    its reference time was measured on (engine.ablations.timing)."""
    check = st.session_state.get("abl_speed_check")
    if check is None:
        ref = A.REFERENCE_MINUTES.get(study.name)
        if ref is not None:
            st.caption(f"This study took {ref.minutes:g} min at its classroom defaults on {ref.machine}, {ref.date}; a "
                       "CPU without bf16 units trains in fp32 and takes several times longer.")
        if st.button("Estimate the time on this machine (a speed check of a few seconds)", key="abl_speed"):
            with guard("timing this machine"), st.spinner("timing the classroom model's steps …"):
                st.session_state["abl_speed_check"] = check = A.fastest_check()
    if check is not None:
        est = A.estimate(study, check, runs_root=root)
        (st.warning if est.get("over_hour") else st.info)(f"**Time:** {est['text']}.")
        st.caption(f"Speed check: {A.describe_check(check)}. Idle machine assumed: on a 2-core machine this browser "
                   "competes with the check, so `python -m engine ablate estimate` in a terminal reads it more exactly "
                   "(engine/ablations/timing.py says what else the estimate cannot see).")


def first_value(key: str, value):
    """Give the keyed widget `key` its first value through session state, not its `value` argument, so that a lesson
    can set it as well (a widget given both warns) and the user's choice is kept for the session."""
    st.session_state.setdefault(key, value)
    return key


def set_up_lesson(key: str) -> None:
    """Fill the New-study form below with a lesson's study and settings (a button's callback: it runs before the
    widgets are drawn, so they show the lesson's values)."""
    lesson = A.get_lesson(key)
    study = lesson.build()
    ss, where = st.session_state, f"{lesson.study}_classroom"
    ss["abl_study"], ss["abl_scale"] = lesson.study, "classroom"
    ss[f"abl_seeds_{where}"] = len(study.seeds)
    ss[f"abl_steps_{where}"] = study.base.steps
    ss[f"abl_epochs_{where}"] = max(study.finetune.epochs)
    ss[f"abl_evals_{where}"] = [e.name for e in study.evaluations]
    ss[f"abl_name_{lesson.study}"] = lesson.name
    if not study.checkpoint_steps:
        ss[f"abl_budget_{where}"] = study.budget
    ss["abl_lesson_set"] = key


def lesson_picker() -> None:
    """Start from a lesson (engine/ablations/lessons.py): what it showed when measured, what it took, its command; a
    button fills the form below with it, the Launch button launches it."""
    with st.expander("Start from a lesson: a classroom study with the settings measured to show something", expanded=True):
        keys = [lesson.key for lesson in A.LESSONS]
        key = st.selectbox("Lesson", keys, key="abl_lesson", format_func=lambda k: A.get_lesson(k).title)
        lesson = A.get_lesson(key)
        after = (f"  \n**Run it after** the lesson \"{A.get_lesson(lesson.after).title}\", in the same runs folder: its "
                 "finished runs are taken over, which is what keeps this one short." if lesson.after else "")
        st.markdown(f"**What it showed when we measured it:** {lesson.shows}  \n**It took:** {lesson.cost}.{after}")
        st.code(lesson.command(), language="bash")
        st.button("Set up this lesson below", key="abl_lesson_setup", on_click=set_up_lesson, args=(key,))
        if st.session_state.get("abl_lesson_set") == key:
            st.success("The form below holds this lesson's study and settings: check the time estimate, then **Launch**. "
                       "The verdicts of your run are your machine's; the text above is ours.")


# ------------------------------------------------------------------ new study
with tab_new:
    lesson_picker()
    names = study_groups.ordered_names()  # the paper's ("BERT, 2018"), then the family's ("after BERT")
    name = st.selectbox("Study", names, key="abl_study", format_func=study_groups.label)
    scales = list(A.SCALES) + ["paper"]
    scale = st.radio("Scale", scales, key="abl_scale", horizontal=False,
                     format_func=lambda k: f"{A.SCALES[k].label.capitalize()} ({A.SCALES[k].about})" if k in A.SCALES
                     else "As defined (small models, three seeds, a fine-tuning grid; RTE and CoLA when ../shared/data is there)")
    study = None
    with guard("building the study"):
        study = A.get_study(name, scale=scale)
    if study is not None:
        st.markdown(f"**{study.title}.** {study.description}")
        st.info(f"**The paper's finding:** {study.finding}")
        paper_numbers(study.name)
        study_groups.never_run_note(study.name)
        c1, c2 = st.columns([1, 2])
        c1.markdown("**Base configuration**")
        base_table = c1.empty()  # filled below, once the choices (steps, epochs) are made: it shows what will run
        c2.markdown("**Variants**")
        c2.dataframe(variants_frame(study), hide_index=True, width="stretch")
        o1, o2, o3 = st.columns(3)
        # keyed per study and scale: a keyed widget keeps its value, so one key would carry the classroom's seeds
        # and steps over to the lab scale
        seeds = o1.number_input("Seeds", min_value=1, max_value=10, key=first_value(f"abl_seeds_{name}_{scale}", len(study.seeds)),
                                help="a study that pre-trains pre-trains each row once per seed and fine-tunes each of those models "
                                     "with the study's restarts; its verdicts draw seeds first, then their restarts, so two or "
                                     "more seeds put the spread between pre-training runs into the interval (a study of a "
                                     "fixed model: fine-tuning seeds)")
        all_evals = list(A.available_evaluations()) if not study.model else list(study.evaluations)
        for e in study.evaluations:
            if e not in all_evals:
                all_evals.append(e)
        chosen = o2.multiselect("Downstream evaluations", [e.name for e in all_evals],  # per study: its own tasks
                                key=first_value(f"abl_evals_{name}_{scale}", [e.name for e in study.evaluations]))
        steps = None
        if not study.model:
            steps = o3.number_input("Pre-training steps per variant", min_value=10, max_value=1_000_000, step=100,
                                    key=first_value(f"abl_steps_{name}_{scale}", study.base.steps))
        e1, e2 = st.columns(2)
        parallel = int(e2.number_input("Jobs at once", min_value=1, max_value=16, value=1, key=f"abl_parallel_{scale}",
                                       help=A.PARALLEL_HELP))
        reuse = e2.checkbox("Reuse finished runs", value=True, key="abl_reuse", help=A.REUSE_HELP)
        default_epochs = max(study.finetune.epochs)
        epochs = e1.number_input("Downstream epochs (the fine-tuning and the feature classifier alike)", min_value=1,
                                 max_value=100, key=first_value(f"abl_epochs_{name}_{scale}", default_epochs),
                                 help="more epochs let each evaluation reach its plateau; each costs time in every row "
                                      "(BENCHMARKS.md: the classroom Table 8 at 7 epochs)")
        budget, minutes = study.budget, None
        if not study.model and not study.checkpoint_steps:
            b1, b2 = st.columns(2)
            budget = b1.selectbox("Compare the variants at equal", ["steps", "flops", "time"],
                                  key=first_value(f"abl_budget_{name}_{scale}", study.budget),
                                  format_func={"steps": "steps (the paper's protocol)", "flops": "FLOPs (steps per variant "
                                               "from its cost per step)", "time": "training time (minutes per run)"}.get)
            if budget == "time":
                minutes = b2.number_input("Training minutes per pre-training run", min_value=0.5, max_value=600.0,
                                          value=5.0, step=0.5, key="abl_budget_minutes")
        evals = tuple(e for e in all_evals if e.name in chosen)
        study = replace(study, seeds=tuple(range(int(seeds))), evaluations=evals or study.evaluations, budget=budget,
                        budget_minutes=float(minutes) if minutes is not None else None)
        if int(epochs) != default_epochs:
            study = A.with_epochs(study, int(epochs))
        if steps is not None and steps != study.base.steps:
            study = A.with_steps(study, int(steps))
        base_table.dataframe(base_frame(study), hide_index=True, width="stretch")
        if scale == "classroom":
            time_estimate(study, root)
        elif scale == "lab":
            st.caption(A.LAB_PARALLEL_HINT.format(name=study.name))
        jobs = A.plan(study, root / "studies" / "<name>")
        n_pre = sum(kind_of(j.kind) is PRETRAIN for j in jobs)
        at_once = "run one at a time" if parallel == 1 else f"run {parallel} at a time, each fine-tune after its model"
        st.write(f"**{len(jobs)} jobs**: {n_pre} pre-training runs and {len(jobs) - n_pre} downstream evaluations, {at_once}.")
        with st.expander("Job commands"):
            st.code("\n".join("python -m engine " + " ".join(j.argv) for j in jobs), language="bash")
        run_name = st.text_input("Study name", key=first_value(f"abl_name_{name}", study.name),  # per study: a keyed widget keeps its first value
                                 help="its folder under <runs>/studies/; an existing name gets -2, -3, …")
        if st.button("Launch", type="primary", key="abl_launch"):
            with guard("launching the study"):
                d = A.launch(study, runs_root=root, name=run_name.strip() or None, log=lambda *a: None,
                             parallel=parallel, reuse=reuse)
                st.session_state["abl_show"] = d.name
                taken = sum(1 for j in A.read_study(d)["jobs"] if j.get("reused_from"))
                how = f"{len(jobs) - taken} jobs" if parallel == 1 else f"one job that runs its {len(jobs)} jobs {parallel} at a time"
                st.success(f"Queued {how} as study **{d.name}**" + (f" ({taken} job(s) reused from finished runs)" if taken else "")
                           + "; follow them on the Jobs page or in Results.")

# ------------------------------------------------------------------ results
with tab_results:
    studies = []
    with guard("listing studies"):
        studies = A.list_studies(root)
    if not studies:
        st.info(f"No studies yet under {root / 'studies'}. Launch one in the **New study** tab.")
        for key in A.STUDIES:
            if measured_tables.measured_frames(key) is not None:
                st.subheader(A.STUDIES[key]().title)
                measured_tables.show(key)
        study_groups.family_overview()  # after BERT: the family's studies, their papers' tables, not run yet
    else:
        labels = [s["name"] for s in studies]
        default = labels.index(st.session_state["abl_show"]) if st.session_state.get("abl_show") in labels else 0
        pick = st.selectbox("Study", labels, index=default, key="abl_pick",
                            format_func=lambda n: next(f"{s['name']} — {s['title']} ({s['jobs']} jobs)" for s in studies if s["name"] == n))
        auto = st.toggle("Auto-refresh every 10 s", value=True, key="abl_auto")
        study_dir = root / "studies" / pick

        @st.fragment(run_every=10 if auto else None)
        def dashboard():
            res = None
            with guard("reading the study"):
                res = A.collect_results(study_dir)
            if res is None:
                return
            study_controls.show(study_dir, res)  # the state in words, Cancel and Resume of the whole study
            st.subheader(res.study.title)
            left, right = st.columns([3, 2])
            with left:
                st.markdown("**Your study's results** (dev scores in %, mean ± std over the replicates: pre-training seeds x fine-tuning restarts, n = replicates finished)")
                st.dataframe(res.table, width="stretch")
                st.download_button("Download CSV", res.to_csv(), file_name=f"{pick}.csv", mime="text/csv", key="abl_csv")
                measured_tables.show(res.study.name)  # ours as measured, always beside the user's, finished or not
                paper_numbers(res.study.name, measured=False)
            with right:
                st.markdown("**The paper's finding**")
                st.info(res.finding)
                if res.findings:
                    st.markdown("**Reproduced here?** (the difference's 95% bootstrap interval over pre-training seeds, fine-tuning restarts and dev examples)")
                for f in res.findings:
                    icon = {"reproduced": "✅", "not reproduced": "❌", "inconclusive": "❔"}[f["verdict"]]
                    st.markdown(f"{icon} {f['verdict']} — {f['statement']} ({f['column']})  \n"
                                f"<small>{A.describe_entry(f)}</small>", unsafe_allow_html=True)
                with st.expander("Direction of the means (no uncertainty: a hint, not a verdict)", expanded=not res.findings):
                    for c in res.checks:
                        mark = {True: "↗ holds", False: "↘ does not hold", None: "… not yet"}[c["holds"]]
                        st.markdown(f"{mark} — {c['claim']}  \n<small>{c['detail']}</small>", unsafe_allow_html=True)
            variants = [v.name for v in res.study.variants]
            if res.study.checkpoint_steps:
                st.plotly_chart(F.steps_lines(res.summary, variants), key="abl_steps_fig", config=chart_config("ablation-steps"))
            else:
                st.plotly_chart(F.results_bars(res.summary, variants, list(res.table.columns)), key="abl_bars_fig",
                                config=chart_config("ablation-results"))  # the table's column order: tasks first
            pairs = F.available_curve_metrics(res.curves)
            if pairs:
                opts = [f"{m} ({'held-out' if s == 'eval' else 'train'})" for s, m in pairs]
                default_i = next((i for i, (s, m) in enumerate(pairs) if s == "train" and m == "loss"), 0)
                k = st.selectbox("Pre-training curve", opts, index=default_i, key="abl_curve")
                x = st.radio("Against", list(A.CURVE_X), format_func=A.CURVE_X.get, horizontal=True, key="abl_curve_x",
                             help="equal steps is not equal compute: an LTR model predicts every token, MLM only the masked share (25% in the classroom recipe)")
                s, m = pairs[opts.index(k)]
                st.plotly_chart(F.curves_figure(res.curves, m, s, x=x), key="abl_curve_fig", config=chart_config("ablation-curves"))
                final = A.final_pretrain_metrics(res.curves)
                if len(final):
                    st.markdown("**Held-out pre-training metrics at the last evaluation** (lm_* = next-token prediction of the LTR model)")
                    st.dataframe(final, hide_index=True, width="stretch")
            elif not res.study.model:
                st.caption("Pre-training curves appear here once the first run logs its metrics.")
            with st.expander("Jobs of this study"):
                jt = pd.DataFrame(res.jobs)[["key", "kind", "state", "error", "reused_from", "out"]]
                st.dataframe(jt, hide_index=True, width="stretch")
                failed = [j for j in res.jobs if status_of(j["state"]) is FAILED]
                if failed:
                    st.error(f"{len(failed)} job(s) failed; the first: {failed[0]['key']}: {failed[0]['error']}. "
                             "Fix the cause, then Resume the study above.")

        dashboard()
