"""The compressors' base options (what every ``compressor=`` option declares to the config
checks), the sparsifiers' shared options, and ``compressor=none`` and ``randomk``. Torch-free:
the command line checks them before importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from omegaconf import II

from gradsync.compressors.warmup import DEFAULT_WARMUP_DENSITY
from gradsync.config.checks import MAX_EPOCHS, Options, Rule, option, seed_option


class CompressorConfig(Options):
    """Base of every compressor option's schema: what the compressor asks of the rest of the
    job, checked for every option alike when a config is composed (``check_config``)."""

    GROUP: ClassVar[str] = "compressor"

    applies_momentum: ClassVar[bool] = False
    """The compressor applies momentum to what it sends (DGC's momentum correction, its
    ``momentum`` option), so the optimizer steps without any (``build_optimizer``)."""
    keeps_own_residual: ClassVar[bool] = False
    """The compressor accumulates what it did not send itself (DGC, PowerSGD): an
    error-feedback residual on top would keep it twice, so a feedback that always keeps one is
    refused."""
    compresses: ClassVar[bool] = True
    """It sends less than the dense gradient (False: ``compressor=none`` alone), so a scheduler
    that synchronizes dense layers refuses it."""
    payloads_add_up: ClassVar[bool] = False
    """Every worker's payload has the same layout, so a scheduler that all-reduces can sum them
    (otherwise they are all-gathered); the compressor's ``allreducible`` says the same."""
    add_up_with: ClassVar[str] = ""
    """The setting under which they add up, for an option whose payloads do only so."""
    needs_its_exchange_back: ClassVar[bool] = False
    """Its memory needs the exchange's result on the worker (PowerSGD's error is the compensated
    gradient less the workers' mean), which a parameter server keeps: refused with one."""

    def adds_up(self) -> bool:
        """Whether, as set, its payloads add up (``payloads_add_up``)."""
        return self.payloads_add_up


def density_option(default: float) -> Any:
    """``density``, with its check, for a sparsifier whose default is its own."""
    return option(default, above=0, at_most=1)


def warmup_epochs_option(default: int) -> Any:
    """``warmup_epochs``, with its check, for a sparsifier whose default is its own."""
    return option(default, at_least=0, hint="(0: no warm-up)", limit=MAX_EPOCHS)


def job_seed_option() -> Any:
    """``seed``, the job's (trainer.seed) unless set, for a compressor that draws at random."""
    return seed_option(II("trainer.seed"), hint="(trainer.seed by default)")


@dataclass
class NoneCompressorConfig(CompressorConfig):
    """Dense gradients: every element is sent."""

    _target_: str = "gradsync.compressors.none.NoneCompressor"
    compresses: ClassVar[bool] = False
    payloads_add_up: ClassVar[bool] = True


@dataclass
class SparsifierConfig(CompressorConfig):
    """Shared by every compressor that keeps a fraction ``density`` of the gradient."""

    density: float = density_option(0.01)
    """Fraction of the elements each worker selects (k = int(density · elements)), after the
    warm-up."""
    warmup_epochs: int = warmup_epochs_option(0)
    """DGC's density warm-up: over the first warmup_epochs epochs the density falls
    exponentially from warmup_density to density (epoch e: warmup_density ·
    (density/warmup_density)^(e/warmup_epochs)); 0: no warm-up."""
    warmup_density: float = option(DEFAULT_WARMUP_DENSITY, above=0, at_most=1)
    """The density of the first epoch when warmup_epochs > 0 (DGC: 0.25, i.e. 75% sparsity)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            lambda o: o.warmup_epochs == 0 or o.warmup_density >= o.density,
            lambda o: (
                f"compressor.warmup_density ({o.warmup_density}) must be >= "
                f"compressor.density ({o.density}): the warm-up starts denser and decays to it"
            ),
        ),
    )


@dataclass
class RandomKConfig(SparsifierConfig):
    """Random-k: the same k = density * n random elements on every worker (shared seed),
    all-reduced."""

    _target_: str = "gradsync.compressors.randomk.RandomKCompressor"
    payloads_add_up: ClassVar[bool] = True
    seed: int = job_seed_option()
    """Seed of the random index selection; every worker draws the same indices (default:
    trainer.seed)."""
