"""What a job's settings must satisfy, and the error that says which to change. A leaf: nothing
of gradsync is imported here, so schemas, the command line and workers all use it.

``SettingError`` is a job's settings failing where they are used, said in one line that names
the setting to change: the command line refuses such a job before it starts (exit 2), and a
worker that meets one anyway (what only it can know) reports that line alone, without a
traceback, as its rank's failure.
"""

from __future__ import annotations


class SettingError(ValueError):
    """A setting the job cannot run with; ``str()`` is the one line that says what to set."""


def require(ok: bool, message: str) -> None:
    """``message`` as a ``SettingError`` unless ``ok``."""
    if not ok:
        raise SettingError(message)


def too_few_samples(num_samples: int, *, batch_size: int, workers: int) -> str | None:
    """Why a training set of ``num_samples`` cannot give every one of ``workers`` workers one
    batch of ``batch_size`` a step, or None."""
    global_batch = batch_size * workers
    if num_samples >= global_batch:
        return None
    return (
        f"the training set has {num_samples} samples, fewer than one global batch of "
        f"{global_batch} (trainer.batch_size × trainer.workers): lower either"
    )
