"""``normlimits <command>`` (also ``python -m normlimits <command>``): the project's one command line.

Every tool with a ``main`` is a command here; ``normlimits --help`` lists them. The modules' own
``python -m normlimits.<layer>.<module>`` entry points still work as aliases (the Makefile uses
this command line).
"""

from __future__ import annotations

import sys
from typing import Sequence

#: command -> (module whose ``main(argv)`` runs it, what it does in a few words)
COMMANDS = {
    "audit": ("normlimits.audit.command", "the paper's four yardsticks on any causal LM (--help)"),
    "compare": ("normlimits.audit.compare", "several audits side by side"),
    "bench": ("normlimits.experiments.bench", "the paper's five experiments at GPT-2 124M size, timed"),
    "standin": ("normlimits.model.standin", "train (or load) a stand-in and print its report"),
    "chapter": ("normlimits.book.chapter_command",
                "execute one chapter with the current settings; keep its notebook and figures' data"),
    "execution-cache": ("normlimits.book.execution_cache",
                        "drop the executed chapters when the settings, package or corpus changed"),
    "execute-chapters": ("normlimits.book.execute_chapters",
                         "execute the chapters the execution cache lacks, side by side, into it"),
    "timings": ("normlimits.book.timings", "each chapter's execution time in the last build"),
    "pdf": ("normlimits.book.pdf", "print the single-page build to one PDF"),
    "lab": ("normlimits.book.lab", "JupyterLab on the book, chapters as notebooks"),
    "colab": ("normlimits.book.colab", "the chapters as Colab notebooks"),
    "faults": ("normlimits.dev.faults", "plant the listed faults one by one; which checks catch each"),
    "mutants": ("normlimits.dev.mutants", "mutation testing of the computing modules"),
}
USAGE = "usage: normlimits <command> [options]   (normlimits <command> --help for a command's options)"


def usage() -> str:
    """The usage line and every command with what it does."""
    width = max(map(len, COMMANDS))
    lines = [USAGE, "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a command's ``main``; 2 with the usage for a missing or unknown command."""
    import importlib

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"normlimits: unknown command {command!r}; choose one of {sorted(COMMANDS)}\n{usage()}",
              file=sys.stderr)
        return 2
    result = importlib.import_module(COMMANDS[command][0]).main(rest)
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
