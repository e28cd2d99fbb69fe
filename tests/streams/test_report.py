"""The audit report, rendered by a real headless browser (Debian's chromium)."""
import asyncio
import os
import re
import shutil
import subprocess

import pytest

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime
from dpstream.streams.tools.replay import replay
from dpstream.streams.tools.report import build_report

KEY = b"report-tests-key-0000000000000000"


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("DPSTREAM_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is required here (apt-get install chromium)")
        pytest.skip("chromium not installed")
    return path


def browser(args, tmp_path):
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True, timeout=120)


def run_two_models():
    rt = EmbeddedRuntime(KeyedRandomness(KEY))
    s = KeyedRandomness(b"report-test-data-000000000000000").stream("d", "x", 0)
    winnow = {"model_id": "w", "dimension": 20, "budget": {"epsilon": 1e5, "delta": 1e-6},
              "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 100, "K": 30, "L": 2.0}}
    pred = {"model_id": "p", "dimension": 1, "budget": {"epsilon": 8.0, "delta": 1e-6},
            "params": {"kind": "predictor", "generator": "thresholds", "k": 270, "m": 10, "v_max": 10}}

    async def go():
        await rt.feed("models", winnow)
        await rt.feed("models", pred)
        for _ in range(300):
            act = sorted(set(s.below(20, size=3).tolist()))
            await rt.feed("examples", {"model_id": "w", "active": act, "y": 1 if min(act) < 2 else -1})
        for v in s.uniform(2700):
            await rt.feed("examples", {"model_id": "p", "x": [float(v)], "y": 1 if v >= 0.5 else -1})
        for v in s.uniform(400):
            await rt.feed("queries", {"model_id": "p", "x": [float(v)]})
    asyncio.run(go())
    return rt


def test_report_renders_in_chromium_with_figures_and_numbers_that_match_the_ledger(tmp_path):
    rt = run_two_models()
    verdict = asyncio.run(replay(KeyedRandomness(KEY), rt.log, rt.outputs)).verdict()
    path = build_report(rt.log, rt.outputs, tmp_path / "report", verdict)
    dom = browser(["--dump-dom", path.as_uri()], tmp_path).stdout.decode()
    assert "dpstream audit report" in dom and "OK: every release reproduced" in dom
    for model in ("w", "p"):
        section = dom[dom.index(f'data-model="{model}"'):]
        section = section[: section.find("</section>")]
        figures = re.findall(r'<img[^>]+class="figure"[^>]+src="data:image/png;base64,', section)
        assert len(figures) == 2
        ledger = [e for e in rt.outputs["ledger"] if e["model_id"] == model]
        spent = float(re.search(r'data-spent-epsilon="([^"]+)"', section).group(1))
        charges = int(re.search(r'data-charges="([^"]+)"', section).group(1))
        assert spent == ledger[-1]["spent_epsilon"] and charges == len(ledger)
        assert (tmp_path / "report" / f"{model}-budget.png").stat().st_size > 5000
    hard = int(re.search(r'data-model="p".*?data-hard-queries="(\d+)"', dom, re.S).group(1))
    assert hard == sum(p["status"] == "hard_query" for p in rt.outputs["predictions"])
    shot = tmp_path / "shot.png"
    browser([f"--screenshot={shot}", "--window-size=1000,2400", path.as_uri()], tmp_path)
    assert shot.stat().st_size > 20_000
    assert "active" not in path.read_text()


def test_the_public_report_lists_the_declared_features_as_registered(tmp_path):
    """The README said the audit report lists a model's feature declaration (public
    configuration); before issue 44 it did not: only the parameters were listed."""
    from dpstream.streams.tools.report import feature_rows
    model = {"model_id": "shop", "budget": {"epsilon": 2.0, "delta": 1e-6},
             "params": {"kind": "continual_winnow", "horizon": 2000},
             "features": [{"type": "numeric", "name": "amount", "lower": 0, "upper": 2000, "bins": 8},
                          {"type": "numeric", "name": "age", "lower": 18, "upper": 90, "bins": 4,
                           "edges": [30, 45, 60]},
                          {"type": "categorical", "name": "country", "vocabulary": ["fr", "de", "<us>"]},
                          {"type": "categorical", "name": "merchant_id", "hash_buckets": 256},
                          {"type": "boolean", "name": "online"}]}
    rt = EmbeddedRuntime(KeyedRandomness(KEY))

    async def go():
        await rt.feed("models", model)
        for i in range(50):
            await rt.feed("examples", {"model_id": "shop", "features": {"amount": i, "online": i % 2 == 0},
                                       "y": 1 if i % 3 else -1})
    asyncio.run(go())
    page = build_report(rt.log, rt.outputs, tmp_path / "report").read_text()
    declared = re.findall(r'<tr data-feature="([^"]*)"><td>[^<]*</td><td>(\w+)</td><td>([^<]*)</td>', page)
    assert declared == [
        ("amount", "numeric", "[0, 2000] (clamped), 8 equal bins"),
        ("age", "numeric", "[18, 90] (clamped), edges 30, 45, 60"),
        ("country", "categorical", "3 values: &quot;fr&quot;, &quot;de&quot;, &quot;&lt;us&gt;&quot;; else other"),
        ("merchant_id", "categorical", "hashed into 256 buckets"),
        ("online", "boolean", "true / false; else missing")]
    from dpstream.schemas import ModelConfig
    many = ModelConfig.model_validate({**model, "features": [
        {"type": "categorical", "name": "c", "vocabulary": [f"v{i}" for i in range(60)]}]})
    assert feature_rows(many)[0][2].endswith('"v49" ... (10 more); else other')


def test_a_vocabulary_is_listed_so_that_a_reader_can_tell_its_values_apart():
    """A vocabulary entry is a value the data holds: it may hold a comma, a quote, nothing,
    or a character that prints as nothing or reorders the text after it (U+202E). Listed
    bare, "a, b" read as two values, "" as none, and "\u202e" turned the rest of the row
    around; each is now quoted, with what a reader cannot see escaped as in JSON."""
    from dpstream.schemas import ModelConfig
    from dpstream.streams.tools.report import feature_rows
    vocabulary = ["a, b", "", "say \"hi\"", "evil\u202eelba", "zero\u200bwidth", "caf\u00e9", "\u3164"]
    config = ModelConfig.model_validate({
        "model_id": "m", "budget": {"epsilon": 1.0, "delta": 1e-6},
        "params": {"kind": "continual_winnow", "horizon": 100},
        "features": [{"type": "categorical", "name": "c", "vocabulary": vocabulary}]})
    listed = feature_rows(config)[0][2]
    assert listed == ('7 values: "a, b", "", "say \\"hi\\"", "evil\\u202eelba", "zero\\u200bwidth", '
                      '"caf\u00e9", "\\u3164"; else other')
    assert all(ch.isprintable() for ch in listed)


def test_a_matplotlibrc_where_the_command_runs_is_not_read(tmp_path):
    """matplotlib reads ./matplotlibrc first: a file another user left in the directory
    where ``audit-report`` ran restyled its figures, and a FIFO of that name made it wait
    forever."""
    import sys
    (tmp_path / "styled").mkdir()
    (tmp_path / "styled" / "matplotlibrc").write_text("figure.facecolor: red\n")
    os.mkfifo(tmp_path / "fifo-dir-matplotlibrc")
    (tmp_path / "fifo").mkdir()
    os.rename(tmp_path / "fifo-dir-matplotlibrc", tmp_path / "fifo" / "matplotlibrc")
    code = "import dpstream.streams.tools.report as r; print(r.plt.rcParams['figure.facecolor'])"
    for where in ("styled", "fifo"):
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / where, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() != "red", done.stdout


@pytest.mark.parametrize("student", [False, True])
def test_a_spent_predictors_notice_says_what_its_later_answers_are(tmp_path, student):
    """Before: every stopped model's notice said "later answers come from its last released
    hypothesis", also a predictor whose later queries got no label (budget_exhausted) or
    its student's (frozen). Now each kind says what its answers are."""
    rt = EmbeddedRuntime(KeyedRandomness(KEY))
    s = KeyedRandomness(b"report-test-data-000000000000000").stream("d", "spent", 0)
    pred = {"model_id": "p", "dimension": 1, "budget": {"epsilon": 8.0, "delta": 1e-6},
            "params": {"kind": "predictor", "generator": "nearest", "k": 270, "m": 10, "v_max": 1,
                       "epochs": False, "student": student}}

    async def go():
        await rt.feed("models", pred)
        for v in s.uniform(2700):
            await rt.feed("examples", {"model_id": "p", "x": [float(v)], "y": 1 if v >= 0.5 else -1})
        for v in s.uniform(400):
            await rt.feed("queries", {"model_id": "p", "x": [float(v)]})
    asyncio.run(go())
    final = rt.outputs["predictions"][-1]
    page = build_report(rt.log, rt.outputs, tmp_path / "report").read_text()
    assert final["status"] == ("frozen" if student else "budget_exhausted")
    assert (final["label"] is None) != student
    assert "last released hypothesis" not in page
    assert ("from its student" if student else "get no label") in page
