"""``python -m kernelkit``: the ``kernelkit`` command line (:mod:`kernelkit.cli`).

The program name is fixed to ``kernelkit``, so usage lines, ``--version`` and error
messages read exactly as they do for the installed ``kernelkit`` console script.
"""

from kernelkit.cli import main

if __name__ == "__main__":
    main(prog_name="kernelkit")
