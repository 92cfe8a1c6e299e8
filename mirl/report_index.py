"""`reports/<run>/index.html`: one page that says what a run did and links everything it published.

Written by `mirl batch` after every stage (so a failed batch still has a page saying where it
stopped), or by hand with `python -m mirl.report_index runs/<run> reports/<run>`. It holds: the
stages (ran or skipped, status, time, LLM spend, the headline numbers of each `summary.json`), every
figure (the PNG shown, its PDF linked), every table (CSV), the executed notebooks (ipynb and HTML),
the kernels' logs, the LLM ledger's spend per stage and role, the params the run was given, and the
params fingerprint of each stage. Every link is relative, to a file that exists.
"""

from __future__ import annotations

import csv
import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mirl.notebook import SECRET_NAME, redact_secrets
from mirl.runner.layout import RunDir, atomic_write

INDEX = "index.html"
NOT_HEADLINE = {"stage", "run", "digest", "llm", "elapsed_s", "complete"}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1.5em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .6em 0; } th, td { padding: .25em .7em; border-bottom: 1px solid #eee;
text-align: left; vertical-align: top; } th { background: #f4f6f9; } td.num { text-align: right; }
.complete { color: #2e7d32; } .failed, .incomplete, .running { color: #b71c1c; } .skipped { color: #555; }
figure { display: inline-block; margin: .6em 1.2em .6em 0; vertical-align: top; }
figure img { max-width: 560px; border: 1px solid #ddd; } figcaption { font-size: .9em; color: #444; }
pre { background: #f7f7f7; padding: .8em; overflow-x: auto; font-size: 12px; } .muted { color: #666; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _link(reports: Path, path: Path, text: str | None = None) -> str:
    rel = path.relative_to(reports).as_posix()
    return f'<a href="{_e(rel)}">{_e(text or rel)}</a>'


def _scalar(value: Any) -> bool:
    return isinstance(value, (int, float, str, bool)) and not (isinstance(value, str) and len(value) > 80)


def headline(summary: dict[str, Any] | None) -> dict[str, Any]:
    """The summary's scalar numbers and short strings (its nested parts are in summary.json)."""
    if not summary:
        return {}
    return {k: v for k, v in summary.items() if k not in NOT_HEADLINE and _scalar(v)}


def masked(value: Any, key: str = "") -> Any:
    """Params with literal secrets replaced (names of env variables holding them stay readable)."""
    if isinstance(value, dict):
        return {k: masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, key) for v in value]
    if value and SECRET_NAME.search(key) and not key.endswith("_env"):
        return "[REDACTED]"
    return value


def _spend(run: RunDir) -> list[dict[str, Any]]:
    """The ledger's spend per (stage, role): the run's own, and each training recipe's (its own ledger in
    its run directory), whose stages are named as the batch names them (`training:<recipe>`)."""
    from mirl.llm.ledger import summarize

    rows: list[dict[str, Any]] = []
    for prefix, own in [("", run), *((f"{name}", r) for name, r in run.recipes().items())]:
        if own.ledger.exists():
            for r in summarize(own.root, by=("stage", "role")).to_dict("records"):
                rows.append({**r, "stage": f"{r['stage']}:{prefix}" if prefix else r["stage"]})
    return rows


def _own_run(run: RunDir, entry: dict[str, Any]) -> RunDir:
    """Where a batch entry's stage wrote: a recipe's training in the recipe's run, else the run."""
    return run.recipe(entry["recipe"]) if entry.get("recipe") else run


def _csv_rows(path: Path) -> int | None:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return max(sum(1 for _ in csv.reader(f)) - 1, 0)
    except (OSError, csv.Error, UnicodeDecodeError):
        return None


def write_index(run_dir: str | Path, reports: str | Path, state: dict[str, Any] | None = None,
                params: dict[str, Any] | None = None) -> Path:
    """Write `reports/index.html` for the run in `run_dir`; returns its path."""
    import yaml

    run, reports = RunDir(run_dir), Path(reports)
    reports.mkdir(parents=True, exist_ok=True)
    state = state or {}
    entries: dict[str, dict[str, Any]] = state.get("stages", {})
    order = [n["stage"] for n in state.get("notebooks", [])] or sorted(entries)
    total_s = sum(float(e.get("elapsed_s") or 0) for e in entries.values())
    spend = _spend(run)
    cost = {s: sum(float(r["cost_usd"] or 0) for r in spend if r["stage"] == s) for s in {r["stage"] for r in spend}}
    out: list[str] = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>mirl run {_e(run.name)}</title><style>{CSS}</style></head><body>",
        f"<h1>mirl run <code>{_e(run.name)}</code></h1>",
        f"<p class='muted'>written {datetime.now(UTC).isoformat(timespec='seconds')}; "
        f"params file <code>{_e(state.get('params_file') or '(defaults)')}</code>; kernel "
        f"<code>{_e(state.get('kernel', '?'))}</code>; stage time {total_s:.0f} s; LLM spend "
        f"${sum(cost.values()):.4f}; data in <code>{_e(run.root)}</code></p>",
        "<h2 id='stages'>Stages</h2><table><tr><th>stage</th><th>notebook</th><th>status</th><th>time</th>"
        "<th>LLM spend</th><th>headline numbers</th></tr>",
    ]
    for stage in order:
        e = entries.get(stage)
        nbs = [n for n in state.get("notebooks", []) if n["stage"] == stage]
        number = nbs[0]["number"] if nbs else ""
        if e is None:
            out.append(f"<tr><td>{_e(number)} {_e(stage)}</td><td></td><td class='skipped'>not run</td>"
                       "<td></td><td></td><td></td></tr>")
            continue
        ipynb = reports / e["notebook"]
        links = [_link(reports, p, p.suffix[1:]) for p in (ipynb, ipynb.with_suffix(".html")) if p.exists()]
        log = reports / (e.get("log") or f"logs/{stage}.log")
        if log.exists():
            links.append(_link(reports, log, "log"))
        own = _own_run(run, e)
        nums = headline(own.read_summary(e.get("stage") or stage))
        numbers = ", ".join(f"{_e(k)} <b>{_e(v)}</b>" for k, v in nums.items())
        status = e.get("status", "?")
        error = f"<br><span class='failed'>{_e(e['error'])}</span>" if e.get("error") else ""
        out.append(f"<tr><td>{_e(number)} {_e(stage)}</td><td>{_e(e['notebook'])}: {' · '.join(links)}</td>"
                   f"<td class='{_e(status)}'>{_e(status)}{error}</td>"
                   f"<td class='num'>{float(e.get('elapsed_s') or 0):.1f} s</td>"
                   f"<td class='num'>${cost.get(stage, 0.0):.4f}</td><td>{numbers}</td></tr>")
    out.append("</table>")

    figures = sorted([*reports.glob("*.png"), *reports.glob("recipes/*/*.png")], key=lambda p: (p.stat().st_mtime, p.name))
    out.append("<h2 id='figures'>Figures</h2>")
    if not figures:
        out.append("<p class='muted'>none yet</p>")
    for png in figures:
        pdf = png.with_suffix(".pdf")
        extra = _link(reports, pdf, "PDF") if pdf.exists() else "<span class='muted'>no PDF saved</span>"
        rel = png.relative_to(reports).as_posix()
        caption = rel[:-len(png.suffix)].replace("recipes/", "", 1)
        out.append(f"<figure><a href='{_e(rel)}'><img src='{_e(rel)}' alt='{_e(caption)}'></a>"
                   f"<figcaption>{_e(caption)} · {extra}</figcaption></figure>")

    tables = sorted([*reports.glob("*.csv"), *reports.glob("recipes/*/*.csv")])
    out.append("<h2 id='tables'>Tables</h2><ul>")
    for path in tables:
        rows = _csv_rows(path)
        out.append(f"<li>{_link(reports, path)} <span class='muted'>({rows} rows)</span></li>")
    out.append("</ul>" if tables else "</ul><p class='muted'>none yet</p>")

    out.append("<h2 id='spend'>LLM spend (ledger)</h2>")
    if spend:
        cols = ["stage", "role", "calls", "cache_hits", "errors", "input_tokens", "output_tokens", "cost_usd"]
        out.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>")
        for r in spend:
            out.append("<tr>" + "".join(f"<td>{_e(round(r[c], 6) if isinstance(r[c], float) else r[c])}</td>"
                                        for c in cols) + "</tr>")
        out.append("</table>")
    else:
        out.append("<p class='muted'>no LLM calls recorded</p>")

    out.append("<h2 id='params'>Params</h2>")
    if params is not None:
        out.append(f"<pre>{_e(yaml.safe_dump(masked(params), sort_keys=False) or '{}')}</pre>")
    out.append("<h2 id='fingerprints'>Fingerprints</h2><p class='muted'>what each stage's outputs were made with "
               "(<code>runs/&lt;run&gt;/&lt;stage&gt;/params.json</code>)</p>")
    for stage in order:
        e = entries.get(stage) or {}
        own = _own_run(run, e)
        path = own.params(e.get("stage") or stage)
        if not path.exists():
            continue
        stored = json.loads(path.read_text())
        body = "\n".join(f"{k} = {json.dumps(v, default=str)}" for k, v in stored.get("fingerprint", {}).items())
        out.append(f"<details><summary><b>{_e(stage)}</b> digest <code>{_e(stored.get('digest'))}</code>, batch "
                   f"<code>{_e(entries.get(stage, {}).get('digest', ''))}</code></summary><pre>{_e(body)}</pre></details>")
    out.append("</body></html>\n")
    index = reports / INDEX
    atomic_write(index, "\n".join(out))
    redact_secrets(index)
    return index


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m mirl.report_index", description="write reports/<run>/index.html")
    parser.add_argument("run_dir")
    parser.add_argument("reports_dir")
    args = parser.parse_args(argv)
    state_file = Path(args.run_dir) / "batch.json"  # what `mirl batch` keeps (mirl.batch.STATE)
    state = json.loads(state_file.read_text()) if state_file.exists() else {"stages": {}}
    print(write_index(args.run_dir, args.reports_dir, state))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
