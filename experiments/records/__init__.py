"""The tables of record and the pages made from stored rows: ``docs/RESULTS.md``'s tables
(:mod:`experiments.records.tables`), the leaderboard pages, learning curves, and the validation that replays
every row before it counts.
"""
