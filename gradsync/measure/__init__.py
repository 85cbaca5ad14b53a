"""Measuring a job on this machine, for ``gradsync simulate`` and ``plan``: the model's profile
(a real training step), what each compressor puts on the wire, the links among workers, and the
prediction those measurements feed (``jobs.Predictor``); the measurements of the bundled jobs,
kept in the package (``kept.py``); the progress bar said while measuring (``progress.py``)."""


class MeasurementError(RuntimeError):
    """A measurement on this host could not be taken (a probe worker failed or hung)."""
