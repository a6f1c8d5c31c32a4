"""``python -m kernelkit.cli``."""

from . import main

main(prog_name="kernelkit")
