"""Issue #12's matrix: each finding of the adversarial review with the test that keeps it fixed.

One module per section of the issue: ``test_security`` (1-3), ``test_data`` (4-6), ``test_faults`` (7),
``test_input`` (8-10), ``test_cli`` (11 and the CLI bugs of issue #9).
"""
