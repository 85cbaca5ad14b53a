"""The OSP server's order of operations (``osp_server.serve_osp``), with its links replaced by a
recorder: a message comes off a gloo link only once its receive is posted, so a server that
waits for its own sends before posting the next receives uses one direction of its link at a
time. Every wait for a send but the run's last must find the next pushes' receives posted."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from gradsync.compressors.options.base import NoneCompressorConfig
from gradsync.config.schema import TrainerConfig
from gradsync.schedulers.ps import osp_server
from gradsync.schedulers.ps.config import OspConfig
from gradsync.train.servers import serving
from tests.helpers.training import tiny_model

WORKERS, STEPS = 2, 5


class _Links:
    """Both of the server's links (RS and ICS): pushes arrive at once, as 0.5 everywhere (a
    loss and compute time of 0.5 in the stamps); each send wait notes the receives posted
    and not yet waited for."""

    def __init__(self) -> None:
        self.posted = 0
        self.outstanding_at_send_waits: list[int] = []

    def start_recv(self, payload, *, src, tag=0):
        self.posted += 1

        def finish():
            self.posted -= 1
            for tensor in payload:
                tensor.fill_(0.5)
            return payload

        return finish

    def start_send(self, payload, *, dst, tag=0):
        return lambda: self.outstanding_at_send_waits.append(self.posted)


def _cfg() -> DictConfig:
    trainer = OmegaConf.structured(TrainerConfig(workers=WORKERS, lr=0.1))
    scheduler = OmegaConf.structured(OspConfig(budget=0.9))  # unimportant layers from step 1
    compressor = OmegaConf.structured(NoneCompressorConfig())
    return OmegaConf.create({"trainer": trainer, "scheduler": scheduler, "compressor": compressor})


def test_the_server_posts_the_next_receives_before_it_waits_for_its_sends(monkeypatch):
    links = _Links()
    monkeypatch.setattr(osp_server, "TorchCollective", lambda: links)
    monkeypatch.setattr(osp_server, "background", lambda: links)
    sizes = []
    job = serving(
        _cfg(),
        server=0,
        steps_per_epoch=STEPS,
        total_steps=STEPS,
        after_step=lambda values: sizes.append(values.numel()),
    )
    osp_server.serve_osp(tiny_model().float(), job)
    assert len(sizes) == STEPS
    waits = links.outstanding_at_send_waits
    assert len(waits) > STEPS * WORKERS  # RS replies every step, ICS replies after step 0
    assert all(posted > 0 for posted in waits[:-WORKERS]), waits
    assert links.posted == 0
