"""The command-line arguments of each ``placement-gym`` subcommand, one module per command.

A module here holds what its command's parser needs (``SUMMARY``, ``add_arguments`` and the constants the
arguments name, such as ``bench``'s presets) and imports nothing heavy: ``placement-gym --help``, every
subcommand's ``--help`` and a refused argument answer without loading torch, OpenVINO or SB3. The command
itself (``experiments.<command>.run_from_args``) is imported only once the arguments are parsed.
"""
