"""The run directory's name of a job started by torchrun, which every process of the job, on
every node, must agree on (``${gradsync.torchrun_run:}`` in ``conf/runner/torchrun.yaml``).

Each process composes its own config, so a clock read by each (Hydra's ``${now:...}``) can
differ between them, and torchrun's run id is ``none`` unless ``--rdzv-id`` or ``--standalone``
gives one. The processes agree through torchrun's own store instead: the one its agent serves at
MASTER_ADDR:MASTER_PORT when it sets TORCHELASTIC_USE_AGENT_STORE (static and c10d
rendezvous). Each proposes ``<date>/<time>-<tag>`` and the first proposal the store takes is
everyone's. The tag is the run id when torchrun has a real one (an id reused for several jobs
still gets a directory per job, from the time), else a random one, so that two jobs started in
the same second do not meet either.

Without that store (etcd rendezvous, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1) the run id names the
directory, and a job without one is refused (``run_name_problem``).
"""

from __future__ import annotations

import functools
import os
import secrets
import time
from collections.abc import Mapping
from datetime import timedelta

STORE_KEY = "gradsync/run_dir"
NO_RUN_ID = "none"  # torchrun's run id without --rdzv-id or --standalone
STORE_TIMEOUT_S = 60.0


NO_AGREEMENT = (
    "torchrun gave no run id and no store to agree on a run directory through (etcd "
    "rendezvous, or TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1): pass torchrun --rdzv-id=<an id "
    "unique to this job>"
)


def torchrun_run_name(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return _name(env.get("TORCHELASTIC_RUN_ID"), _store(env))


def run_name_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Why the processes of this torchrun job have no way to agree on a run directory (one
    line, asked before anything is written), or None."""
    env = os.environ if environ is None else environ
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id == NO_RUN_ID and _store(env) is None:
        return NO_AGREEMENT
    return None


def _store(env: Mapping[str, str]) -> tuple[str, int] | None:
    """Where torchrun's agent serves its store to the workers, if it does."""
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    return env["MASTER_ADDR"], int(env["MASTER_PORT"])


@functools.cache  # Hydra resolves the run directory several times; one answer per process
def _name(run_id: str | None, store: tuple[str, int] | None) -> str:
    proposal = _proposal(run_id)
    if run_id is None:
        return proposal  # not under torchrun (a printed config): nobody to agree with
    if store is not None:
        return agree(*store, proposal)
    if run_id != NO_RUN_ID:
        return run_id  # nothing to agree through: the id the user gave names the job
    raise RuntimeError(NO_AGREEMENT)  # refused before, by run_name_problem


def _proposal(run_id: str | None) -> str:
    tag = run_id if run_id not in (None, NO_RUN_ID) else secrets.token_hex(4)
    return f"{time.strftime('%Y-%m-%d/%H-%M-%S')}-{tag}"


def agree(host: str, port: int, proposal: str) -> str:
    """The name in the store at ``host:port``: ``proposal`` if it is the first one there."""
    from torch.distributed import TCPStore  # the command's other paths need no torch

    store = TCPStore(host, port, is_master=False, timeout=timedelta(seconds=STORE_TIMEOUT_S))
    # Atomic: set only while the key is absent (""), and return what the key holds after.
    return store.compare_set(STORE_KEY, "", proposal).decode()
