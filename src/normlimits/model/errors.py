"""The model layer's errors, below everything that raises them (loading, capture, GGUF files)."""

from __future__ import annotations

from normlimits.core.settings import SettingError


class ModelError(SettingError):
    """The model setting cannot be honoured; the message names the setting and the remedy."""


class UnsupportedModelError(ModelError):
    """The model's attention modifies its logits in a way capture cannot reproduce (message: what)."""

