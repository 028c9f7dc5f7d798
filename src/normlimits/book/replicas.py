"""A chapter's verdicts on the book's other models: the chapter itself, re-executed in a child kernel.

A chapter grades its claims on its primary model (GPT-2 where it can be had; offline the real
pretrained SmolLM2-135M). The same registered rules are applied to the *control* models (by
default the stand-in, the byte-level GPT-2 trained here) by executing the chapter's own MyST
source again in a fresh Jupyter kernel with the model setting changed, its ledger rows sent to a
temporary folder. :func:`replicate` then records those rows in the chapter's ledger as variants
named by the model. So every number on every model comes from one code path: no chapter computes
"the stand-in's numbers" by a second, shorter route that could drift from the first.

A replica is a label and the settings it changes (:class:`Replica`): ``NORMLIMITS_REPLICAS`` lists
the models (comma-separated; ``off`` for none; default :data:`DEFAULT_REPLICAS`). Inside a replica
(``NORMLIMITS_REPLICA_OF`` set) :func:`replicate` does nothing, so a child never spawns children.
A replica whose model is the chapter's own primary model is skipped.

The child inherits every other setting (corpus, window count, caches), so its forward passes go
through the same capture cache. The replicas run side by side, as many at once as the build has
threads (``NORMLIMITS_THREADS``, default 2: :func:`concurrent_replicas`), each child with its
share of the threads: on 2 cores two one-thread replicas take 32 s where the same two, one after
the other on two threads each, take 56 s (the vanishing chapter on the stand-in and Gemma 3 270M),
because a chapter's many small tensor operations do not use a second thread well. Each child's
environment is given to its kernel alone (the parent's is never changed). A failing child fails
the chapter, with the child's error, once the others have finished.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from normlimits.core.settings import MODEL_ENV, THREADS_ENV, SettingError, thread_count
from normlimits import claims
from normlimits.claims import ledger
from normlimits.core.paths import book_root
from normlimits.book.kernels import run_in_kernel

REPLICAS_ENV = "NORMLIMITS_REPLICAS"
REPLICA_OF_ENV = "NORMLIMITS_REPLICA_OF"
#: the models every model-dependent chapter is replayed on by default (its primary model left
#: out): the stand-in as the control, and the two real pretrained families offline, so a claim is
#: graded on both SmolLM2-135M and Gemma 3 270M whichever of them (or GPT-2) is the primary
DEFAULT_REPLICAS = ("standin", "smollm2-135m", "gemma3-270m")
#: seconds a child's cell may run (as the book's own execution timeout)
CELL_TIMEOUT = 1500

__all__ = ["REPLICAS_ENV", "REPLICA_OF_ENV", "DEFAULT_REPLICAS", "Replica", "ReplicaError",
           "is_replica", "replica_models", "execute_chapter", "chapter_source", "replicate",
           "ReplicaRun", "glue_keys_used", "glue_keys_made"]

GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")
GLUE_DIRECTIVE = re.compile(r"^[`:]{3,}\{glue(?::\w+)?\}\s+(\S+)", re.M)


class ReplicaError(AssertionError):
    """A replica of a chapter failed; the message names the chapter, the replica and the error."""


@dataclass(frozen=True)
class Replica:
    """One replay of a chapter: ``label`` names it (the ledger variant), ``env`` the settings it
    changes (e.g. ``{"NORMLIMITS_MODEL": "standin"}``)."""

    label: str
    env: Mapping[str, str]

    def __post_init__(self) -> None:
        if not self.label.strip():
            raise ValueError("a replica needs a label (the ledger variant it is recorded under)")


@dataclass
class ReplicaRun:
    """What one replica gave: its ledger rows (as the child wrote them) and its wall time (s)."""

    replica: Replica
    rows: list[dict]
    seconds: float
    recorded: list[dict] = field(default_factory=list)


def is_replica() -> bool:
    """Whether this process runs inside a replica (``NORMLIMITS_REPLICA_OF`` is set)."""
    return bool(os.environ.get(REPLICA_OF_ENV, "").strip())


def replica_models(primary: str) -> tuple[str, ...]:
    """The models a chapter whose primary model is named ``primary`` is replayed on.

    From ``NORMLIMITS_REPLICAS`` (comma-separated model settings; ``off``/``none`` for none;
    unset: :data:`DEFAULT_REPLICAS`), without ``primary`` itself and without duplicates; empty
    inside a replica. An empty entry (``standin,,``) is a :class:`SettingError`.
    """
    if is_replica():
        return ()
    raw = os.environ.get(REPLICAS_ENV)
    if raw is None or not raw.strip():
        names = list(DEFAULT_REPLICAS)
    elif raw.strip().lower() in ("off", "none", "0"):
        names = []
    else:
        names = [part.strip() for part in raw.split(",")]
        if any(not name for name in names):
            raise SettingError(f"{REPLICAS_ENV}={raw!r} has an empty entry; list model settings "
                               "separated by commas (e.g. standin,standin-rope), or off.")
    return tuple(dict.fromkeys(n for n in names if n != primary))


def chapter_source(chapter: str, root: Path | None = None) -> Path:
    """The MyST source of ``chapter`` (``book/<chapter>.md`` under the book root)."""
    root = root or book_root()
    if root is None:
        raise ReplicaError(f"cannot replay chapter {chapter!r}: no book (a folder with _config.yml "
                           "and _toc.yml) above the current folder")
    path = root / "book" / f"{chapter}.md"
    if not path.is_file():
        raise ReplicaError(f"cannot replay chapter {chapter!r}: {path} does not exist")
    return path


def glue_keys_used(notebook) -> set[str]:
    """Glue keys the notebook's Markdown cells paste (same-document keys only; ``doc::key`` pastes
    from another page)."""
    keys: set[str] = set()
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for content in GLUE_ROLE.findall(cell.source):
                if "::" not in content:
                    keys.add(content.split(":", 1)[0].strip())
            keys.update(GLUE_DIRECTIVE.findall(cell.source))
    return keys


def glue_keys_made(notebook) -> set[str]:
    """Glue keys the executed notebook's outputs carry (myst-nb's ``scrapbook`` metadata)."""
    keys: set[str] = set()
    for cell in notebook.cells:
        for output in cell.get("outputs", ()):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                keys.add(name)
    return keys


def concurrent_replicas(count: int) -> int:
    """How many of ``count`` replicas run at once: one per thread the build may use
    (:func:`normlimits.core.settings.thread_count`), at least 1."""
    return max(1, min(count, thread_count()))


def execute_chapter(source: Path, env: Mapping[str, str | None], *,
                    timeout: int = CELL_TIMEOUT, save_to: Path | None = None) -> float:
    """Execute the MyST notebook ``source`` in a fresh ``python3`` kernel started from its folder,
    with the environment changed by ``env`` (None removes a variable); returns the wall time (s).
    ``save_to``: where the executed notebook (``.ipynb``) is written once every cell has run.

    Raises :class:`ReplicaError` with the tail of the failing cell's error, or when the prose
    pastes a glue key the executed code never glued (as a reader re-executing it would see).
    """
    import jupytext
    from nbclient.exceptions import CellExecutionError

    notebook = jupytext.read(source)
    settings = ", ".join(f"{k}={v}" for k, v in env.items() if v)
    try:
        seconds = run_in_kernel(notebook, source.parent, env, timeout=timeout)
    except CellExecutionError as exc:
        raise ReplicaError(f"{source.name} failed with {settings}:\n{str(exc)[-3000:]}") from None
    if save_to is not None:
        import nbformat

        from normlimits.core.cache import atomic_write_bytes

        save_to.parent.mkdir(parents=True, exist_ok=True)      # never a half-written notebook
        atomic_write_bytes(save_to, nbformat.writes(notebook).encode("utf-8"))
    missing = glue_keys_used(notebook) - glue_keys_made(notebook)
    if missing:
        raise ReplicaError(f"{source.name} executed with {settings} but its prose pastes glue keys "
                           f"the code never glued: {sorted(missing)}")
    return seconds


def _recorded_seconds(timing: Path, *keys: str) -> list[float]:
    """Parts of its time a child recorded in its timing file, read once (``one_time_seconds``:
    training now cached; ``forward_seconds``: its forward passes), each 0 if none."""
    import json

    try:
        recorded = json.loads(timing.read_text())
        return [float(recorded.get(key, 0.0)) for key in keys]
    except (OSError, ValueError, AttributeError):
        return [0.0] * len(keys)


def _replicas(primary: str) -> list[Replica]:
    return [Replica(name, {MODEL_ENV: name}) for name in replica_models(primary)]


def replicate(ctx, replicas: list[Replica] | None = None, *, record: bool = True) -> list[ReplicaRun]:
    """Replay the chapter of ``ctx`` (a :class:`~normlimits.book.chapter.ChapterContext`) on each replica
    and record the rows each gives in the chapter's ledger, as variants named by the replica's
    label (``claims.record_variant``). Returns one :class:`ReplicaRun` per replica; nothing inside
    a replica.

    ``replicas`` default: one per model of :func:`replica_models` (the primary model excluded).
    The chapter must have recorded its own rows first: a replica row whose claim the chapter did
    not record on its primary model is an error (the two sides must grade the same claims).
    """
    if is_replica():
        return []
    replicas = _replicas(ctx.loaded.name) if replicas is None else replicas
    own = {r["id"] for r in ledger.read_rows(ledger.ledger_dir() / f"{ctx.chapter}.json")
           if not r.get("variant")}
    source = chapter_source(ctx.chapter)
    width = concurrent_replicas(len(replicas))
    threads = {THREADS_ENV: str(max(1, thread_count() // width))} if width > 1 else {}

    def replay(replica: Replica) -> tuple[list[dict], float, float, float]:
        with tempfile.TemporaryDirectory(prefix=f"replica-{ctx.chapter}-") as folder:
            env = {**threads, **replica.env, REPLICA_OF_ENV: ctx.chapter, ledger.LEDGER_ENV: folder}
            seconds = execute_chapter(source, env)
            rows = ledger.read_rows(Path(folder) / f"{ctx.chapter}.json")
            once, forward = _recorded_seconds(Path(folder) / f"{ctx.chapter}.timing.json",
                                              "one_time_seconds", "forward_seconds")
        return rows, seconds, once, forward

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=width) as pool:     # waits for every child, then raises
        futures = [pool.submit(replay, replica) for replica in replicas]
    results = [future.result() for future in futures]        # the first failure, in order
    wall = time.perf_counter() - start
    if replicas and hasattr(ctx, "replicas_took"):     # their wall time, one-time work left out
        ctx.replicas_took(max(wall - sum(once for _, _, once, _ in results), 0.0))
    runs = []
    for replica, (rows, seconds, once, forward) in zip(replicas, results):
        if once and hasattr(ctx, "one_time"):
            ctx.one_time(once)      # the child's cached training is not the chapter's running cost
        if hasattr(ctx, "replica_ran"):
            ctx.replica_ran(replica.label, max(seconds - once, 0.0), forward)
        rows = [r for r in rows if not r.get("variant")]
        stray = sorted({r["id"] for r in rows} - own)
        if stray:
            raise ReplicaError(f"the replica {replica.label!r} of {ctx.chapter} recorded {stray}, "
                               "which the chapter did not record on its own model")
        run = ReplicaRun(replica, rows, seconds)
        if record:
            run.recorded = [claims.record_variant(ctx.chapter, row, replica.label) for row in rows]
        runs.append(run)
    return runs


def _headline(row: dict) -> float | None:
    head = next(c for c in row["criteria"] if c["key"] == row["headline"])
    return head["value"]


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def model_name(row: dict) -> str:
    """A row's model without its parameter count (``standin (2.0M params)`` -> ``standin``)."""
    import re

    return re.sub(r"\s*\([^()]*params\)", "", row["model"]).strip()


def agreement(own_rows: list[dict], runs: list[ReplicaRun]) -> list[dict]:
    """One record per claim the chapter graded on its own model: id, the claim in plain text, the
    own model's verdict and headline value, and each replica's (``None`` where it has no row),
    with ``agree`` True when every replica gave the own model's verdict."""
    out = []
    for row in (r for r in own_rows if not r.get("variant")):
        entry = {"id": row["id"], "claim": row["claim_text"], "own": (row["verdict"], _headline(row)),
                 "own_model": model_name(row), "replicas": {}}
        for run in runs:
            other = next((r for r in run.rows if r["id"] == row["id"]), None)
            entry["replicas"][run.replica.label] = None if other is None else (other["verdict"], _headline(other))
        entry["agree"] = all(v is not None and v[0] == row["verdict"] for v in entry["replicas"].values())
        out.append(entry)
    return out


def agreement_frame(own_rows: list[dict], runs: list[ReplicaRun]):
    """:func:`agreement` as a table for the page: one row per claim, one column per model with
    "verdict (headline value)"."""
    import pandas as pd

    records = agreement(own_rows, runs)
    table = []
    for entry in records:
        line = {"claim": entry["id"], entry["own_model"] or "this model": f"{entry['own'][0]} ({_number(entry['own'][1])})"}
        for label, got in entry["replicas"].items():
            line[label] = "not recorded" if got is None else f"{got[0]} ({_number(got[1])})"
        line["same verdict"] = "yes" if entry["agree"] else "no"
        table.append(line)
    return pd.DataFrame(table).set_index("claim") if table else pd.DataFrame()


def agreement_words(own_rows: list[dict], runs: list[ReplicaRun]) -> str:
    """A sentence for the prose: how many verdicts each replica shares with the own model, and
    which differ (``id: own -> replica``)."""
    records = agreement(own_rows, runs)
    if not runs:
        return "no other model was run in this build"
    parts = []
    for run in runs:
        label = run.replica.label
        differ = [f"{e['id']} ({e['own'][0]} here, "
                  f"{'not recorded' if e['replicas'][label] is None else e['replicas'][label][0]} there)"
                  for e in records if e["replicas"][label] is None or e["replicas"][label][0] != e["own"][0]]
        same = len(records) - len(differ)
        text = f"on {label}, {same} of {len(records)} verdicts are the same"
        parts.append(text + (f"; different: {', '.join(differ)}" if differ else ""))
    return "; ".join(parts)
