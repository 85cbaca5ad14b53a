"""``scheduler.staleness_correction``: what a scheduler that applies gradients late (DeFT, ASP,
SSP) does about it; each default defined here once. Torch-free (the corrections' arithmetic is
``gradsync/algorithms/staleness.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from gradsync.config.checks import option
from gradsync.schedulers.options import SchedulerOptions

NONE, MOMENTUM, DELAY_COMPENSATION, LEARNING_RATE = "none", "momentum", "dc", "lr"
PREDICTION = "predict"
CORRECTIONS = (NONE, MOMENTUM, DELAY_COMPENSATION, LEARNING_RATE, PREDICTION)
DC_LAMBDA = 0.04
"""DC-ASGD's constant λ (Zheng et al. 2017, DC-ASGD-c on CIFAR-10)."""
MAX_DC_LAMBDA = 1_000.0
"""DC-ASGD's λ are 0.04 (constant) and 2 (adaptive): a thousand is a mistake."""


@dataclass
class StalenessCorrectionOptions(SchedulerOptions):
    staleness_correction: str = option(NONE, choices=CORRECTIONS)
    """none (as the papers apply them); momentum: lower the optimizer's momentum by the implicit
    momentum staleness adds (Mitliagkas et al. 2016); dc: add DC-ASGD's first-order term
    λ·g⊙g⊙(w_now − w_then) (Zheng et al. 2017); lr: apply a gradient τ updates late with the
    learning rate divided by τ + 1 (staleness-aware SGD, Zhang et al. 2016); predict: compute
    each gradient at the weights predicted τ updates ahead along the last update (SpecTrain's
    weight prediction, Chen et al. 2018)."""
    dc_lambda: float = option(DC_LAMBDA, at_least=0, limit=MAX_DC_LAMBDA)
    """λ of staleness_correction=dc."""
