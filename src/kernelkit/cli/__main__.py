"""``python -m kernelkit.cli``."""

from . import main

main()
