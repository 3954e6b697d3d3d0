"""BERT Studio: `streamlit run streamlit_app.py` (binds 127.0.0.1, see .streamlit/config.toml).

The router: lists the pages explicitly (st.navigation does not auto-discover pages/), and a sidebar that picks
the runs folder every page reads and writes.

`streamlit run` finds `app` below (an st.App) and serves the studio through it, so that every request, HTTP as
well as the websocket, passes the Host check: a Host outside `server.allowedHosts` (DNS rebinding: a page on
evil.example resolved to 127.0.0.1) gets 403 on `/`, `/_stcore/health`, `/_stcore/host-config`, the static files
and the websocket alike. Streamlit itself checks the Host on the websocket only. The App then runs this same file
as the studio's script, where `__name__ == "__main__"` and the router below runs.
"""
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
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
    ("pages/10_Layers.py", "Layers", ":material/layers:"),
]


def router():
    from studio.common import sidebar_runs_root
    # a local icon: a ":material/..." page icon makes the browser fetch the favicon from fonts.gstatic.com
    st.set_page_config(page_title="BERT Studio", page_icon=str(ROOT / "studio" / "favicon.png"), layout="wide")
    pages = [st.Page(str(ROOT / path), title=title, icon=icon, default=path == PAGES[0][0])  # Start is the landing page
             for path, title, icon in PAGES if (ROOT / path).is_file()]
    nav = st.navigation(pages)
    sidebar_runs_root()
    nav.run()


class AllowedHostsOnly:
    """ASGI middleware: a request whose Host is outside `server.allowedHosts` gets 403 (HTTP) or a refused
    handshake (websocket, also 403), before Streamlit sees it. The check is Streamlit's own, the one its websocket
    applies (ports ignored, `*.example.com` wildcards, an empty list allows every Host)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            from streamlit.web.server.starlette.starlette_websocket import is_host_allowed
            hosts = [v for k, v in scope.get("headers", []) if k == b"host"]
            if not is_host_allowed(hosts[0].decode("latin-1") if len(hosts) == 1 else None):
                if scope["type"] == "http":
                    from starlette.responses import PlainTextResponse
                    await PlainTextResponse("403: this Host is not in server.allowedHosts", status_code=403)(scope, receive, send)
                else:
                    await send({"type": "websocket.close", "code": 1008})
                return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    router()
else:  # imported by `streamlit run` (or an ASGI server): the studio behind the Host check
    from starlette.middleware import Middleware
    app = st.App(__file__, middleware=[Middleware(AllowedHostsOnly)])
