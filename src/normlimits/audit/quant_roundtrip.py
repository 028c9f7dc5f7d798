"""What 4 bits do to the yardsticks: a model's weights round-tripped through GGUF quantisation.

The book's real offline model, SmolLM2-135M-Instruct, exists here only as a GGUF file whose
weight matrices are 4-bit Q4_1 (:mod:`normlimits.model.gguf`); its full-precision weights cannot
be had offline, so what the 4 bits do to its verdicts cannot be measured on it. This module
measures it on a model whose full-precision weights exist (the GPT-2 stand-in): every weight is
quantised and dequantised with the ``gguf`` package's own quantiser (``gguf.quants``, the
reference implementation of llama.cpp's block formats), with the types the shipped file itself
uses, and the audit's four yardsticks (:func:`normlimits.audit.architectures.survey`, the chapters' own
code paths) and the held-out bits per byte (:mod:`normlimits.model.heldout`) are run on both copies.

Which tensor gets which type (:func:`tensor_types`), mirroring llama.cpp's convention as the
reference file shows it (:func:`reference_plan` reads the file's tensor types by role):

- every weight matrix of the blocks: the file's block-matrix type (Q4_1 in the shipped file),
  in blocks of 32 along the *input* dimension: llama.cpp stores a matrix [out, in] with ``in``
  contiguous, so a ``Linear`` weight [out, in] is quantised as it is and GPT-2's ``Conv1D``
  weight, stored [in, out], is transposed first and back after;
- the token embedding (tied to the output head): the file's ``token_embd`` type (Q8_0 in the
  shipped file, which ties them too);
- vectors (norm weights, biases) and a learned position table: unchanged, float32 (llama.cpp
  quantises no tensor of fewer than two dimensions, and never ``position_embd``).

Parameters are classified by module type and identity (``get_input_embeddings``,
``get_output_embeddings``, ``Linear``, ``Conv1D``, ``Embedding``), never by a family's module
names; a matrix kind in the error table is the parameter's own name with its layer index
replaced by ``*``.

The round-tripped copy is a separate :class:`~normlimits.model.pretrained.LoadedModel` named
``<name>-<type>`` (``standin-q4_1``); its weights differ, so its captures get their own entries in
the capture cache (whose key holds a sha256 of every weight). The comparison is cached as one JSON
file under ``NORMLIMITS_CACHE/quant-roundtrip/`` (:func:`round_trip_study`), written atomically
under a lock and keyed by everything it depends on: the original weights' sha256, the type plan,
the corpus, the window count and length, the held-out texts, this package's sources and the
versions of torch, transformers, gguf and numpy.
"""

from __future__ import annotations

import copy
import math
import re
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from normlimits.audit.architectures import Skipped, survey
from normlimits.claims.rules import Rule
from normlimits.core.source_closure import closure_digest
from normlimits.core.protocol import MAX_LENGTH
from normlimits.model import heldout
from normlimits.model.capture_cache import model_fingerprint
from normlimits.model.gguf import smollm2_path

__all__ = ["TypePlan", "TensorType", "RoundTripError", "gguf_tensor_types", "reference_plan", "tensor_types",
           "round_trip_weights", "round_trip_model", "weight_error_table", "compare", "study_key",
           "round_trip_study", "statistic_table", "verdict_changes", "summary", "CACHE_KIND",
           "HELD_OUT_TEXTS", "NOT_QUANTISED"]

#: the cache sub-folder of the comparison's JSON files
CACHE_KIND = "quant-roundtrip"
#: held-out texts of 1024 bytes scored on both copies (the setup page's count)
HELD_OUT_TEXTS = 8
#: the type of every tensor left as it is (vectors, a position table)
NOT_QUANTISED = "F32"
#: bump when the result's layout changes (the cache key holds it)
RESULT_FORMAT = 1


class RoundTripError(ValueError):
    """A model or reference file the round trip cannot mirror (message: what and the remedy)."""


@dataclass(frozen=True)
class TypePlan:
    """The quantisation types of a reference GGUF file, by role.

    ``matrices``: the one type of every weight matrix inside the blocks (``blk.N.*``, two or more
    dimensions); ``token_embedding``: the type of ``token_embd.weight``; ``output``: the type of
    ``output.weight``, None where the file has none (the output head is tied to the token
    embedding); ``vectors``: the types of the one-dimensional tensors (norms); ``source``: the
    file's name; ``tensors``: how many tensors the file holds.
    """

    matrices: str
    token_embedding: str
    output: str | None
    vectors: tuple[str, ...]
    source: str
    tensors: int

    @property
    def tied(self) -> bool:
        """True when the file's output head is its token embedding (no ``output.weight``)."""
        return self.output is None

    def describe(self) -> dict:
        """The plan as JSON-able values (the cache key holds it)."""
        return {"matrices": self.matrices, "token_embedding": self.token_embedding,
                "output": self.output, "vectors": list(self.vectors), "source": self.source,
                "tensors": self.tensors}


@dataclass(frozen=True)
class TensorType:
    """How one parameter is round-tripped: ``qtype`` (a ``GGMLQuantizationType`` name, or
    :data:`NOT_QUANTISED`), ``transpose`` (stored [in, out], so transposed to llama.cpp's
    [out, in] before quantising) and ``kind`` (its name with layer indices as ``*``)."""

    qtype: str
    transpose: bool
    kind: str
    role: str


#: bytes of each fixed-size GGUF metadata value type (gguf.constants.GGUFValueType's numbers)
_VALUE_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def gguf_tensor_types(path: Path) -> list[tuple[str, int, str]]:
    """``(name, dimensions, type)`` of every tensor of the GGUF file ``path``, from its header
    alone (little-endian GGUF versions 2 and 3), e.g. ``("blk.0.attn_q.weight", 2, "Q4_1")``.

    The metadata is skipped, not decoded: ``gguf.GGUFReader`` decodes every value (the shipped
    file's 98,000 tokenizer strings took 5-14 s here), which the type plan does not need. Raises
    :class:`RoundTripError` naming the file when it is not such a GGUF file or its header is cut.
    """
    import mmap
    import struct

    from gguf import GGMLQuantizationType

    path = Path(path)
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
            if magic != b"GGUF" or version not in (2, 3):
                raise ValueError(f"magic {magic!r}, version {version}: not a little-endian GGUF "
                                 "file of version 2 or 3")
            offset = 24

            def skip_string(at: int) -> int:
                (length,) = struct.unpack_from("<Q", data, at)
                return at + 8 + length

            def skip_value(kind: int, at: int) -> int:
                if kind == _STRING:
                    return skip_string(at)
                if kind == _ARRAY:
                    item, count = struct.unpack_from("<IQ", data, at)
                    at += 12
                    if item in _VALUE_SIZES:
                        return at + count * _VALUE_SIZES[item]
                    for _ in range(count):
                        at = skip_value(item, at)
                    return at
                return at + _VALUE_SIZES[kind]

            for _ in range(n_kv):
                offset = skip_string(offset)
                (kind,) = struct.unpack_from("<I", data, offset)
                offset = skip_value(kind, offset + 4)
            tensors = []
            for _ in range(n_tensors):
                (length,) = struct.unpack_from("<Q", data, offset)
                name = bytes(data[offset + 8:offset + 8 + length]).decode("utf-8")
                offset += 8 + length
                (dims,) = struct.unpack_from("<I", data, offset)
                offset += 4 + 8 * dims
                (kind,) = struct.unpack_from("<I", data, offset)
                offset += 4 + 8
                tensors.append((name, int(dims), GGMLQuantizationType(kind).name))
    except (OSError, ValueError, KeyError, struct.error, UnicodeDecodeError) as exc:
        raise RoundTripError(f"{path} is not a readable GGUF file ({type(exc).__name__}: {exc}); "
                             "copy it again.") from None
    return tensors


def reference_plan(path: Path | None = None) -> TypePlan:
    """The quantisation types of the GGUF file ``path`` by role (default: the shipped SmolLM2
    file, :func:`normlimits.model.gguf.smollm2_path`), read from its header
    (:func:`gguf_tensor_types`).

    Raises :class:`RoundTripError` when the block matrices do not share one type (a mixed
    quantisation such as Q4_K_M has no single type to mirror) or the file has no token
    embedding; :class:`~normlimits.model.gguf.GGUFError` when the shipped file is not installed.
    """
    if path is None:
        path = smollm2_path()
    path = Path(path)
    matrices, vectors, named = set(), set(), {}
    tensors = gguf_tensor_types(path)
    for name, dims, kind in tensors:
        named[name] = kind
        if dims < 2:
            vectors.add(kind)
        elif name.startswith("blk."):
            matrices.add(kind)
    if "token_embd.weight" not in named:
        raise RoundTripError(f"{path} holds no token_embd.weight: not a language model file to "
                             "mirror; use the shipped SmolLM2 file.")
    if len(matrices) != 1:
        raise RoundTripError(f"{path}: its block matrices are stored as {sorted(matrices) or 'nothing'}, "
                             "not one type: there is no single type to mirror. Use a file quantised "
                             "to one type (e.g. Q4_1, Q4_0, Q8_0).")
    return TypePlan(matrices=matrices.pop(), token_embedding=named["token_embd.weight"],
                    output=named.get("output.weight"), vectors=tuple(sorted(vectors)),
                    source=path.name, tensors=len(tensors))


def _kind(name: str) -> str:
    """A parameter's name with its layer indices as ``*`` (``h.3.attn.w`` -> ``h.*.attn.w``)."""
    return re.sub(r"(?<=\.)\d+(?=\.)", "*", name)


def _block_size(qtype: str) -> int:
    from gguf import GGMLQuantizationType
    from gguf.constants import GGML_QUANT_SIZES

    return GGML_QUANT_SIZES[GGMLQuantizationType[qtype]][0]


def tensor_types(model: torch.nn.Module, plan: TypePlan) -> dict[str, TensorType]:
    """The type of every distinct parameter of ``model`` under ``plan`` (see the module
    docstring), by parameter name (tied weights once, under their first name).

    Raises :class:`RoundTripError` naming the parameter when: the model's output head is tied and
    the plan's is not (or the other way round), a matrix belongs to a module that is neither a
    ``Linear``, a ``Conv1D`` nor an ``Embedding``, or a matrix's input dimension is not a multiple
    of its type's block size.
    """
    from transformers.pytorch_utils import Conv1D

    inputs = model.get_input_embeddings().weight
    out_module = model.get_output_embeddings()
    output = out_module.weight if out_module is not None else None
    tied = output is not None and output is inputs
    if output is not None and tied != plan.tied:
        raise RoundTripError(
            f"{type(model).__name__} {'ties' if tied else 'does not tie'} its output head to its "
            f"token embedding, and the reference {plan.source} "
            f"{'does' if plan.tied else 'does not'}: the reference does not say which type such a "
            "head gets. Mirror a reference file that ties its embeddings as the model does.")
    types: dict[str, TensorType] = {}
    for name, param in model.named_parameters():
        module = model.get_submodule(name.rpartition(".")[0])
        if param.ndim < 2:
            types[name] = TensorType(NOT_QUANTISED, False, _kind(name), "vector")
            continue
        if param is inputs:
            qtype, transpose, role = plan.token_embedding, False, "token embedding"
        elif output is not None and param is output:
            qtype, transpose, role = plan.output, isinstance(out_module, Conv1D), "output head"
        elif isinstance(module, torch.nn.Embedding):
            types[name] = TensorType(NOT_QUANTISED, False, _kind(name), "position table")
            continue
        elif isinstance(module, Conv1D):
            qtype, transpose, role = plan.matrices, True, "matrix"
        elif isinstance(module, torch.nn.Linear):
            qtype, transpose, role = plan.matrices, False, "matrix"
        else:
            raise RoundTripError(f"{name}: a {tuple(param.shape)} parameter of a "
                                 f"{type(module).__name__}, neither a Linear, a Conv1D nor an "
                                 "Embedding; the round trip does not know its layout.")
        width = param.shape[0] if transpose else param.shape[-1]
        block = _block_size(qtype)
        if width % block:
            raise RoundTripError(f"{name}: its input dimension {width} is not a multiple of "
                                 f"{qtype}'s block of {block}, so llama.cpp could not store it as "
                                 f"{qtype} either.")
        types[name] = TensorType(qtype, transpose, _kind(name), role)
    return types


def _round_trip(weight: np.ndarray, qtype: str) -> np.ndarray:
    """``dequantize(quantize(weight))`` with gguf's quantiser, blocks along the last axis;
    float32 [..., in] -> float32 of the same shape."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    kind = GGMLQuantizationType[qtype]
    return dequantize(quantize(np.ascontiguousarray(weight, dtype=np.float32), kind), kind)


@torch.no_grad()
def round_trip_weights(model: torch.nn.Module, types: dict[str, TensorType]
                       ) -> tuple[torch.nn.Module, list[dict]]:
    """A deep copy of ``model`` whose parameters are round-tripped as ``types`` says (tied
    weights stay tied), and one error record per parameter: ``name``, ``kind``, ``role``,
    ``qtype``, ``shape``, ``numel``, ``error_sq`` (squared Frobenius norm of the change) and
    ``norm_sq`` (of the weight). ``model`` itself is not changed."""
    clone = copy.deepcopy(model)
    params = dict(clone.named_parameters())
    records = []
    for name, spec in types.items():
        param = params[name]
        original = param.detach().to("cpu", torch.float32, copy=True)
        if spec.qtype == NOT_QUANTISED:
            rounded = original
        else:
            matrix = original.numpy().T if spec.transpose else original.numpy()
            back = _round_trip(matrix, spec.qtype)
            rounded = torch.from_numpy(np.ascontiguousarray(back.T if spec.transpose else back))
            param.copy_(rounded.to(param.device, param.dtype))
        records.append({"name": name, "kind": spec.kind, "role": spec.role, "qtype": spec.qtype,
                        "shape": list(param.shape), "numel": int(param.numel()),
                        "error_sq": float(((rounded.double() - original.double()) ** 2).sum()),
                        "norm_sq": float((original.double() ** 2).sum())})
    return clone.eval(), records


def round_trip_model(loaded, plan: TypePlan):
    """``loaded`` (a :class:`~normlimits.model.pretrained.LoadedModel`) round-tripped under ``plan``: a new
    LoadedModel named ``<name>-<type>`` (same tokenizer, its own weights) and the error records of
    :func:`round_trip_weights`."""
    types = tensor_types(loaded.model, plan)
    model, records = round_trip_weights(loaded.model, types)
    tag = plan.matrices.lower()
    copy_of = replace(loaded, model=model, name=f"{loaded.name}-{tag}",
                      source=(f"{loaded.name}'s weights round-tripped through {plan.matrices} with "
                              f"gguf's quantiser (token embedding {plan.token_embedding}, vectors "
                              f"{NOT_QUANTISED}), as in {plan.source}"),
                      quantisation=plan.matrices, notes=list(loaded.notes))
    return copy_of, records


def weight_error_table(records: list[dict]):
    """One row per quantised matrix kind: its type, tensors, parameters and relative Frobenius
    error ``sqrt(sum ||W_q - W||^2 / sum ||W||^2)`` over the tensors of that kind; then one row for
    everything left as it is. A pandas DataFrame indexed by kind."""
    import pandas as pd

    rows = {}
    kept = [r for r in records if r["qtype"] == NOT_QUANTISED]
    for r in records:
        if r["qtype"] == NOT_QUANTISED:
            continue
        row = rows.setdefault(r["kind"], {"type": r["qtype"], "role": r["role"], "tensors": 0,
                                          "parameters": 0, "error_sq": 0.0, "norm_sq": 0.0})
        row["tensors"] += 1
        row["parameters"] += r["numel"]
        row["error_sq"] += r["error_sq"]
        row["norm_sq"] += r["norm_sq"]
    if kept:
        rows[f"not quantised ({', '.join(sorted({r['role'] for r in kept}))})"] = {
            "type": NOT_QUANTISED, "role": "kept", "tensors": len(kept),
            "parameters": sum(r["numel"] for r in kept),
            "error_sq": sum(r["error_sq"] for r in kept), "norm_sq": sum(r["norm_sq"] for r in kept)}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table["relative error"] = np.sqrt(table["error_sq"] / table["norm_sq"].where(table["norm_sq"] > 0))
    return table.drop(columns=["error_sq", "norm_sq"])


def _bits(scored) -> dict:
    return {"bits": scored.bits, "bytes": scored.bytes, "tokens": scored.tokens,
            "per_byte": scored.per_byte}


def compare(loaded, corpus, window_count: int, plan: TypePlan, *,
            texts: list[str] | None = None, max_length: int | None = None,
            say: Callable[[str], None] = lambda message: None) -> dict:
    """Round-trip ``loaded`` under ``plan`` and run the audit's yardsticks and the held-out bits per
    byte on both copies: the same ``window_count`` windows of ``corpus`` (L = its context, at most
    ``max_length``), the same random rows, the same ``texts`` (default: :data:`HELD_OUT_TEXTS`
    held-out texts of the stand-in's split). Returns the JSON-able result :func:`round_trip_study`
    caches: ``plan``, ``models`` (name and label of each copy), ``rows`` (each copy's graded ledger
    rows), ``bits_per_byte`` (of each copy and of the stand-in's bigram baseline, on the same
    bytes), ``weights`` (the error records), ``length``, ``windows`` and ``seconds`` (wall time of
    the round trip, of each copy's yardsticks and in all; ``cpu_total``: CPU seconds of every
    thread, which a machine's load does not inflate)."""
    started, cpu_started = time.perf_counter(), time.process_time()
    rounded, records = round_trip_model(loaded, plan)
    round_trip_seconds = time.perf_counter() - started
    copies = {"original": loaded, "rounded": rounded}
    by_name = {m.name: m for m in copies.values()}
    results = list(survey(list(by_name), corpus, window_count, loader=by_name.__getitem__,
                          max_length=max_length or MAX_LENGTH, say=say))
    skipped = [r for r in results if isinstance(r, Skipped)]
    if skipped:
        raise RoundTripError(f"the yardsticks could not run on {skipped[0].name}: {skipped[0].reason}")
    texts = texts if texts is not None else heldout.held_out_texts(corpus.text, count=HELD_OUT_TEXTS)
    surveyed = dict(zip(copies, results))
    return {
        "format": RESULT_FORMAT,
        "plan": plan.describe(),
        "models": {k: {"name": s.name, "label": s.label, "params": s.params}
                   for k, s in surveyed.items()},
        "length": results[0].length, "windows": results[0].windows,
        "rows": {k: s.rows() for k, s in surveyed.items()},
        "bits_per_byte": {**{k: _bits(heldout.bits_per_byte(m, texts)) for k, m in copies.items()},
                          "bigram": _bits(heldout.bigram_bits_per_byte(corpus.text, texts))},
        "texts": len(texts),
        "weights": records,
        "seconds": {"round_trip": round_trip_seconds,
                    **{k: s.seconds for k, s in surveyed.items()},
                    "total": time.perf_counter() - started,
                    "cpu_total": time.process_time() - cpu_started},
    }


def study_key(loaded, corpus, window_count: int, plan: TypePlan, *, texts: int = HELD_OUT_TEXTS,
              max_length: int | None = None) -> dict:
    """Everything :func:`compare`'s result depends on (its cache file is named by the digest):
    the code is the sources of this module and of every module of the package it imports
    (:func:`~normlimits.core.source_closure.closure_digest`), so an edit elsewhere in the package
    (a chapter's helper, the book's Sphinx extensions) keeps the cached result."""
    return {"format": RESULT_FORMAT, "model": loaded.name,
            "model_sha256": model_fingerprint(loaded.model), "plan": plan.describe(),
            "corpus_sha256": corpus.sha256, "windows": int(window_count),
            "length": min(int(loaded.max_positions), int(max_length or MAX_LENGTH)),
            "texts": int(texts), "code": closure_digest(__name__),
            **{name: metadata.version(name) for name in ("torch", "transformers", "gguf", "numpy")}}


def round_trip_study(loaded, corpus, window_count: int, plan: TypePlan | None = None, *,
                     max_length: int | None = None, say: Callable[[str], None] = lambda m: None
                     ) -> tuple[dict, float]:
    """:func:`compare`'s result for ``loaded`` (default plan: the shipped SmolLM2 file's types),
    from the cache when an entry with the same :func:`study_key` exists, else computed and cached
    atomically under a lock. Returns ``(result, seconds)``: the seconds spent computing it (0.0
    when it came from the cache). A damaged entry raises
    :class:`~normlimits.core.cache.CacheError` naming it (delete it to compute it again)."""
    from normlimits.core.cache import (
        CacheError, atomic_write_json, cache_path, read_json_entry, writer_lock)

    plan = plan or reference_plan()
    key = study_key(loaded, corpus, window_count, plan, max_length=max_length)
    path = cache_path(CACHE_KIND, key, ".json")
    what = f"{plan.matrices} round trip of {loaded.name}"

    def cached() -> dict:
        entry = read_json_entry(path, what)
        if not isinstance(entry, dict) or entry.get("key") != key or "result" not in entry:
            raise CacheError(f"the cached {what} {path} is damaged (its key or result is not the "
                             "one written for it); delete it to compute it again.")
        return entry["result"]

    if path.is_file():
        return cached(), 0.0
    with writer_lock(path, f"the {what} ({path})"):
        if path.is_file():
            return cached(), 0.0
        started = time.perf_counter()
        result = compare(loaded, corpus, window_count, plan, max_length=max_length, say=say)
        atomic_write_json(path, {"key": key, "result": result})
        return result, time.perf_counter() - started


def _margin(criterion, value: float) -> float:
    """How far ``value`` lies from the edge of ``criterion``'s threshold (NaN when not measured):
    a statistic must move at least this much for the criterion's outcome to change."""
    if math.isnan(value):
        return math.nan
    t = criterion.threshold
    edges = t if isinstance(t, tuple) else (t,)
    return min(abs(value - edge) for edge in edges)


def statistic_table(result: dict):
    """Every graded statistic on both copies: one row per (claim, criterion), columns
    ``statistic``, ``rule`` (the criterion's test in words, :meth:`Criterion.describe`),
    ``original``, ``rounded``, ``difference`` (rounded - original; NaN where either is not
    measured), ``margin`` (the original's distance to the threshold's edge), ``passed`` on each,
    and each copy's verdict of the claim. A pandas DataFrame indexed by (claim, criterion key)."""
    import pandas as pd

    original, rounded = result["rows"]["original"], result["rows"]["rounded"]
    if [r["id"] for r in original] != [r["id"] for r in rounded]:
        raise ValueError("the two copies were graded on different claims: "
                         f"{[r['id'] for r in original]} against {[r['id'] for r in rounded]}")
    rows = {}
    for a, b in zip(original, rounded):
        for criterion, ca, cb in zip(Rule.from_row(a).criteria, a["criteria"], b["criteria"]):
            va = math.nan if ca["value"] is None else ca["value"]
            vb = math.nan if cb["value"] is None else cb["value"]
            rows[(a["id"], ca["key"])] = {
                "statistic": ca["statistic_text"], "rule": criterion.describe(), "original": va,
                "rounded": vb, "difference": vb - va, "margin": _margin(criterion, va),
                "passed (original)": ca["passed"], "passed (rounded)": cb["passed"],
                "verdict (original)": a["verdict"], "verdict (rounded)": b["verdict"]}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["claim", "criterion"])
    return table


def verdict_changes(result: dict) -> list[str]:
    """The claims whose verdict differs between the two copies, as ``"ID: before -> after"``."""
    return [f"{a['id']}: {a['verdict']} -> {b['verdict']}"
            for a, b in zip(result["rows"]["original"], result["rows"]["rounded"])
            if a["verdict"] != b["verdict"]]


def summary(result: dict) -> dict:
    """The numbers the page glues: bits per byte of both copies and their difference; the relative
    weight error of the block matrices and of the token embedding (over all tensors of that role);
    how many claims and criteria were compared, how many verdicts and pass/fail outcomes changed
    (and which verdicts, in words); the largest relative move of a graded statistic
    (|difference| / |original|, over the statistics measured on both with a nonzero original); the
    closest call: the smallest ratio of a criterion's margin to its statistic's move (below 1:
    the move crossed the threshold), and where."""
    table = statistic_table(result)
    bpb = {k: v["per_byte"] for k, v in result["bits_per_byte"].items()}

    def role_error(role: str) -> float:
        chosen = [r for r in result["weights"] if r["role"] == role]
        norm = sum(r["norm_sq"] for r in chosen)
        return math.sqrt(sum(r["error_sq"] for r in chosen) / norm) if norm > 0 else math.nan

    measured = table.dropna(subset=["original", "rounded"])
    measured = measured[measured["original"] != 0]
    relative = (measured["difference"].abs() / measured["original"].abs())
    moved = table.dropna(subset=["difference", "margin"])
    moved = moved[moved["difference"] != 0]
    ratio = moved["margin"] / moved["difference"].abs()
    changed = verdict_changes(result)
    flips = int((table["passed (original)"] != table["passed (rounded)"]).sum())
    return {"bpb_original": bpb["original"], "bpb_rounded": bpb["rounded"],
            "bpb_change": bpb["rounded"] - bpb["original"],
            "matrix_error": role_error("matrix"), "embedding_error": role_error("token embedding"),
            "matrix_type": result["plan"]["matrices"],
            "embedding_type": result["plan"]["token_embedding"],
            "claims_compared": len(result["rows"]["original"]), "criteria_compared": len(table),
            "verdicts_changed": len(changed),
            "verdict_changes": "; ".join(changed) if changed else "none",
            "criteria_flipped": flips,
            "largest_relative_move": float(relative.max()) if len(relative) else math.nan,
            "largest_move_at": (" ".join(relative.idxmax()) if len(relative) else "none"),
            "closest_ratio": float(ratio.min()) if len(ratio) else math.nan,
            "closest_at": (" ".join(ratio.idxmin()) if len(ratio) else "none")}
