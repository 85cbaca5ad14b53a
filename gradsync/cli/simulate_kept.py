"""``python -m gradsync.cli.simulate_kept [NAME ...]``: measure the kept profiles again
(``gradsync/measure/kept.py``: every ``KeptJob``, or those named) and write them into the
package, for ``gradsync simulate`` to start from.

Each job is measured as ``gradsync simulate`` measures it, with every compressor and scheduler:
its profile, then what every compressor sends among 2, 4 and 8 workers. Run it on an otherwise
idle host after a change to a model or to what a compressor sends (a kept profile whose tensors
differ from the model's is measured again by every call, and says so): all four take about a
quarter of an hour on two cores, ResNet-50 at 224 px half of it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from gradsync.cli.simulate import _parser, simulate
from gradsync.measure import kept, measured
from gradsync.measure.kept import KEPT, KEPT_JOBS, WORKER_COUNTS, KeptJob


def refresh(job: KeptJob, directory: Path = KEPT) -> Path:
    """Measure ``job`` here and write its kept file into ``directory``; its path."""
    with tempfile.TemporaryDirectory() as scratch:
        store = Path(scratch) / "measured.json"
        own, *more = WORKER_COUNTS
        args = _parser().parse(
            [
                *job.overrides,
                f"trainer.workers={own}",
                # A cluster of the job's workers, each on a machine of its own: nothing of this
                # host's links is probed, no scheduler's planning replayed here.
                "--compute",
                "1",
                "--workers",
                ",".join(map(str, more)),
                "--remeasure",
                "--measurements",
                str(store),
            ]
        )
        assert args is not None
        simulate(args)
        path = directory / f"{job.name}.json"
        kept.write(path, measured.read(store))
    return path


def main(argv: list[str] | None = None) -> int:
    names = argv if argv is not None else sys.argv[1:]
    jobs = {job.name: job for job in KEPT_JOBS}
    unknown = [name for name in names if name not in jobs]
    if unknown:
        print(
            f"gradsync: error: no kept job {unknown[0]}; valid: {', '.join(jobs)}",
            file=sys.stderr,
        )
        return 2
    for name in names or list(jobs):
        print(f"{name}: {refresh(jobs[name])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
