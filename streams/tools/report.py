"""``dpstream audit-report``: a self-contained HTML report (and PNG figures) per model.

Two forms:

* public (default): a function of the published topics alone (predictions, ledger,
  releases, model configs): query answers over time, update rounds (DP-Winnow) and hard
  queries (predictor) as released, the cumulative privacy budget against its cap, and
  the parameter table with the theorem each value comes from; the model's declared
  features (public configuration, as registered). It reads no label and no feature
  value, so it can be shared wherever the output topics can.
* internal (``--internal``, needs the key): adds each model's exact cumulative online
  mistakes, recomputed by a keyed replay where the data is. Mistake counts are private
  statistics of the labelled examples; the report says so on its first line.

Both open with the audit's verdict, as ``dpstream replay`` (or ``replay --no-key``,
without the key) concludes it on every record of the export: OK, or FAILED with what
failed, each record that is not a valid record of its topic listed by topic, file and
line, and why (never its content). The figures and numbers are drawn from the valid
records.

Every number carries a ``data-*`` attribute so tests (and scripts) can check it.
"""
from __future__ import annotations

import base64
import html
import io
import math
import os
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path


def _matplotlib():
    """matplotlib, imported from this package's directory: it reads ``./matplotlibrc``
    from the current directory before any other settings (matplotlib.matplotlib_fname),
    so a file another user left where the command runs restyled the figures, and a FIFO
    of that name made ``audit-report`` wait forever."""
    try:
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:                       # no current directory: nothing can be read from it
        here = None
    try:
        os.chdir(Path(__file__).resolve().parent)
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    finally:
        if here is not None:
            os.fchdir(here)
            os.close(here)


plt = _matplotlib()

from dpstream.agents.kinds import kind  # noqa: E402
from dpstream.agents.units import describe  # noqa: E402
from dpstream.schemas import ModelConfig  # noqa: E402
from dpstream.schemas.features import quoted  # noqa: E402
from dpstream.streams.tools.replay import LISTED, Verdict  # noqa: E402


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("dpstream")
    except PackageNotFoundError:
        return "unknown"


def parameter_rows(config: ModelConfig) -> list[tuple[str, str, str]]:
    """(parameter, value, where it comes from): the budget, then the kind's own rows."""
    b = config.budget
    return [("budget (eps, delta)", f"({b.epsilon:g}, {b.delta:g})", "model registration"),
            ("privacy unit", config.unit, "model registration (privacy_unit; the ledger's unit)"),
            *kind(config.kind).parameter_rows(config)]


def feature_rows(config: ModelConfig, shown: int = 50) -> list[tuple[str, str, str]]:
    """(field, type, what it takes) of each declared feature, in declaration order: public
    configuration, published with the model (docs/concepts.md). A vocabulary longer than
    ``shown`` values is listed up to there, with how many more it has."""
    rows = []
    for f in config.features or []:
        if f.type == "numeric":
            cut = (f"edges {', '.join(f'{e:g}' for e in f.edges)}" if f.edges is not None
                   else f"{f.bins} equal bins")
            rows.append((f.name, "numeric", f"[{f.lower:g}, {f.upper:g}] (clamped), {cut}"))
        elif f.type == "categorical" and f.vocabulary is not None:
            more = f" ... ({len(f.vocabulary) - shown} more)" if len(f.vocabulary) > shown else ""
            values = ", ".join(map(quoted, f.vocabulary[:shown]))   # "a, b" is one value
            rows.append((f.name, "categorical", f"{len(f.vocabulary)} values: {values}{more}; else other"))
        elif f.type == "categorical":
            rows.append((f.name, "categorical", f"hashed into {f.hash_buckets} buckets"))
        else:
            rows.append((f.name, "boolean", "true / false; else missing"))
    return rows


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def model_figures(model_id, preds, ledger, budget_eps, mistakes=None):
    """(timeline PNG, budget PNG) over the same x range (the model's events).
    ``mistakes``: [(seq, cumulative)] for the internal form."""
    last_seq = max([p["seq"] for p in preds] + [e["seq"] for e in ledger] + [1])
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.set_xlim(0, last_seq)
    if mistakes:
        ax.plot([s for s, _ in mistakes], [m for _, m in mistakes],
                label="cumulative online mistakes (INTERNAL)")
    answered = [p["seq"] for p in preds if p["kind"] == "query" and p["label"] is not None]
    ax.plot(answered, range(1, len(answered) + 1), label="queries answered")
    for p in preds:
        if p.get("updated"):
            ax.axvline(p["seq"], color="tab:green", alpha=0.15, lw=0.5)
        if p["status"] == "hard_query":
            ax.axvline(p["seq"], color="tab:red", alpha=0.6, lw=0.8)
    ax.set_xlabel("model event (seq)")
    ax.set_title(f"{model_id}: released answers (green: updates, red: hard queries)")
    ax.legend(loc="upper left", fontsize=8)
    timeline = _png(fig)
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.set_xlim(0, last_seq)
    spent = [e["spent_epsilon"] for e in ledger]
    ax.axhline(budget_eps, color="tab:red", ls=":", lw=1, label=f"budget cap (eps = {budget_eps:g})",
               zorder=1)
    if spent:
        ax.step([e["seq"] for e in ledger] + [last_seq], spent + spent[-1:], where="post", lw=2.5,
                color="tab:blue", label="eps spent this epoch (running total)", zorder=2)
    ax.set_ylim(0, 1.15 * max([budget_eps, *spent]))
    ax.set_ylabel("epsilon")
    ax.set_xlabel("model event (seq)")
    ax.set_title(f"{model_id}: privacy budget spent against its cap")
    ax.legend(loc="lower right", fontsize=8)
    return timeline, _png(fig)


def verdict_section(verdict: Verdict | None) -> str:
    """The audit's conclusion (replay.Verdict), first on the page: OK or FAILED as a
    headline, the text ``dpstream replay`` prints, and each record skipped as not valid
    (topic, where it was read, why: never its content). None: nothing was checked."""
    if verdict is None:
        return ("<div id='replay' data-verified='no' data-checks='none'><p><strong>Releases were "
                "not verified: nothing was recomputed or checked.</strong></p></div>")
    checks = "replay" if verdict.keyed else "public"
    if not verdict.ok:
        state = "failed"
        head = ("FAILED: the export did not verify" if verdict.keyed else
                "FAILED: the export fails the checks that need no key")
        head += " (what failed is below; the figures show its valid records only)."
    elif verdict.keyed:
        state, head = "yes", "Verified: every release recomputed with the key and reproduced."
    else:
        state, head = "no", ("Releases were not verified: no key was given, so nothing was "
                             "recomputed. The checks that need no key pass.")
    invalid = ""
    if verdict.invalid:
        rows = "".join(f"<tr><td>{html.escape(i.topic)}</td><td>{html.escape(where)}</td>"
                       f"<td>{html.escape(why)}</td></tr>" for i in verdict.invalid for where, why in i.records)
        total = sum(i.count for i in verdict.invalid)
        more = total - sum(len(i.records) for i in verdict.invalid)
        invalid = (f"<h3>Records that are not valid ({total:,}, skipped)</h3><table class='invalid'>"
                   f"<tr><th>topic</th><th>where</th><th>why</th></tr>{rows}</table>"
                   + (f"<p>... and {more:,} more (the first {LISTED} of each topic are listed).</p>"
                      if more else ""))
    return (f"<div id='replay' data-verified='{state}' data-checks='{checks}'>"
            f"<p class='verdict'><strong>{html.escape(head)}</strong></p>"
            f"<pre>{html.escape(verdict.text)}</pre>{invalid}</div>")


def build_report(log: list[dict], outputs: dict, out, verdict: Verdict | None = None,
                 mistakes: dict | None = None, private: bool = False) -> Path:
    """Write ``out/report.html`` and its figures; ``out``: a directory path or an open
    ``OutDir`` (streams/tools/outdir.py: created if missing, never chmod-ed, no link followed).
    ``verdict``: what the audit concluded (replay.Verdict, of every record read), shown
    first; ``log`` and ``outputs``: the valid records (replay.screen), which the figures
    and numbers are drawn from. Public unless ``mistakes`` ({model: [(seq, cumulative)]},
    from a keyed replay) is given; the log is read only for the model configs.
    ``private``: the directory is created 0700 and every file is written readable by its
    owner only (0600), as exports are. Every file is made first and written at the end,
    all or none."""
    from .outdir import OutDir
    files: dict[str, bytes] = {}

    def write(name: str, data: bytes) -> None:
        files[name] = data

    configs = {}
    for rec in sorted(log, key=lambda r: (r["partition"], r["offset"])):
        ev = rec["value"]["event"]
        if ev["type"] == "model" and ev["model_id"] not in configs:    # the first is in force
            configs[ev["model_id"]] = ModelConfig.model_validate(ev)
    preds_by, ledger_by = defaultdict(dict), defaultdict(dict)
    for p in outputs.get("predictions", []):
        preds_by[p["model_id"]][p["seq"]] = p
    for e in outputs.get("ledger", []):
        ledger_by[e["model_id"]][(e["epoch"], e["charges"])] = e
    sections = []
    for model_id, cfg in sorted(configs.items()):
        preds = [preds_by[model_id][s] for s in sorted(preds_by[model_id])]
        ledger = [ledger_by[model_id][k] for k in sorted(ledger_by[model_id])]
        curve = (mistakes or {}).get(model_id)
        timeline, budget = model_figures(model_id, preds, ledger, cfg.budget.epsilon, curve)
        write(f"{model_id}-timeline.png", timeline)
        write(f"{model_id}-budget.png", budget)
        numbers = {
            "events": len(preds) + 1,
            "queries": sum(p["kind"] == "query" for p in preds),
            "answered": sum(p["kind"] == "query" and p["label"] is not None for p in preds),
            "updates": sum(bool(p.get("updated")) for p in preds),
            "hard-queries": sum(p["status"] == "hard_query" for p in preds),
            "charges": len(ledger),
            "spent-epsilon": ledger[-1]["spent_epsilon"] if ledger else 0.0,
            "spent-delta": ledger[-1]["spent_delta"] if ledger else 0.0,
            "budget-epsilon": cfg.budget.epsilon,
        }
        if curve is not None:
            numbers["internal-mistakes"] = curve[-1][1] if curve else 0
        cells = "".join(f'<tr><th>{k}</th><td data-{k}="{v}">{v:.6g}</td></tr>' if isinstance(v, float)
                        else f'<tr><th>{k}</th><td data-{k}="{v}">{v}</td></tr>' for k, v in numbers.items())
        params = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>{html.escape(c)}</td></tr>"
                         for a, b, c in parameter_rows(cfg))
        declared = "".join(f'<tr data-feature="{html.escape(a)}"><td>{html.escape(a)}</td><td>{b}</td>'
                           f'<td>{html.escape(c)}</td></tr>' for a, b, c in feature_rows(cfg))
        declared = ("<h3>Declared features</h3><table class='features'><tr><th>field</th><th>type</th>"
                    f"<th>takes</th></tr>{declared}</table>") if declared else ""
        final = preds[-1]["status"] if preds else "no events"
        notice = ""
        if final in ("frozen", "budget_exhausted"):
            after = html.escape(kind(cfg.kind).after_stop[final])
            notice = (f"<p class='notice' data-final-status='{final}'><strong>This model stopped "
                      f"learning ({final.replace('_', ' ')}): {after}.</strong></p>")
        u = cfg.privacy_unit
        changed = ("replacing any one example of this model by another" if u is None else
                   "changing everything the records of any one person say (their features and "
                   "labels, at the same positions; of their examples at most "
                   f"{u.max_contributions} per epoch reach the learner)")
        handler = kind(cfg.kind)
        life = handler.lifetime(cfg)
        span = ""
        if handler.epochs_on_fresh_examples:
            span = (" per epoch, each epoch on its own examples; an example lies in one epoch" if u is None else
                    f" per epoch; a person's examples reach the learner in at most {u.max_epochs} "
                    f"epoch{'s' if u.max_epochs > 1 else ''}, so over the model's life the factor is at "
                    f"most e^{life.epsilon:.4g}, except with probability {life.delta:.3g}")
        meaning = (f"<p class='unit' data-privacy-unit='{html.escape(cfg.unit)}'>Privacy unit: "
                   f"{html.escape(describe(cfg))}.</p>"
                   f"<p class='meaning'>What the budget means: {changed} changes the probability of "
                   f"anything it released by at most a "
                   f"factor e^{cfg.budget.epsilon:g} = {math.exp(min(cfg.budget.epsilon, 700)):,.3g}, "
                   f"except with probability {cfg.budget.delta:g}" + span + ".</p>")
        img = lambda data, alt: (f'<img alt="{alt}" class="figure" '  # noqa: E731
                                 f'src="data:image/png;base64,{base64.b64encode(data).decode()}">')
        sections.append(f"""
<section class="model" id="model-{html.escape(model_id)}" data-model="{html.escape(model_id)}">
<h2>{html.escape(model_id)} ({html.escape(cfg.kind)}, d = {cfg.dimension})</h2>
{notice}{meaning}
<table class="numbers">{cells}</table>
{img(timeline, "released answers over time")}
{img(budget, "cumulative privacy budget")}
<h3>Parameters</h3>
<table class="params"><tr><th>parameter</th><th>value</th><th>source</th></tr>{params}</table>
{declared}
</section>""")
    prints = sorted({e.get("key_fingerprint", "") for e in outputs.get("ledger", [])} - {""})
    if mistakes is not None:
        banner = ("<p id='form' data-form='internal'><strong>INTERNAL: this report contains "
                  "information about the private examples (exact online mistakes). Do not "
                  "share it beyond the data owner.</strong></p>")
        scope = "Includes exact mistake counts recomputed with the key."
    else:
        banner = "<p id='form' data-form='public'>Public report: built from the published topics only.</p>"
        scope = "No features, labels, mistake counts or keys."
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>dpstream audit report</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}} img{{display:block;margin:1em 0;max-width:100%}}</style>
</head><body>{banner}<h1>dpstream audit report</h1>
{verdict_section(verdict)}
<p>{len(log):,} model events, {len(configs)} model(s). {scope}</p>
<table class="provenance">
<tr><th>dpstream version</th><td data-version="{_version()}">{_version()}</td></tr>
<tr><th>generated (UTC)</th><td>{datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")}</td></tr>
<tr><th>key fingerprint(s) on the ledger</th><td data-fingerprints="{html.escape(' '.join(prints))}">{html.escape(', '.join(prints)) or 'none'}</td></tr>
<tr><th>rejected inputs (dead letters)</th><td data-rejected="{len(outputs.get('rejected', []))}">{len(outputs.get('rejected', []))}</td></tr>
</table>
{''.join(sections)}</body></html>"""
    write("report.html", page.encode())
    with (OutDir(out, private=private) if isinstance(out, (str, Path)) else out) as where:
        where.write_all(files)
        return where.path / "report.html"
