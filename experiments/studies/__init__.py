"""Research records: one-off studies and diagnostics behind the notes in ``docs/research-notes.md``.

No table of record reads them (those scripts sit in ``experiments/records/``); see ``README.md`` here.
"""
