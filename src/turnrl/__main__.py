"""``python -m turnrl``: the same command line as ``turnrl``."""

from turnrl.cli import main

main()
