"""bertviz's own head, model and neuron views, working without a network: bertviz's HTML loads require.js, d3 and
jQuery from a CDN; here those loads are replaced by the copies in studio/vendor/ (from the npm registry, each
licence beside it), inlined into one self-contained page.

The Attention page does not use these: its own views (studio.attention_view, studio.neuron_view) are smaller and
draw faster at the same input (the measurement is in docs/lab-notes/attention-views.md). This module is for
notebooks that want bertviz's look offline, and for that comparison.

Inputs are numpy arrays as the engine gives them: att (L, A, T, T); for the neuron view also q and k (L, A, T, D)
from engine.analysis.queries_and_keys.
"""
import json
import re
from pathlib import Path

VENDOR = Path(__file__).resolve().parent / "vendor"
SCRIPTS = ("d3/d3.min.js", "jquery/jquery.min.js", "requirejs/require.js")  # in load order: globals first, then AMD
# bertviz asks require.js for "d3" and "jquery"; the inline copies are handed to it under those names
_DEFINE = 'define("d3", [], function () { return window.d3; }); define("jquery", [], function () { return window.jQuery; });'
_CDN_TAG = re.compile(r'<script src="https://cdnjs\.cloudflare\.com/[^"]*"></script>')
_REQUIRE_CONFIG = re.compile(r"require\.config\(\{.*?\}\);", re.S)


def _inline(js: str) -> str:
    return "<script>\n" + js.replace("</script", "<\\/script") + "\n</script>\n"


def offline(bertviz_html: str) -> str:
    """A page of bertviz's HTML (head/model view `html_action="return"` output, or the neuron view's) with its CDN
    loads replaced by the vendored scripts, inline."""
    body = _CDN_TAG.sub("", bertviz_html)
    body = _REQUIRE_CONFIG.sub("", body)
    scripts = "".join(_inline((VENDOR / s).read_text(encoding="utf-8")) for s in SCRIPTS) + _inline(_DEFINE)
    return f'<!doctype html>\n<html><head><meta charset="utf-8"></head><body>\n{scripts}{body}\n</body></html>\n'


def _layers(att):
    import torch
    return [torch.from_numpy(att[l][None].copy()) for l in range(att.shape[0])]  # L x (1, A, T, T)


def head_view(tokens, att) -> str:
    """bertviz's head view of every layer and head, offline."""
    from bertviz import head_view as hv
    return offline(hv(attention=_layers(att), tokens=list(tokens), html_action="return").data)


def model_view(tokens, att) -> str:
    """bertviz's model view (a thumbnail per layer and head), offline."""
    from bertviz import model_view as mv
    return offline(mv(attention=_layers(att), tokens=list(tokens), html_action="return").data)


def neuron_view(tokens, q, k, att, layer: int = 0, head: int = 0) -> str:
    """bertviz's neuron view (queries, keys, q x k, q . k for the hovered token), offline, from the engine's
    queries and keys; opens on the 0-based `layer` and `head`."""
    import bertviz
    vis_id = "bertviz-neuron"
    data = {"all": {"attn": att.tolist(), "queries": q.tolist(), "keys": k.tolist(),
                    "left_text": list(tokens), "right_text": list(tokens)}}
    params = {"attention": data, "default_filter": "all", "root_div_id": vis_id, "bidirectional": True,
              "display_mode": "light", "layer": int(layer), "head": int(head)}
    js = (Path(bertviz.__file__).parent / "neuron_view.js").read_text(encoding="utf-8")
    html = (f'<div id="{vis_id}" style="padding:8px;font-family:Helvetica, Arial, sans-serif;">'
            '<span style="user-select:none">Layer: <select id="layer"></select> Head: <select id="att_head"></select>'
            "</span><div id='vis'></div></div>\n"
            f"<script>window.bertviz_params = {json.dumps(params)};</script>\n<script>\n{js}\n</script>\n")
    return offline(html)
