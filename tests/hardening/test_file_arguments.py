"""One path from file arguments to one-line errors, for every subcommand: the argument types of
experiments.cli.arguments (in_file, in_path, out_file, out_folder) refuse a path that cannot be used while the
command line is parsed, and run_command turns an OSError on a named file later on into one line."""

from __future__ import annotations

import errno
import os

import pytest

from experiments.cli import arguments, main

LONG = "x" * 300


@pytest.fixture
def paths(tmp_path, monkeypatch):
    """A file, a folder, a read-only folder (read-only for root too: os.access is told so) and a non-UTF-8 file."""
    (tmp_path / "a_file").write_text("hi\n")
    (tmp_path / "a_folder").mkdir()
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    real_access = os.access

    def access(path, mode, *args, **kwargs):
        if os.fspath(path) == os.fspath(read_only) and mode & os.W_OK:
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(arguments.os, "access", access)
    (tmp_path / "latin1.jsonl").write_bytes(b'{"model": "caf\xe9"}\n\xff\xfe\n')
    yield tmp_path
    read_only.chmod(0o755)


CASES = [
    (["datasets", "--path", "{a_file}"], "is a file; give a folder"),
    (["datasets", "--path", "{tmp}/" + LONG], "has 300 bytes; the file system allows at most"),
    (["datasets", "--path", "{read_only}/minari"], "cannot be written"),
    (["datasets", "--path", "{a_file}/minari"], "is a file, not a folder"),
    (["place", "--model", "tiny_cnn", "--platform", "cpu-dgpu", "--out", "{a_folder}"], "is a folder; give the path of a file"),
    (["place", "--model", "tiny_cnn", "--platform", "cpu-dgpu", "--out", "{read_only}/r.json"], "cannot be written"),
    (["place", "--model", "tiny_cnn", "--platform", "cpu-dgpu", "--policy", "{tmp}/missing"], "does not exist"),
    (["bench", "--out", "{a_file}"], "is a file; give a folder"),
    (["bench", "--out", "{tmp}/" + LONG + "/x"], "has 300 bytes"),
    (["train", "--agent", "heft", "--env", "DevicePlacementSim-tiny_cnn-v1", "--out", "{read_only}/run"], "cannot be written"),
    (["validate", "{a_folder}"], "is a folder; give a file"),
    (["validate", "{tmp}/missing.jsonl"], "does not exist"),
    (["show", "{a_folder}"], "is a folder; give a file"),
    (["show", "{a_file}", "--png", "{a_folder}"], "is a folder; give the path of a file"),
    (["leaderboard", "--out", "{a_folder}"], "is a folder; give the path of a file"),
    (["leaderboard", "--results", "{a_file}"], "is a file; give a folder"),
]  # fmt: skip


@pytest.mark.parametrize("argv, message", CASES, ids=[" ".join(a[:3])[:40] + f"-{i}" for i, (a, _) in enumerate(CASES)])
def test_a_path_that_cannot_be_used_is_one_line(paths, argv, message, capsys):
    names = {"tmp": paths, "a_file": paths / "a_file", "a_folder": paths / "a_folder", "read_only": paths / "read_only"}
    assert main([a.format(**names) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("placement-gym: error: ") and message in err, err
    assert len(err) < 600  # a 300-character name is shortened in the message


def test_validate_on_a_non_utf8_file_is_one_line_per_row(paths, capsys):
    assert main(["validate", "--no-cache", str(paths / "latin1.jsonl")]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and err.count("\n") == 1
    assert out.count("REJECTED") == 2


def test_an_os_error_on_a_named_file_later_is_one_line(capsys):
    """The backstop: a file that became unusable after the arguments were checked (a race, a full disk)."""

    def command(argv):
        raise PermissionError(errno.EACCES, "Permission denied", "/some/where/results.jsonl")

    assert arguments.run_command(command, []) == 2
    assert capsys.readouterr().err == (
        "placement-gym: error: cannot use /some/where/results.jsonl: Permission denied (--debug shows the traceback)\n"
    )

    def bug(argv):
        raise OSError(errno.EBADF, "Bad file descriptor")  # no file named: a bug, which keeps its traceback

    with pytest.raises(OSError):
        arguments.run_command(bug, [])


def test_an_existing_output_file_can_be_overwritten(tmp_path):
    """A file written once (mode 644, no execute bit) is accepted again: the second ``--out`` of a rerun."""
    page = tmp_path / "page.md"
    page.write_text("old\n")
    page.chmod(0o644)
    assert arguments.out_file(str(page)) == page
    folder = tmp_path / "rows"
    folder.mkdir()
    assert arguments.out_folder(str(folder)) == folder
