"""Every ``compressor=`` option, once: its name and its typed options.

A compressor is its module (the ``_target_`` its options build), its options class (fields made
with ``option()``; the class docstring says what it is), and one entry here. Hydra's
ConfigStore, ``--help``, the configuration reference and the checks of what a scheduler can take
all read this mapping (``gradsync/families.py`` gives it to Hydra); nothing else lists
compressor names. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping

from gradsync.compressors.options.base import (
    CompressorConfig,
    NoneCompressorConfig,
    RandomKConfig,
)
from gradsync.compressors.options.powersgd import PowerSGDConfig
from gradsync.compressors.options.quantizers import (
    BF16Config,
    FP16Config,
    QSGDConfig,
    SignSGDConfig,
    TernGradConfig,
)
from gradsync.compressors.options.sparsifiers import (
    CLTKConfig,
    DEFTConfig,
    DGCConfig,
    ThresholdConfig,
    TopKConfig,
)

COMPRESSORS: Mapping[str, type[CompressorConfig]] = {
    "none": NoneCompressorConfig,
    "fp16": FP16Config,
    "bf16": BF16Config,
    "randomk": RandomKConfig,
    "cltk": CLTKConfig,
    "deft": DEFTConfig,
    "powersgd": PowerSGDConfig,
    "topk": TopKConfig,
    "threshold": ThresholdConfig,
    "dgc": DGCConfig,
    "terngrad": TernGradConfig,
    "qsgd": QSGDConfig,
    "signsgd": SignSGDConfig,
}


def compressor_name(options: CompressorConfig) -> str:
    """The ``compressor=`` option ``options`` are (of their class: each has its own)."""
    (name,) = (name for name, cls in COMPRESSORS.items() if cls is type(options))
    return name


def summary(name: str) -> str:
    """What ``compressor=name`` is: its options class's docstring."""
    return " ".join((COMPRESSORS[name].__doc__ or "").split())


def allreducible_choices() -> str:
    """What a scheduler that all-reduces can take, as an error message offers it."""
    always = [name for name, options in COMPRESSORS.items() if options.payloads_add_up]
    settings: dict[str, list[str]] = {}
    for name, options in COMPRESSORS.items():
        if not options.payloads_add_up and options.add_up_with:
            settings.setdefault(options.add_up_with, []).append(name)
    listed = f"compressor={', '.join(always[:-1])} or {always[-1]}"
    return ", ".join(
        [listed] + [f"or {'/'.join(names)} with {setting}" for setting, names in settings.items()]
    )
