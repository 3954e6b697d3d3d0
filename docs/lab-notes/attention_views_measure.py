"""The measurement behind attention-views.md: size of the HTML each attention view produces for MiniLM (6 layers x
12 heads) at 128 WordPieces, and its render time in headless Chromium (the system browser, every request outside
the page aborted), bertviz's views made offline (studio.bertviz_offline) against the studio's own.

    HF_HUB_OFFLINE=1 python3 docs/lab-notes/attention_views_measure.py [--repeats 3] [--only NAME]

Render time: from navigation to the view drawn (bertviz: its <svg> in #vis, ours: data-drawn="1", plotly: its
.main-svg), then two animation frames so layout and paint are included; a fresh page each time, median of
the repeats. A view not drawn within --timeout seconds is reported as such.
"""
import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import engine  # noqa: E402
from engine import analysis, probes  # noqa: E402
from studio import bertviz_offline  # noqa: E402
from studio.attention_view import head_view_html  # noqa: E402
from studio.figures import model_view_figure  # noqa: E402
from studio.neuron_view import neuron_view_html  # noqa: E402

TEXT = ("the government said on monday that it would cut spending on roads and schools next year , after a report "
        "found that the economy had grown more slowly than expected . ministers will meet union leaders this week "
        "to discuss pay , and the opposition said the plans would hurt families across the country . shares fell "
        "sharply in london as investors worried about the outlook for banks , while the pound rose against the "
        "dollar . the prime minister told reporters that the decision had been difficult but necessary , and that "
        "the money saved would go to hospitals . critics said the cuts were too deep and came too soon . in other "
        "news , the national team won its third match in a row on saturday , and fans celebrated late into the night .")
DRAWN = {"bertviz": "document.querySelector('#vis svg') !== null",
         "ours": "document.querySelector('[data-drawn=\"1\"]') !== null",
         "plotly": "document.querySelector('.main-svg') !== null"}
FRAMES = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"


def inputs(T=128):
    bundle = engine.load("minilm")
    tokens, att, out = probes.attention_and_output(bundle, TEXT, max_length=T, output_hidden_states=True)
    with torch.no_grad():
        q, k = analysis.queries_keys(bundle.model, out.hidden_states)
    assert len(tokens) == T, len(tokens)
    return list(tokens), att, q, k


def views(tokens, att, q, k):
    L, A = att.shape[:2]
    cap = max(8, int((400_000 / (L * A)) ** 0.5))  # the Attention page's MODEL_VIEW_CELLS cap
    plotly = lambda t: model_view_figure(att[:, :, :t, :t], tokens[:t], range(L), range(A)).to_html(include_plotlyjs=True)
    return {
        "bertviz head view (offline)": ("bertviz", lambda: bertviz_offline.head_view(tokens, att)),
        "bertviz model view (offline)": ("bertviz", lambda: bertviz_offline.model_view(tokens, att)),
        "bertviz neuron view (offline)": ("bertviz", lambda: bertviz_offline.neuron_view(tokens, q, k, att)),
        "studio head view (all layers)": ("ours", lambda: head_view_html(tokens, att, range(L), range(A))[0]),
        "studio neuron view (one head)": ("ours", lambda: neuron_view_html(tokens, q, k, 0, 0)[0]),
        f"studio model view, plotly ({cap} tokens, the page's cap)": ("plotly", lambda: plotly(cap)),
        "studio model view, plotly (128 tokens)": ("plotly", lambda: plotly(len(tokens))),
        "plotly.js alone (an empty figure)": ("plotly", lambda: model_view_figure(att[:1, :1, :1, :1], tokens[:1], [0], [0]).to_html(include_plotlyjs=True)),
    }


def render_time(browser, path: Path, kind: str, timeout: float):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:", "blob:", "about:")) else r.abort())
    try:
        t0 = time.perf_counter()
        page.goto(path.as_uri(), wait_until="commit", timeout=timeout * 1000)
        page.wait_for_function(DRAWN[kind], timeout=timeout * 1000, polling=20)
        page.evaluate(FRAMES)
        dt = time.perf_counter() - t0
        nodes = page.evaluate("document.getElementsByTagName('*').length")
        return dt, nodes
    except Exception as e:  # a view that does not draw in time is a result, not a crash of the measurement
        return None, type(e).__name__
    finally:
        page.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--only", default=None, help="measure only the views whose name contains this")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright
    tokens, att, q, k = inputs()
    tmp = Path(tempfile.mkdtemp(prefix="attention-views-"))
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        for name, (kind, make) in views(tokens, att, q, k).items():
            if args.only and args.only not in name:
                continue
            t0 = time.perf_counter()
            html = make()
            build = time.perf_counter() - t0
            path = tmp / f"view-{len(rows)}.html"
            path.write_text(html, encoding="utf-8")
            times, nodes = [], None
            for _ in range(args.repeats):
                dt, nodes = render_time(browser, path, kind, args.timeout)
                if dt is None:
                    break
                times.append(dt)
            row = {"view": name, "html_mb": round(len(html.encode()) / 1e6, 3), "build_s": round(build, 2),
                   "render_s": round(statistics.median(times), 2) if len(times) == args.repeats else f"not drawn ({nodes})",
                   "renders": [round(t, 2) for t in times], "dom_elements": nodes}
            rows.append(row)
            print(json.dumps(row), flush=True)
        browser.close()


if __name__ == "__main__":
    main()
