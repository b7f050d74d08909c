"""The tables of record: rendered from their rows, stale rows refused, the docs and the README in step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.records import tables


def test_the_tables_of_record_match_their_rows_and_the_readme() -> None:
    assert tables.check() == []


def _copy_rows(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(tables.RESULTS / name, folder)
    return folder


def test_stale_or_missing_rows_fail(tmp_path: Path) -> None:
    with pytest.raises(tables.StaleRows, match="missing"):
        tables.result_rows(tmp_path)
    folder = _copy_rows("heldout-scores", tmp_path)
    path = folder / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["groups"] += 1  # a row of another graph of the model
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(tables.StaleRows, match="groups"):
        tables.result_rows(folder)
    rows[0]["groups"] -= 1
    rows[0]["graph_version"] = 0  # a graph version without a stored optimum
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(tables.StaleRows, match="no stored reference optimum"):
        tables.result_rows(folder)

    guided = _copy_rows("guided", tmp_path)
    lines = (guided / "rows.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["optimum_ms"] *= 1.01  # scored against an optimum the task no longer has
    (guided / "rows.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    with pytest.raises(tables.StaleRows, match="optimum"):
        tables.guided_rows(guided)

    curves = _copy_rows("curves", tmp_path)
    lines = (curves / "rows.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["optimum_ms"] *= 1.01
    (curves / "rows.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    with pytest.raises(tables.StaleRows, match="another graph or optimum"):
        tables.BY_NAME["curves"].render(curves)


def test_a_table_edited_by_hand_or_a_drifting_quote_fails(tmp_path: Path) -> None:
    text = tables.RESULTS_MD.read_text()
    edited = tmp_path / "RESULTS.md"
    edited.write_text(text.replace("| 0.71% |", "| 1.19% |", 1))
    readme = tmp_path / "README.md"
    readme.write_text(
        '<!-- quote:optima row="bert | multi-accel" column="gap" -->1.19%<!-- /quote -->\n'
        '<!-- quote:optima row="bert | nowhere" column="gap" -->0.71%<!-- /quote -->\n'
    )
    problems = tables.check(edited, readme)
    assert any("table 'optima' differs from its rows" in p for p in problems)
    assert any("quotes '1.19%'" in p and "says '0.71%'" in p for p in problems)
    assert any("0 rows start with 'bert | nowhere'" in p for p in problems)


def test_cell_reads_a_row_by_its_first_cells() -> None:
    table = (
        "| model | platform | gap |\n|---|---|---|\n| bert | cpu-igpu | 0.00% |\n| bert | multi-accel | 0.71% |"
    )
    assert tables.cell(table, "bert | multi-accel", "gap") == "0.71%"
    with pytest.raises(KeyError, match="2 rows"):
        tables.cell(table, "bert", "gap")
    with pytest.raises(KeyError, match="no column"):
        tables.cell(table, "bert | cpu-igpu", "optimum")
