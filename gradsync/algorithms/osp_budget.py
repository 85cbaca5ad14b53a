"""OSP's upper bound U_max on the bytes the in-background synchronization (ICS) carries per
iteration (osp.md, "The byte budget"), in the paper's form or in the corrected form, then capped
at 80% of the model. Torch-free: the scheduler's options and its cost model read it."""

from __future__ import annotations

UMAX_FORMULAS = ("paper", "corrected")  # OSP's U_max: as printed, or with losses slowing it
DEFAULT_UMAX_CAP = 0.8  # the paper caps U_max at 80% of the model size


def umax_bytes(
    bandwidth_bytes_per_s: float,
    compute_s: float,
    workers: int,
    model_bytes: int,
    *,
    loss_rate: float = 0.0,
    formula: str = "corrected",
    cap: float | None = DEFAULT_UMAX_CAP,
) -> float:
    """The most bytes ICS may carry per iteration so it hides behind one iteration's compute.

    The N workers share the PS link, so pushing S bytes each takes N·S / b_eff, and that must
    fit in T_c. The paper prints b_eff = b(1+lr), so ``"paper"`` gives U_max = b(1+lr)·T_c / N.
    Packet loss makes a transfer slower, not faster, so ``"corrected"`` (the default; osp.md,
    "Where gradsync differs from the paper") uses b_eff = b/(1+lr): U_max = b·T_c / (N·(1+lr)).
    The two agree at lr = 0. The result is capped at ``cap``·model_bytes (0.8 in the paper);
    ``cap=None`` lifts the cap, which the all-layers-in-G^u test needs (osp.md, "What the tests
    check"). ``bandwidth_bytes_per_s`` is in bytes (10 Gbit/s = 1.25e9 B/s).
    """
    if formula not in UMAX_FORMULAS:
        raise ValueError(f"unknown U_max formula {formula!r}; valid: {', '.join(UMAX_FORMULAS)}")
    if workers < 1:
        raise ValueError(f"workers must be ≥ 1, got {workers}")
    checks = {
        "bandwidth_bytes_per_s": bandwidth_bytes_per_s,
        "compute_s": compute_s,
        "model_bytes": model_bytes,
        "loss_rate": loss_rate,
    }
    for name, value in checks.items():
        if not value >= 0:  # also rejects NaN
            raise ValueError(f"{name} must be ≥ 0, got {value}")
    if cap is not None and not cap >= 0:
        raise ValueError(f"cap must be ≥ 0 or None, got {cap}")
    if formula == "paper":
        umax = bandwidth_bytes_per_s * (1.0 + loss_rate) * compute_s / workers
    else:
        umax = bandwidth_bytes_per_s * compute_s / (workers * (1.0 + loss_rate))
    if cap is not None:
        umax = min(umax, cap * model_bytes)
    return float(umax)
