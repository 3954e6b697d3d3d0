"""BERT Studio: `streamlit run streamlit_app.py` (binds 127.0.0.1, see .streamlit/config.toml).

The router: lists the pages explicitly (st.navigation does not auto-discover pages/), and a sidebar that picks
the runs folder every page reads and writes.
"""
from pathlib import Path

import streamlit as st

from studio.common import sidebar_runs_root

ROOT = Path(__file__).resolve().parent
# a local icon: a ":material/..." page icon makes the browser fetch the favicon from fonts.gstatic.com
st.set_page_config(page_title="BERT Studio", page_icon=str(ROOT / "studio" / "favicon.png"), layout="wide")

PAGES = [
    ("pages/0_Start.py", "Start", ":material/school:"),
    ("pages/1_Model.py", "Model", ":material/memory:"),
    ("pages/2_Pretrain.py", "Pre-train", ":material/model_training:"),
    ("pages/3_Finetune.py", "Fine-tune", ":material/tune:"),
    ("pages/4_Features.py", "Features", ":material/scatter_plot:"),
    ("pages/5_Probe.py", "Probe", ":material/search:"),
    ("pages/6_Attention.py", "Attention", ":material/grid_on:"),
    ("pages/7_Ablations.py", "Ablations", ":material/bar_chart:"),
    ("pages/8_Jobs.py", "Jobs", ":material/list_alt:"),
    ("pages/9_Compare.py", "Compare", ":material/stacked_line_chart:"),
]

pages = [st.Page(str(ROOT / path), title=title, icon=icon, default=path == PAGES[0][0])  # Start is the landing page
         for path, title, icon in PAGES if (ROOT / path).is_file()]
nav = st.navigation(pages)
sidebar_runs_root()
nav.run()
