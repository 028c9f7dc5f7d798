"""Planted scientific faults: does a broken result break the build? (``python -m normlimits.dev.faults``)

``tools/faults.toml`` lists bugs a real change could introduce (a temperature multiplied instead
of divided, the causal mask dropped, ...), each as exact source edits. For each fault this module
copies the package (``src/``) to a temporary folder, applies the edits there (an edit whose old
text does not occur exactly once stops the run with an error: the list must follow the code),
and runs, with the copy first on ``PYTHONPATH``:

- the unit tests listed for the fault (pytest node ids): caught when one fails or errors;
- the chapters listed for it, executed as notebooks the way the strict build executes them (the
  first cell that raises stops the chapter; the chapters' checks are assertions), on the cached
  stand-in: caught when a cell raises, or when a registered claim of the chapter got no ledger
  row (the build's expected-claims check).

Every run gets its own cache folder holding a *copy* of the stand-in (and of cached temperature
runs), its own ledger folder and no capture cache, so a fault can neither read results computed
by correct code nor leave its own behind. A baseline run of every listed check on the unmodified
copy comes first: a check that fails without a fault cannot catch one (such catches are reported
as "fails at baseline", not as caught).

The report (a table on stdout, JSON with ``--json``, default ``_build/faults.json``) gives, per
fault, where it was caught: the failing test ids and the chapter with its failing check.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from normlimits.core.paths import checkout_root
from normlimits import claims
from normlimits.claims import ledger
from normlimits.core.outputs import FileOutput, OutputError
from normlimits.core.settings import cache_dir

#: the repository (faults edit a copy of its src/ and run its tests); for an installed copy, the current folder
ROOT = checkout_root() or Path.cwd()
FAULTS_FILE = ROOT / "tools" / "faults.toml"
DEFAULT_JSON = ROOT / "_build" / "faults.json"
#: cache sub-folders copied into each run's private cache (never linked: a fault must not write there)
CACHED_RESULTS = ("standin", "temperature-training")
CHAPTER_TIMEOUT = 1800
TESTS_TIMEOUT = 1200


class FaultError(ValueError):
    """The fault list is malformed, or an edit does not apply to the code as it is."""


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (which must occur exactly once) by ``new`` in ``file`` (relative to src/)."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Fault:
    """One planted fault: its edits and the checks expected to catch it."""

    id: str
    issue: str
    what: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...] = ()
    chapters: tuple[str, ...] = ()
    note: str = ""


@dataclass
class CheckResult:
    """One check of one fault. ``caught``: True (it failed), False (it passed), None (the check
    itself could not run: a runner error, with ``detail`` saying why)."""

    kind: str          # "tests" or "chapter"
    target: str        # the node ids joined, or the chapter name
    caught: bool | None
    detail: str = ""
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0


# ------------------------------------------------------------------------------ the fault list
def load_faults(path: Path | str = FAULTS_FILE) -> list[Fault]:
    """Parse the fault list; raises :class:`FaultError` naming the fault and the field at fault."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise FaultError(f"{path}: not valid TOML ({exc})") from None
    faults, seen = [], set()
    for i, entry in enumerate(data.get("fault", [])):
        fid = entry.get("id") or f"#{i + 1}"
        for name in ("id", "issue", "what"):
            if not str(entry.get(name, "")).strip():
                raise FaultError(f"{path}: fault {fid} has no {name!r}")
        if fid in seen:
            raise FaultError(f"{path}: fault id {fid!r} appears twice")
        seen.add(fid)
        edits = []
        for edit in entry.get("edit", []):
            if not edit.get("file") or not edit.get("old"):
                raise FaultError(f"{path}: fault {fid}: every edit needs 'file' and a non-empty 'old'")
            if edit.get("new", "") == edit["old"]:
                raise FaultError(f"{path}: fault {fid}: an edit of {edit['file']} changes nothing")
            edits.append(Edit(edit["file"], edit["old"], edit.get("new", "")))
        if not edits:
            raise FaultError(f"{path}: fault {fid} has no [[fault.edit]]")
        tests, chapters = tuple(entry.get("tests", ())), tuple(entry.get("chapters", ()))
        if not tests and not chapters:
            raise FaultError(f"{path}: fault {fid} lists neither tests nor chapters to catch it")
        faults.append(Fault(fid, entry["issue"], entry["what"], tuple(edits), tests, chapters,
                            entry.get("note", "")))
    if not faults:
        raise FaultError(f"{path}: no [[fault]] entries")
    return faults


def apply_edits(fault: Fault, src: Path) -> None:
    """Apply ``fault``'s edits to the package copy under ``src`` (the folder holding normlimits/).

    Each ``old`` must occur exactly once in its file (after the fault's earlier edits), otherwise
    :class:`FaultError` says how often it occurs: the list no longer matches the code.
    """
    for edit in fault.edits:
        path = Path(src) / edit.file
        if not path.is_file():
            raise FaultError(f"fault {fault.id}: {edit.file} does not exist under {src}; fix its "
                             "'file' in the fault list")
        text = path.read_text()
        count = text.count(edit.old)
        if count != 1:
            raise FaultError(f"fault {fault.id}: the text to replace occurs {count} times in "
                             f"{edit.file} (it must occur exactly once): {edit.old[:80]!r}; "
                             "update the fault list to the code as it is now")
        path.write_text(text.replace(edit.old, edit.new))


def copy_package(src: Path, dest: Path) -> Path:
    """Copy the package sources ``src`` (the repository's src/) to ``dest``/src; returns it."""
    target = Path(dest) / "src"
    shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    return target


def prepare_cache(dest: Path, real_cache: Path | None) -> Path:
    """A private cache folder under ``dest`` with copies of the real cache's stand-in and cached
    temperature runs (lock files left out); the real cache is only read."""
    cache = Path(dest) / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for name in CACHED_RESULTS:
        source = Path(real_cache) / name if real_cache is not None else None
        if source is not None and source.is_dir():
            shutil.copytree(source, cache / name, ignore=shutil.ignore_patterns("*.lock", ".tmp-*", ".old-*", ".*.tmp-*"))
    return cache


def has_standin(real_cache: Path) -> bool:
    """Whether the real cache holds a trained stand-in (a checkpoint folder, not just a lock)."""
    folder = Path(real_cache) / "standin"
    return folder.is_dir() and any(p.is_dir() and not p.name.startswith(".") for p in folder.iterdir())


def run_environment(src: Path, cache: Path, ledger: Path) -> dict[str, str]:
    """The environment of one run: the copy first on PYTHONPATH, private cache and ledger, no
    capture cache, the stand-in as the model (unless NORMLIMITS_MODEL says otherwise)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(NORMLIMITS_CACHE=str(cache), NORMLIMITS_LEDGER_DIR=str(ledger),
               NORMLIMITS_CAPTURE_CACHE="off", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.setdefault("NORMLIMITS_MODEL", "standin")
    return env


def imported_from(env: dict[str, str], cwd: Path) -> Path:
    """Where ``import normlimits`` resolves under ``env`` (without importing it)."""
    out = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                          "print(u.find_spec('normlimits').origin)"],
                         env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return Path(out.stdout.strip()).resolve()


# ------------------------------------------------------------------------------------ checks
_FAILED = re.compile(r"^(FAILED|ERROR) (\S+)")


def parse_pytest(output: str) -> list[str]:
    """The failing or erroring test ids of pytest's short summary (``-rfE``)."""
    return [m.group(2) for line in output.splitlines() if (m := _FAILED.match(line))]


def run_tests(node_ids: Sequence[str], env: dict[str, str], root: Path,
              timeout: float = TESTS_TIMEOUT, first: bool = True) -> CheckResult:
    """Run the tests ``node_ids`` (stopping at the first failure when ``first``); caught when
    pytest reports failures or errors (exit 1 or 2)."""
    start = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "--no-header",
               *(["-x"] if first else []), *node_ids]
    try:
        proc = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return CheckResult("tests", " ".join(node_ids), None, f"timed out after {timeout:.0f} s",
                           seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    failed = parse_pytest(output)
    if proc.returncode == 0:
        return CheckResult("tests", " ".join(node_ids), False, "passed", seconds=seconds)
    if proc.returncode in (1, 2) and (failed or "error" in output.lower()):
        detail = failed[0] if failed else output.strip().splitlines()[-1]
        return CheckResult("tests", " ".join(node_ids), True, detail, failed, seconds)
    tail = " | ".join(output.strip().splitlines()[-3:])
    return CheckResult("tests", " ".join(node_ids), None,
                       f"pytest exit {proc.returncode} (no tests ran?): {tail}", seconds=seconds)


def run_chapter(chapter: str, env: dict[str, str], root: Path, workdir: Path,
                timeout: float = CHAPTER_TIMEOUT) -> CheckResult:
    """Execute book/<chapter>.md as a notebook in a subprocess (see :func:`execute_chapter`)."""
    start = time.perf_counter()
    report = Path(workdir) / f"{chapter}.result.json"
    command = [sys.executable, "-m", "normlimits.dev.faults", "--execute", str(root / "book" / f"{chapter}.md"),
               "--result", str(report)]
    try:
        proc = subprocess.run(command, env=env, cwd=root / "book", capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return CheckResult("chapter", chapter, None, f"timed out after {timeout:.0f} s",
                           seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if not report.is_file():
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        return CheckResult("chapter", chapter, None, f"the chapter runner failed: {tail}", seconds=seconds)
    result = json.loads(report.read_text())
    return CheckResult("chapter", chapter, result["caught"], result["detail"], result.get("failed", []),
                       seconds)


def execute_chapter(path: Path) -> dict:
    """Execute one chapter (MyST notebook) top to bottom, stopping at the first cell that raises,
    then check that every registered claim of the chapter got a ledger row.

    Returns ``{"caught", "detail", "failed", "package"}``: ``caught`` True when a cell raised or a
    claim has no row; ``detail`` the exception (type and first line) and the cell's first line.
    """
    import jupytext
    import nbclient
    from nbclient.exceptions import CellExecutionError

    import normlimits

    path = Path(path)
    chapter = path.stem
    nb = jupytext.read(path)
    client = nbclient.NotebookClient(nb, timeout=CHAPTER_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    package = str(Path(normlimits.__file__).resolve().parent)
    try:
        client.execute()
    except CellExecutionError:
        for index, cell in enumerate(nb.cells):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    message = (output.get("evalue") or "").strip().splitlines()
                    first = message[0] if message else ""
                    source = next((s for s in cell.source.splitlines() if s.strip() and not s.startswith(":")), "")
                    return {"caught": True, "failed": [f"cell {index}"], "package": package,
                            "detail": f"{output.get('ename')}: {first[:200]} (cell {index}: {source.strip()[:80]})"}
        return {"caught": True, "failed": [], "package": package, "detail": "a cell raised (no error output)"}
    rows = claims.collect(ledger.ledger_dir(), [chapter])
    missing = claims.missing_claims(rows, [chapter])
    if missing:
        return {"caught": True, "failed": missing, "package": package,
                "detail": f"ledger: registered claims without a row: {', '.join(missing)}"}
    return {"caught": False, "failed": [], "package": package, "detail": "executed, every claim recorded"}


# ------------------------------------------------------------------------------------ a run
def run_fault(fault: Fault | None, checks: dict, *, root: Path = ROOT, real_cache: Path | None = None,
              keep: bool = False) -> dict:
    """Apply ``fault`` (None: the baseline, no edit) to a fresh copy of ``root``/src and run
    ``checks`` ({"tests": [...], "chapters": [...]}). Returns the fault's report entry."""
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f"faults-{fault.id if fault else 'baseline'}-"))
    try:
        src = copy_package(root / "src", work)
        if fault is not None:
            apply_edits(fault, src)
        env = run_environment(src, prepare_cache(work, real_cache), work / "ledger")
        origin = imported_from(env, root)
        if src.resolve() not in origin.parents:
            raise FaultError(f"normlimits imports from {origin}, not from the faulted copy under {src}: "
                             "something on sys.path (a .pth file?) comes before PYTHONPATH")
        results = []
        if checks.get("tests"):
            results.append(run_tests(checks["tests"], env, root, first=fault is not None))
        for chapter in checks.get("chapters", ()):
            results.append(run_chapter(chapter, env, root, work))
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    entry = {"id": fault.id if fault else "baseline", "checks": [asdict(r) for r in results],
             "seconds": time.perf_counter() - start}
    if fault is not None:
        entry.update(issue=fault.issue, what=fault.what, note=fault.note,
                     edits=[asdict(e) for e in fault.edits])
    return entry


def baseline_failures(base: dict | None) -> set[str]:
    """The checks that fail without any fault: failing test ids and chapter names."""
    failing: set[str] = set()
    for c in (base or {}).get("checks", []):
        if c["caught"] is not False:
            failing |= set(c["failed"]) if c["kind"] == "tests" and c["failed"] else {c["target"]}
    return failing


def _counts(check: dict, failing: set[str]) -> bool:
    """Whether a failed check counts as a catch: it must fail where the baseline passes."""
    if not check["caught"]:
        return False
    if check["kind"] == "chapter":
        return check["target"] not in failing
    return bool(set(check["failed"]) - failing) or (not check["failed"] and check["target"] not in failing)


def verdict(entry: dict, failing: set[str]) -> str:
    """'caught' when a check that passes at baseline failed; else 'SLIPPED', 'error' when a
    check could not run, or 'not run' when no check was selected (``--skip-tests`` on a fault
    that only tests catch)."""
    if not entry["checks"]:
        return "not run"
    if any(_counts(c, failing) for c in entry["checks"]):
        return "caught"
    if any(c["caught"] is None for c in entry["checks"]):
        return "error"
    return "SLIPPED"


def where_caught(entry: dict, failing: set[str]) -> str:
    """One line: the checks that caught the fault and how."""
    parts = []
    for c in entry["checks"]:
        if c["caught"] is None:
            parts.append(f"{c['target']}: ERROR {c['detail']}")
        elif c["caught"] and not _counts(c, failing):
            parts.append(f"{c['target'][:40]}: fails at baseline")
        elif c["caught"] and c["kind"] == "tests":
            parts.append("tests: " + (", ".join(t.split("/")[-1] for t in c["failed"]) or c["detail"]))
        elif c["caught"]:
            parts.append(f"chapter {c['target']}: {c['detail']}")
    return "; ".join(parts) or "nothing"


def run_all(faults: Sequence[Fault], *, root: Path = ROOT, real_cache: Path | None = None,
            skip_tests: bool = False, skip_chapters: bool = False, baseline: bool = True,
            log=print) -> dict:
    """Every fault through its checks (after a baseline of all of them); returns the report."""
    start = time.perf_counter()

    def checks_of(tests, chapters):
        return {"tests": [] if skip_tests else list(tests), "chapters": [] if skip_chapters else list(chapters)}

    base = None
    if baseline:
        tests = list(dict.fromkeys(t for f in faults for t in f.tests))
        chapters = list(dict.fromkeys(c for f in faults for c in f.chapters))
        log(f"baseline (no fault): {0 if skip_tests else len(tests)} test ids, chapters "
            f"{'none' if skip_chapters or not chapters else ', '.join(chapters)}")
        base = run_fault(None, checks_of(tests, chapters), root=root, real_cache=real_cache)
        for c in base["checks"]:
            log(f"  {c['kind']} {c['target'][:50]}: {'passes' if c['caught'] is False else 'FAILS: ' + c['detail']}"
                f" ({c['seconds']:.0f} s)")
    failing = baseline_failures(base)
    entries = []
    for fault in faults:
        entry = run_fault(fault, checks_of(fault.tests, fault.chapters), root=root, real_cache=real_cache)
        entry["verdict"] = verdict(entry, failing)
        entry["where"] = where_caught(entry, failing)
        log(f"{fault.id}: {entry['verdict']} ({entry['seconds']:.0f} s) {entry['where']}")
        entries.append(entry)
    caught = sum(e["verdict"] == "caught" for e in entries)
    return {"faults": entries, "baseline": base, "baseline_failures": sorted(failing), "caught": caught,
            "total": sum(e["verdict"] != "not run" for e in entries), "seconds": time.perf_counter() - start}


def format_table(report: dict) -> str:
    """The report as a plain-text table: fault, verdict, seconds, where caught."""
    rows = [(e["id"], e["verdict"], f"{e['seconds']:.0f}", e["where"]) for e in report["faults"]]
    width = max([len("fault")] + [len(r[0]) for r in rows])
    lines = [f"{'fault':<{width}}  {'verdict':<8} {'s':>4}  where caught", "-" * (width + 30)]
    lines += [f"{r[0]:<{width}}  {r[1]:<8} {r[2]:>4}  {r[3]}" for r in rows]
    skipped = len(report["faults"]) - report["total"]
    lines.append(f"{report['caught']} of {report['total']} faults caught in {report['seconds']:.0f} s"
                 + (f" ({skipped} not run: no check selected)" if skipped else ""))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m normlimits.dev.faults", description=__doc__.split("\n")[0])
    parser.add_argument("--faults", type=Path, default=FAULTS_FILE, help="the fault list (TOML)")
    parser.add_argument("--only", default="", help="comma-separated fault ids (default: all)")
    parser.add_argument("--skip-tests", action="store_true", help="run only the chapters")
    parser.add_argument("--skip-chapters", action="store_true", help="run only the unit tests")
    parser.add_argument("--no-baseline", action="store_true", help="skip the baseline run")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write the report")
    parser.add_argument("--execute", type=Path, help=argparse.SUPPRESS)   # worker: one chapter
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.execute:
        args.result.write_text(json.dumps(execute_chapter(args.execute)))
        return 0

    try:                                      # checked (and locked) before the long runs
        output = FileOutput(args.json, tool="python -m normlimits.dev.faults", option="--json",
                            is_ours=_is_faults_report)
    except OutputError as exc:
        parser.error(str(exc))
    try:
        return _main(args, parser, output)
    finally:
        output.abort()


def _is_faults_report(path: Path) -> bool:
    """Whether ``path`` holds an earlier report of this tool (safe to replace)."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(report, dict) and {"faults", "caught", "total"} <= set(report)


def _main(args, parser, output) -> int:
    faults = load_faults(args.faults)
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = sorted(set(wanted) - {f.id for f in faults})
        if unknown:
            parser.error(f"--only: unknown fault ids {unknown}; the list has {[f.id for f in faults]}")
        faults = [f for f in faults if f.id in wanted]
    for fault in faults:                       # every anchor is checked before anything runs
        with tempfile.TemporaryDirectory() as tmp:
            apply_edits(fault, copy_package(ROOT / "src", Path(tmp)))

    model = os.environ.get("NORMLIMITS_MODEL", "standin").strip() or "standin"
    if not args.skip_chapters and model == "standin" and not has_standin(cache_dir()):
        raise FaultError(f"no trained stand-in in {cache_dir() / 'standin'}: every fault would train its "
                         "own (10 minutes each). Run `make standin` first, or pass --skip-chapters.")
    report = run_all(faults, real_cache=cache_dir(), skip_tests=args.skip_tests,
                     skip_chapters=args.skip_chapters, baseline=not args.no_baseline)
    print(format_table(report))
    path = output.commit(json.dumps(report, indent=1).encode())
    print(f"report: {path}")
    return 0 if report["caught"] == report["total"] else 1


if __name__ == "__main__":
    sys.exit(main())
