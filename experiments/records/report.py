"""Summaries of benchmark rows: a markdown table, a CSV, and plots.

Latencies are aggregated over seeds as mean and standard deviation; speedups over CPU-only as the
geometric mean (CompilerGym's leaderboard convention); "collapsed updates" is the mean over seeds of a
learning system's share of policy updates whose samples were all identical or tied in reward
(``extra["collapsed_fraction"]``, see :func:`agents.systems.common.reinforce`). The one reference is the
task's stored optimum (:mod:`placement_gym.tasks`): the score against it (0 = the best single device, 1 = the
optimum) is the mean over seeds of each run's score; every method, the MILP included, is a row scored
against it. :func:`markdown_table` explains its columns under the table.

    python -m experiments.records.report results/small                 # paper-style and quality tables
    python -m experiments.records.report --suite results/suite-scores   # the suite table (normalised scores)
    python -m experiments.records.report --suite results/rl-ablations-igpu --methods heft ppo_gnn   # only these columns

A folder holds ``results.jsonl`` (``bench``) or ``rows.jsonl`` (``experiments.records.learned_vs_search``, older
rows of which are converted, see :mod:`experiments.records.convert_rows`). Several folders are read as one set of
rows: a cell (model, graph, platform, method, seed, budget) found in
more than one folder is taken from the last folder that has it. Rows of a graph other than the one a
reference optimum was solved on (another group count) get no normalised score.
"""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from agents.specs import spec_label
from experiments.filenames import file_stem
from experiments.runs import ResultRow
from placement_gym.tasks import ReferenceOptimum, reference_for

#: First characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: object) -> object:
    """``value`` as a CSV cell no spreadsheet evaluates: text starting with ``= + - @``, a tab or a
    carriage return gets a leading ``'`` (OWASP's rule); numbers, negative ones included, stay numbers."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    try:
        float(value)
        return value  # "-1.5" is a number, not a formula
    except ValueError:
        return "'" + value


def _geomean(values: list[float]) -> float:
    vals = [v for v in values if v > 0 and np.isfinite(v)]
    return float(np.exp(np.mean(np.log(vals)))) if vals else float("nan")  # nan: no speedup is defined


def _speedup_cell(s: dict, short: bool = False) -> str:
    """A summary's speedup, with what it is against where that is not CPU-only; ``-`` where no single
    device fits (``model-parallel``) or no run found a feasible placement."""
    if s["speedup_reference"] == "none":
        return "- (no single device fits)"
    if not np.isfinite(s["speedup_vs_cpu"]):
        return "-"
    vs = "" if s["speedup_reference"] == "cpu_only" else f" vs {s['speedup_reference']}"
    return f"x{s['speedup_vs_cpu']:.2f}{vs}" if short else f"{s['speedup_vs_cpu']:.3f}{vs}"


def reference_of(row: ResultRow) -> ReferenceOptimum | None:
    """The stored reference optimum of ``row``'s task (simulated backend only), or ``None``: matched by the
    task's content hash the row records (:func:`placement_gym.tasks.reference_for`; a row written before
    rows recorded it, by names and group count, so a graph with another group count than the optimum's,
    e.g. BERT's fused level before a fusion fix, has none)."""
    if row.backend != "simulated":
        return None
    return reference_for(
        row.model, row.graph_version, row.platform, row.coarsening, row.groups, row.task_sha256
    )


def merge_rows(rows: list[ResultRow]) -> list[ResultRow]:
    """``rows`` with one row per cell (task, graph, method, seed, budget): the last one wins."""
    cells = {(*row.key, row.graph_version, row.groups): row for row in rows}
    return list(cells.values())


def _score(row: ResultRow) -> float:
    ref = reference_of(row)
    if ref is None or not ref.latency < ref.baseline_latency:
        return float("nan")
    return ref.score(row.latency if np.isfinite(row.latency) and row.latency > 0 else float("inf"))


def summarise(rows: list[ResultRow]) -> list[dict]:
    """One dict per (platform, backend, model, method) with aggregated figures (rows of another graph of
    the model, e.g. another group count, are summarised apart)."""
    groups: dict[tuple, list[ResultRow]] = defaultdict(list)
    for row in rows:
        ref = reference_of(row)  # rows of a custom platform named like a stored one are summarised apart
        task = (ref.task_sha256 or id(ref)) if ref is not None else row.task_sha256
        groups[
            (row.platform, row.backend, row.model, row.method, row.graph_version, row.groups, task)
        ].append(row)
    out = []
    for (platform, backend, model, method, _version, _groups, _), rs in groups.items():
        lat = np.array([r.latency for r in rs])
        finite = lat[np.isfinite(lat)]
        mean = float(finite.mean()) if len(finite) else float("inf")
        collapsed = [r.extra["collapsed_fraction"] for r in rs if "collapsed_fraction" in r.extra]
        out.append(
            dict(
                platform=platform,
                backend=backend,
                model=model,
                method=method,
                label=spec_label(method),
                seeds=len(rs),
                latency_ms=mean * 1e3,
                latency_std_ms=float(finite.std()) * 1e3 if len(finite) else 0.0,
                speedup_vs_cpu=_geomean([r.speedup_vs_cpu for r in rs]),
                speedup_reference=Counter(r.speedup_reference for r in rs).most_common(1)[0][0],
                score=float(np.mean([_score(r) for r in rs])),
                evaluations=int(np.mean([r.evaluations for r in rs])),
                wall_s=float(np.mean([r.wall_time for r in rs])),
                groups=rs[0].groups,
                coarsening=rs[0].coarsening,
                budget=rs[0].budget,
                collapsed=float(np.mean(collapsed)) if collapsed else float("nan"),
                reference=reference_of(rs[0]),
            )
        )
    return sorted(out, key=lambda d: (d["platform"], d["backend"], d["model"], d["latency_ms"]))


#: What each column of :func:`markdown_table` means, printed under the table.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("model", "the zoo model, or the model file's name"),
    ("method", "the method spec as given (single_device:device=X shows as X_only); the MILP is one of them"),
    ("seeds", "runs averaged (a method whose result does not depend on the seed runs once)"),
    ("latency ms", "latency of the best placement the method found, mean ± std over seeds"),
    ("speedup vs CPU-only", "CPU-only latency over the method's, geometric mean over seeds; 'vs X_only' "
     "where the CPU alone does not fit (then against the fastest single device that fits), '-' where none "
     "fits"),
    ("score vs optimum", "(b / latency - 1) / (b / optimum - 1), b the best single device's latency: 0 = the "
     "best single device, 1 = the task's stored optimum (named above), mean over seeds; '-' for a task "
     "without one (a model file, another platform or backend)"),
    ("evaluations", "placements the method evaluated, mean over seeds (the budget caps the distinct ones)"),
    ("collapsed updates", "the learning systems trained with REINFORCE (hsdag, rl_placement, grouper_placer, "
     "placeto): share of policy updates whose sampled placements all had the same reward, so the update "
     "learned nothing; '-' for other methods"),
    ("wall s", "wall-clock seconds per run, mean over seeds"),
)


def _optimum_line(items: list[dict]) -> str:
    """The stored optima the block's scores are against, one per model (or that there is none)."""
    parts, without = [], []
    for model in dict.fromkeys(s["model"] for s in items):
        refs = [s["reference"] for s in items if s["model"] == model and s["reference"] is not None]
        if not refs:
            without.append(model)
            continue
        ref = refs[0]
        parts.append(
            f"{model} {ref.latency * 1e3:.3f} ms (proven within {ref.gap:.2%}; best single device "
            f"{ref.baseline.split()[-1]} {ref.baseline_latency * 1e3:.3f} ms)"
        )
    text = f"Stored optimum: {'; '.join(parts)}." if parts else ""
    if without:
        text += (" " if text else "") + f"No stored optimum for {', '.join(without)}: no score."
    return text


def markdown_table(summary: list[dict]) -> str:
    """The summary as markdown, one block per (platform, backend): one row per method, scored against the
    task's stored optimum, with the optimum and every column explained under the table."""
    lines: list[str] = []
    blocks: dict[tuple, list[dict]] = defaultdict(list)
    for s in summary:
        blocks[(s["platform"], s["backend"])].append(s)
    for (platform, backend), items in blocks.items():
        lines += [
            f"### {platform} ({backend})",
            "",
            "| model | method | seeds | latency ms (mean ± std) | speedup vs CPU-only | score vs optimum | "
            "evaluations | collapsed updates | wall s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for s in items:
            score = f"{s['score']:.3f}" if np.isfinite(s["score"]) else "-"
            collapsed = f"{s['collapsed']:.0%}" if np.isfinite(s["collapsed"]) else "-"
            lines.append(
                f"| {s['model']} | {s['label']} | {s['seeds']} | {s['latency_ms']:.3f} ± {s['latency_std_ms']:.3f} | "
                f"{_speedup_cell(s)} | {score} | {s['evaluations']} | {collapsed} | {s['wall_s']:.1f} |"
            )
        lines += ["", _optimum_line(items), ""]
    if blocks:
        lines += [f"- {name}: {meaning}." for name, meaning in COLUMNS]
    return "\n".join(lines)


def write_report(rows: list[ResultRow], out: Path) -> str:
    """Write ``report.md``, ``summary.csv`` and plots into ``out``; return the markdown table."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(rows)
    table = markdown_table(summary)
    (out / "report.md").write_text(table)
    if summary:
        with open(out / "summary.csv", "w", newline="") as f:
            fields = [k for k in summary[0] if k != "reference"]  # the optimum itself: the score column
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows({k: csv_safe(row[k]) for k in fields} for row in summary)
    if rows:
        plot_latencies(summary, out / "latency.png")
        plot_curves(rows, out / "learning_curves.png")
        plot_best_placements(rows, out)
    return table


def plot_latencies(summary: list[dict], path: Path) -> None:
    """Bar chart: latency per method, one panel per model, error bars = std over seeds."""
    from matplotlib.figure import Figure

    models = sorted({s["model"] for s in summary})
    fig = Figure(figsize=(5 * len(models), 4), dpi=90)
    for i, model in enumerate(models):
        ax = fig.add_subplot(1, len(models), i + 1)
        items = [s for s in summary if s["model"] == model and np.isfinite(s["latency_ms"])]
        ax.barh(
            [s["label"] for s in items],
            [s["latency_ms"] for s in items],
            xerr=[s["latency_std_ms"] for s in items],
            color="tab:blue",
        )
        ax.set_title(model)
        ax.set_xlabel("latency (ms)")
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path)


def plot_curves(rows: list[ResultRow], path: Path) -> None:
    """Best latency so far vs evaluations for every search method (mean over seeds)."""
    from matplotlib.figure import Figure

    models = sorted({r.model for r in rows})
    fig = Figure(figsize=(5 * len(models), 4), dpi=90)
    for i, model in enumerate(models):
        ax = fig.add_subplot(1, len(models), i + 1)
        by_method: dict[str, list[ResultRow]] = defaultdict(list)
        for r in rows:
            if r.model == model and len(r.history) > 2:
                by_method[r.method].append(r)
        for method, rs in sorted(by_method.items()):
            grid = np.arange(1, max(r.history[-1][0] for r in rs) + 1)
            curves = []
            for r in rs:
                h = np.array(r.history, dtype=float)
                ok = np.isfinite(h[:, 1])
                if ok.any():  # step curve: best so far at every evaluation, held after the last one
                    idx = np.searchsorted(h[ok, 0], grid, side="right") - 1
                    curves.append(np.where(idx >= 0, h[ok, 1][np.maximum(idx, 0)], np.nan))
            if curves:
                ax.plot(grid, np.nanmean(curves, axis=0) * 1e3, label=spec_label(method), lw=1)
        ax.set_title(model)
        ax.set_xlabel("evaluated placements")
        ax.set_ylabel("best latency so far (ms)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)


def plot_best_placements(rows: list[ResultRow], out: Path) -> None:
    """For each model, the best placement found by any method drawn as a graph coloured by device."""
    from placement_gym.benchmarks import load_benchmark
    from placement_gym.envs.render import placement_figure
    from placement_gym.errors import PlacementGymError
    from placement_gym.platforms import load_platform

    best: dict[tuple, ResultRow] = {}
    for r in rows:
        key = (r.model, r.platform, r.coarsening)
        if np.isfinite(r.latency) and (key not in best or r.latency < best[key].latency):
            best[key] = r
    for (model, platform_name, coarsening), r in best.items():
        try:
            bench = load_benchmark(model, input_shapes=r.input_shapes)
            coarse = bench.coarsen_as(coarsening)
            platform = load_platform(platform_name)
        except PlacementGymError as exc:  # e.g. a platform file whose name is not a platform name
            print(f"note: no placement picture for {model} on {platform_name}: {exc}")
            continue
        if coarse.num_groups != len(r.placement):
            continue
        title = f"{model}: best = {spec_label(r.method)}, {r.latency * 1e3:.2f} ms"
        fig = placement_figure(coarse, platform, np.array(r.placement), title)
        fig.savefig(out / f"placement_{file_stem(model)}_{file_stem(platform_name)}.png")


def paper_table(summary: list[dict]) -> str:
    """Methods as rows, models as columns: ``latency ms (± std), speedup over CPU-only`` per cell, and the
    normalised score where the task has a reference optimum."""
    models = sorted({s["model"] for s in summary})
    cells: dict[str, dict[str, dict]] = defaultdict(dict)
    for s in summary:
        cells[s["label"]][s["model"]] = s
    # Order: by geometric-mean speedup across models, best first.
    geomeans = {m: _geomean([c["speedup_vs_cpu"] for c in cells[m].values()]) for m in cells}
    order = sorted(cells, key=lambda m: -geomeans[m] if np.isfinite(geomeans[m]) else np.inf)
    lines = [
        "| method | " + " | ".join(f"{m}: ms (± std), speedup" for m in models) + " | geomean speedup |",
        "|---|" + "---|" * (len(models) + 1),
    ]
    for method in order:
        row = []
        for m in models:
            s = cells[method].get(m)
            if s is None:
                row.append("-")
                continue
            cell = f"{s['latency_ms']:.3f} (± {s['latency_std_ms']:.3f}), {_speedup_cell(s, short=True)}"
            row.append(cell + (f", score {s['score']:.2f}" if np.isfinite(s["score"]) else ""))
        geo = f"x{geomeans[method]:.2f}" if np.isfinite(geomeans[method]) else "-"
        lines.append(f"| {method} | " + " | ".join(row) + f" | {geo} |")
    return "\n".join(lines)


def quality_table(summary: list[dict]) -> str:
    """Best learned latency over the MILP's latency, per model (1.0 = as good as the MILP)."""
    learners = {
        "ppo_gnn",
        "a2c_gnn",
        "maskable_ppo_gnn",
        "ppo_mlp",
        "hsdag",
        "rl_placement",
        "grouper_placer",
        "placeto",
    }
    lines = ["| model | MILP ms | best learner | its ms | learned / MILP |", "|---|---|---|---|---|"]
    for model in sorted({s["model"] for s in summary}):
        items = [s for s in summary if s["model"] == model]
        milp = [s for s in items if s["method"].split(":")[0] == "milp"]
        learned = [s for s in items if s["method"].split(":")[0] in learners]
        if milp and learned:
            best = min(learned, key=lambda s: s["latency_ms"])
            lines.append(
                f"| {model} | {milp[0]['latency_ms']:.3f} | {best['label']} | {best['latency_ms']:.3f} | "
                f"{best['latency_ms'] / milp[0]['latency_ms']:.3f} |"
            )
    return "\n".join(lines)


#: Column order of :func:`suite_table`: classical methods, the solvers, then the learners.
_SUITE_ORDER = (
    "heft", "m_topo", "m_etf", "m_sct", "metis", "milp", "moirai", "exact", "random_search", "local_search",
    "simulated_annealing", "hsdag",
    "rl_placement", "grouper_placer", "placeto", "ppo_gnn", "a2c_gnn", "maskable_ppo_gnn", "ppo_mlp",
)  # fmt: skip


def suite_table(summary: list[dict]) -> str:
    """One row per task with a reference optimum: the best single device, HEFT, the optimum with its gap,
    the headroom, and every method's normalised score (mean over seeds; ``-`` where it did not run)."""
    tasks: dict[tuple, dict[str, dict]] = defaultdict(dict)
    refs: dict[tuple, ReferenceOptimum] = {}
    for s in summary:
        ref = s.get("reference")
        if ref is None or s["backend"] != "simulated" or s["groups"] != len(ref.placement):
            continue
        key = (s["platform"], s["model"])
        refs[key] = ref
        tasks[key][s["label"]] = s
    first = {name: i for i, name in enumerate(_SUITE_ORDER)}
    present = {s["label"]: s["method"].split(":")[0] for cells in tasks.values() for s in cells.values()}
    methods = sorted(
        # a single device scores 0 or less by definition; the exact solver's placement is the optimum column
        (label for label, name in present.items() if name not in ("single_device", "exact")),
        key=lambda label: (first.get(present[label], len(first)), label),
    )
    lines = [
        "| task | best single device ms | HEFT ms | optimum ms (gap) | headroom | "
        + " | ".join(methods)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(methods),
    ]
    for key in sorted(tasks):
        ref, cells = refs[key], tasks[key]
        scores = [
            f"{cells[m]['score']:.2f}" if m in cells and np.isfinite(cells[m]["score"]) else "-"
            for m in methods
        ]
        lines.append(
            f"| {key[1]} / {key[0]} | {ref.baseline_latency * 1e3:.3f} ({ref.baseline.split()[-1]}) | "
            f"{ref.heft_latency * 1e3:.3f} | {ref.latency * 1e3:.3f} ({ref.gap:.2%}) | {ref.headroom:.3f} | "
            + " | ".join(scores)
            + " |"
        )
    return "\n".join(lines)


def folder_rows(folder: Path) -> list[ResultRow]:
    """The rows of a result folder: its ``results.jsonl`` (written by ``bench``), or the ``rows.jsonl`` of
    ``experiments.records.learned_vs_search`` (either row format: the older one is converted)."""
    from experiments.records.convert_rows import read_rows
    from experiments.runs import ResultStore

    if not (folder / "results.jsonl").exists() and (folder / "rows.jsonl").exists():
        return read_rows(folder / "rows.jsonl")
    return ResultStore(folder / "results.jsonl").rows()


def main(argv: list[str] | None = None) -> None:
    """Print the paper-style and quality tables of one or more result folders (or, with ``--suite``, the
    suite table)."""
    import argparse

    parser = argparse.ArgumentParser(description="Paper-style tables of benchmark results.")
    parser.add_argument(
        "folders",
        nargs="+",
        type=Path,
        help="folders holding results.jsonl, or a learned_vs_search rows.jsonl (a cell in several: the last wins)",
    )
    parser.add_argument("--suite", action="store_true", help="print the suite table (normalised scores)")
    parser.add_argument("--methods", nargs="+", help="only these methods (labels as printed, e.g. ppo_gnn)")
    args = parser.parse_args(argv)
    rows = merge_rows([r for folder in args.folders for r in folder_rows(folder)])
    if args.methods:
        rows = [r for r in rows if spec_label(r.method) in args.methods]
    summary = summarise(rows)
    if args.suite:
        print(suite_table(summary))
        return
    print(paper_table(summary))
    print()
    print(quality_table(summary))


if __name__ == "__main__":
    main()
