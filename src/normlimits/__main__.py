"""``python -m normlimits <command>`` (also the ``normlimits`` console script).

Commands: ``audit`` (:mod:`normlimits.audit`: the paper's yardsticks on any causal LM) and
``compare`` (:mod:`normlimits.compare`: several audits side by side).
"""

from __future__ import annotations

import sys
from typing import Sequence

COMMANDS = {"audit": "normlimits.audit", "compare": "normlimits.compare"}
USAGE = f"usage: normlimits {{{','.join(COMMANDS)}}} [options]  (normlimits <command> --help)"


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a command's ``main``; 2 with a usage line for a missing or unknown command."""
    import importlib

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"normlimits: unknown command {command!r}; choose one of {sorted(COMMANDS)}\n{USAGE}",
              file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[command]).main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
