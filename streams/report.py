"""``dpstream audit-report``: a self-contained HTML report (and PNG figures) per model.

Input: an export directory (``dpstream export`` / ``dpstream run``). Per model: the
predictions and mistakes over time (mistakes need the labels in the model-events log,
which an auditor holds; only counts appear in the report), the cumulative privacy
budget against its cap, update rounds (DP-Winnow) and hard queries (predictor) marked
on the timeline, and the parameter table with the theorem each value comes from. No
feature value, label or key appears in the report. Every number carries a
``data-*`` attribute so tests (and scripts) can check it against the ledger.
"""
from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from schemas import ModelConfig  # noqa: E402


def parameter_rows(config: ModelConfig) -> list[tuple[str, str, str]]:
    """(parameter, value, where it comes from)."""
    from agents.handlers import predictor_config, winnow_parameters
    p, b = config.params, config.budget
    rows = [("budget (eps, delta)", f"({b.epsilon:g}, {b.delta:g})", "model registration")]
    if p.kind == "winnow":
        w = winnow_parameters(config)
        src = "seed 000 Thm 11 + Lemma 14 (solved jointly)" if w.source == "theorem-11" else "user (practical mode)"
        rows += [("eps^ (AboveThreshold)", f"{w.eps_hat:.4g}", src),
                 ("eta", f"{w.eta:.4g}", src), ("m (draws per w~)", str(w.m),
                                                  "Hoeffding, design.md s.4" if w.source == "theorem-11" else src),
                 ("K (update cap)", f"{w.K:.4g}", src), ("L (threshold)", f"{w.L:.4g}",
                                                          "8 ln(2T^2/beta)/eps^" if w.source == "theorem-11" else src),
                 ("guaranteed eps", f"{w.epsilon:.4g}", "Thm 11 composition (mechanisms.params.dp_winnow_guarantee)")]
    elif p.kind == "predictor":
        pc = predictor_config(config)
        budget, cal = pc.budget(), pc.calibration()
        rows += [("k blocks x m", f"{p.k} x {p.m}", "registration"),
                 ("v_max instances", str(p.v_max), "registration"),
                 ("eps_BT, delta_BT", f"{budget.eps_bt:.4g}, {budget.delta_bt:.3g}",
                  "seed 001 Thm 3 over v_max (mechanisms.params.predictor_instance_budget)"),
                 ("thresholds A, B", f"{cal.lower:g}, {cal.upper:g}", "3k/8, 5k/8 (seed 001 Claim 2)"),
                 ("noise scale b", f"{float(cal.scale):.4g}", "supermartingale calibration (design.md s.4)")]
    else:
        from learners.estimator import round_epsilon
        from learners.decision_list import FeatureFamily
        fam = FeatureFamily(config.dimension, p.max_conjunction, p.negations)
        rows += [("window", str(p.window), "registration"),
                 ("per-round eps", f"{round_epsilon(p.accounting, b.epsilon, b.delta, len(fam)):.4g}",
                  f"{p.accounting} analysis (mechanisms.params)")]
    return rows


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def model_figures(model_id, preds, ledger, truths, budget_eps):
    fig, ax = plt.subplots(figsize=(8, 3))
    mistakes, total, xs = [], 0, []
    for p in preds:
        t = truths.get(p["seq"])
        if p["label"] is not None and t is not None:
            total += p["label"] != t
            xs.append(p["seq"])
            mistakes.append(total)
    ax.plot(xs, mistakes, label="cumulative mistakes (labelled examples)")
    answered = [p["seq"] for p in preds if p["kind"] == "query" and p["label"] is not None]
    ax.plot(answered, range(1, len(answered) + 1), label="queries answered")
    for p in preds:
        if p.get("updated"):
            ax.axvline(p["seq"], color="tab:green", alpha=0.15, lw=0.5)
        if p["status"] == "hard_query":
            ax.axvline(p["seq"], color="tab:red", alpha=0.6, lw=0.8)
    ax.set_xlabel("model event (seq)")
    ax.set_title(f"{model_id}: predictions and mistakes (green: updates, red: hard queries)")
    ax.legend(loc="upper left", fontsize=8)
    timeline = _png(fig)
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.step([e["seq"] for e in ledger], [e["spent_epsilon"] for e in ledger], where="post",
            label="eps spent (running total)")
    ax.axhline(budget_eps, color="tab:red", ls="--", label="budget cap")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("model event (seq)")
    ax.set_title(f"{model_id}: cumulative privacy budget (symlog)")
    ax.legend(loc="lower right", fontsize=8)
    return timeline, _png(fig)


def build_report(log: list[dict], outputs: dict, out: Path, replay_summary: str | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    configs, truths = {}, defaultdict(dict)
    per_model_events = defaultdict(int)
    for rec in sorted(log, key=lambda r: (r["partition"], r["offset"])):
        ev = rec["value"]["event"]
        per_model_events[ev["model_id"]] += 1
        if ev["type"] == "model":
            configs[ev["model_id"]] = ModelConfig.model_validate(ev)
    preds_by, ledger_by = defaultdict(dict), defaultdict(dict)
    for p in outputs.get("predictions", []):
        preds_by[p["model_id"]][p["seq"]] = p
    for e in outputs.get("ledger", []):
        ledger_by[e["model_id"]][(e["epoch"], e["charges"])] = e
    # labels, by the model's own event counter (registration is event 0)
    counters = defaultdict(int)
    for rec in sorted(log, key=lambda r: (r["partition"], r["offset"])):
        ev = rec["value"]["event"]
        seq = counters[ev["model_id"]]
        counters[ev["model_id"]] += 1
        if ev["type"] == "example":
            truths[ev["model_id"]][seq] = ev["y"]
    sections = []
    for model_id, cfg in sorted(configs.items()):
        preds = [preds_by[model_id][s] for s in sorted(preds_by[model_id])]
        ledger = [ledger_by[model_id][k] for k in sorted(ledger_by[model_id])]
        timeline, budget = model_figures(model_id, preds, ledger, truths[model_id], cfg.budget.epsilon)
        (out / f"{model_id}-timeline.png").write_bytes(timeline)
        (out / f"{model_id}-budget.png").write_bytes(budget)
        labelled = [p for p in preds if p["label"] is not None and p["seq"] in truths[model_id]]
        numbers = {
            "events": len(preds) + 1,
            "queries": sum(p["kind"] == "query" for p in preds),
            "answered": sum(p["kind"] == "query" and p["label"] is not None for p in preds),
            "mistakes": sum(p["label"] != truths[model_id][p["seq"]] for p in labelled),
            "updates": sum(bool(p.get("updated")) for p in preds),
            "hard-queries": sum(p["status"] == "hard_query" for p in preds),
            "charges": len(ledger),
            "spent-epsilon": ledger[-1]["spent_epsilon"] if ledger else 0.0,
            "spent-delta": ledger[-1]["spent_delta"] if ledger else 0.0,
            "budget-epsilon": cfg.budget.epsilon,
        }
        cells = "".join(f'<tr><th>{k}</th><td data-{k}="{v}">{v:.6g}</td></tr>' if isinstance(v, float)
                        else f'<tr><th>{k}</th><td data-{k}="{v}">{v}</td></tr>' for k, v in numbers.items())
        params = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>{html.escape(c)}</td></tr>"
                         for a, b, c in parameter_rows(cfg))
        img = lambda data, alt: (f'<img alt="{alt}" class="figure" '  # noqa: E731
                                 f'src="data:image/png;base64,{base64.b64encode(data).decode()}">')
        sections.append(f"""
<section class="model" id="model-{html.escape(model_id)}" data-model="{html.escape(model_id)}">
<h2>{html.escape(model_id)} ({cfg.kind}, d = {cfg.dimension})</h2>
<table class="numbers">{cells}</table>
{img(timeline, "predictions and mistakes over time")}
{img(budget, "cumulative privacy budget")}
<h3>Parameters</h3>
<table class="params"><tr><th>parameter</th><th>value</th><th>source</th></tr>{params}</table>
</section>""")
    replay_html = f"<pre id='replay'>{html.escape(replay_summary)}</pre>" if replay_summary else ""
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>dpstream audit report</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}} img{{display:block;margin:1em 0;max-width:100%}}</style>
</head><body><h1>dpstream audit report</h1>
<p>{len(log):,} model events, {len(configs)} model(s). Counts and budgets only: no features, labels or keys.</p>
{replay_html}{''.join(sections)}</body></html>"""
    path = out / "report.html"
    path.write_text(page)
    return path
