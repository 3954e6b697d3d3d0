"""BERT Studio: `streamlit run streamlit_app.py` (binds 127.0.0.1, see .streamlit/config.toml).

The router: lists the pages explicitly (st.navigation does not auto-discover pages/), and a sidebar that picks
the runs folder every page reads and writes.
"""
from pathlib import Path

import streamlit as st

from studio.common import sidebar_runs_root

ROOT = Path(__file__).resolve().parent
st.set_page_config(page_title="BERT Studio", page_icon="🧪", layout="wide")

PAGES = [
    ("pages/1_Model.py", "Model", "🧱"),
    ("pages/2_Pretrain.py", "Pre-train", "🏋️"),
    ("pages/3_Finetune.py", "Fine-tune", "🎯"),
    ("pages/4_Features.py", "Features", "🧬"),
    ("pages/5_Probe.py", "Probe", "🔍"),
    ("pages/6_Attention.py", "Attention", "👀"),
    ("pages/7_Ablations.py", "Ablations", "📊"),
    ("pages/8_Jobs.py", "Jobs", "🗂️"),
]

pages = [st.Page(str(ROOT / path), title=title, icon=icon) for path, title, icon in PAGES if (ROOT / path).is_file()]
nav = st.navigation(pages)
sidebar_runs_root()
nav.run()
