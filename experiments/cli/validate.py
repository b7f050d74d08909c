"""Validate result rows: check what each row claims, replay its placement, and rerun the deterministic methods.

Every row of the given files is rejected, with one line naming the file, line and reason, when:

* it is not a valid row (not JSON, a missing or mistyped field);
* its provenance does not hold (:mod:`experiments.records.provenance`): an unknown protocol or tier, a budget that
  is not its tier's, a seed outside the protocol's, a track its method does not declare, a code commit
  not in the repository's history, a recorded module its spec does not name or in neither record format,
  a missing or NaN score, a score above the task's proven lower bound's
  or a latency below that bound; or, among the rows given, a repeated cell or a seed set that differs
  between a method's tasks or does not start at seed 0;
* its backend is not ``simulated`` (only the simulator is deterministic, so only its rows replay);
* its task is not a task of the protocol it was run under (v1's train and held-out tasks; transfer-v1's
  held-out tasks), or its model, platform or coarsening cannot be built;
* its graph version is not the model's current one, or its group count is not the graph's, or the task's
  content hash it records (``task_sha256``: graph and every platform figure) is not the task's;
* its placement is malformed (wrong length, a device index out of range);
* the replayed latency differs from the stored one (relative tolerance :data:`REL_TOL`; an infeasible
  placement must be stored as infeasible), or the stored normalised score differs from the replayed one;
* it spent more evaluations than its budget;
* its method is a cheap deterministic registered method (:data:`RERUN_METHODS`) and running it again
  (:func:`rerun_row`) does not give the stored placement and evaluation count.

Verdicts of single rows are cached per version of the code (:class:`VerdictCache`), so a second validation
of unchanged rows on unchanged code replays nothing. ``--rerun N`` also reruns N rows sampled with
``--sample-seed``, whatever their method, end to end, and reports each that differs.

A results file never makes validate import code: rows whose method names a module outside placement-gym
(an agent of your own, ``ppo_torch:train``, ``stable_baselines3:PPO:...``) are drawn only when
``--trust-modules`` names that module (imported as ``bench`` imports it: installed first, then the current
folder; one that cannot be imported is an error naming it). The summary line counts the accepted rows
left out for an untrusted module. Reruns are never cached, so an edited module is the one rerun. A row
records the identity of each such module (``versions["module:<name>"]``: the sha256 of its file, or an
installed distribution's version, :func:`placement_gym.results.module_versions`); a rerun that differs
names every module whose identity is not the one imported now.

A rerun is judged by the CPU that made its row: rows record their CPU (``versions.cpu_fingerprint``, see
:func:`placement_gym.results.cpu_identity`), and a seeded learner's row repeats only on the kind of CPU
that made it. Each rerun prints ``IDENTICAL``, ``DIFFERS`` (the row was made on this CPU, or the rerun
could not run: the row does not repeat where it should), ``OTHER-CPU`` (it differs, and the row was made on
another CPU) or ``UNKNOWN-CPU`` (it differs, and the row records no CPU), and every line says which CPU
made the row.

Exit status:

* 0: every row is accepted and every rerun is identical;
* 2: a row is rejected, or a rerun ``DIFFERS`` (an error line names the counts);
* 3: every row is accepted and the only reruns that differ are ``OTHER-CPU`` or ``UNKNOWN-CPU``: nothing
  is shown broken, but those rows cannot be checked on this machine.

Usage:
    placement-gym validate results/leaderboard/standard/*.jsonl
    placement-gym validate --rerun 30 results/leaderboard/standard/*.jsonl
    cd examples && placement-gym validate --rerun 5 --trust-modules ppo_torch ../results/leaderboard/standard/ppo_torch.jsonl
"""

from __future__ import annotations

import argparse
import sys

from experiments.cli.arguments import module_main
from experiments.cli.parsers.validate import add_arguments
from experiments.records import validation
from placement_gym.errors import RecordError

#: Exit status when the only reruns that differ are of rows made on another or an unrecorded CPU.
UNVERIFIED = 3


def run_from_args(args: argparse.Namespace) -> None:
    if args.rerun < 0:
        raise RecordError(f"--rerun {args.rerun}: give a number of rows >= 0")
    names = list(dict.fromkeys(n.strip() for given in args.trust_modules for n in given.split(",")))
    if names and not args.rerun:
        raise RecordError("--trust-modules only widens the --rerun sample: give --rerun N too")
    trusted = validation.trust_modules(names)  # before anything runs: an unknown module fails now
    for name, path in trusted.items():
        print(f"trusted module {name}: {path}")
    verdicts = validation.validate(args.rows, cache=validation.VerdictCache(enabled=not args.no_cache))
    for v in verdicts:
        if not (args.quiet and v.ok):
            print(v.line())
    if not verdicts:
        raise RecordError(f"no rows in {', '.join(map(str, args.rows))}")
    rejected = sum(not v.ok for v in verdicts)
    summary = validation.rerun_sample(verdicts, args.rerun, args.sample_seed, trusted) if args.rerun else None
    failed = summary.failed if summary else 0
    if rejected or failed:
        reruns = ""
        if summary:
            reruns = f", {failed} of {summary.sampled} reruns differ on the CPU that made them"
            reruns += f", {summary.unverified} more differ from rows made elsewhere" if summary.unverified else ""
        raise RecordError(
            f"{rejected} of {len(verdicts)} rows rejected{reruns} (see the REJECTED and DIFFERS lines above)"
        )
    if summary and summary.unverified:
        print(
            f"placement-gym: all {len(verdicts)} rows accepted, but {summary.unverified} of {summary.sampled} "
            "reruns differ from rows made on another CPU or on an unrecorded one (the OTHER-CPU and UNKNOWN-CPU "
            "lines above): not checkable on this machine",
            file=sys.stderr,
        )
        raise SystemExit(UNVERIFIED)
    print(f"all {len(verdicts)} rows reproduce")


def main(argv: list[str] | None = None) -> int:
    return module_main(__doc__, add_arguments, run_from_args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
