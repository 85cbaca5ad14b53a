"""The jobs ``benchmarks.gpu`` trains, composed as ``gradsync run`` composes them, and what this
process builds of one: gradsync's model, optimizer, precision and task, and a batch resident on
the device (so that a step is the model's work and the method's, never the data's)."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torch import Tensor, nn
from torch.optim import Optimizer

from gradsync.config.instantiate import build
from gradsync.data.spec import DataSpec
from gradsync.jobs.compose import compose_each
from gradsync.tasks import Task, build_task
from gradsync.train.build import build_model, build_optimizer, build_precision
from gradsync.train.precision import MixedPrecision


@dataclass(frozen=True)
class Workload:
    """A model, its data and the batch of each worker, as overrides of ``gradsync run``."""

    name: str
    setting: str
    """What the overrides choose, in words."""
    choices: tuple[str, ...]
    """The model's and the data's overrides."""
    batch: int

    @property
    def overrides(self) -> list[str]:
        return [*self.choices, f"trainer.batch_size={self.batch}"]

    def __str__(self) -> str:
        return f"{self.name} ({self.setting}; `{' '.join(self.overrides)}`)"


RESNET18 = Workload(
    "ResNet-18", "CIFAR stem, 32 px, batch 128", ("model=resnet18", "dataset=synthetic"), 128
)
RESNET50 = Workload(
    "ResNet-50",
    "224 px, batch 64",
    ("model=resnet50", "dataset=synthetic", "dataset.image_shape=[3,224,224]"),
    64,
)
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class Sizes:
    """How long a side-by-side measurement runs: ``warmup`` steps of each side, then
    ``rounds`` blocks of ``steps`` steps of each in turn."""

    warmup: int
    steps: int
    rounds: int


def on_device(device: torch.device, workers: int = 1) -> list[str]:
    """The overrides of a job of ``workers`` workers on ``device``'s kind."""
    return [f"trainer.device={device.type}", f"trainer.workers={workers}"]


def compose_job(overrides: Sequence[str]) -> DictConfig:
    """One job's config as ``gradsync run`` composes and checks it, for this process to build
    (so no runner's checks); ``ConfigError`` if it would refuse it."""
    ((cfg, problem),) = compose_each(list(overrides), launcher_here=False)
    if problem is not None:
        raise problem
    return cfg


def data_spec(cfg: DictConfig) -> DataSpec:
    """The job's inputs and outputs, from its dataset's settings (no data is loaded)."""
    spec = build(cfg.dataset, path="dataset").known_spec()
    if spec is None:
        raise ValueError(
            f"{cfg.dataset._target_} knows its shapes only once loaded: use a dataset that "
            "knows them first (dataset=synthetic)"
        )
    return spec


@dataclass
class Training:
    """One worker's training of a job, its batch resident on the device."""

    model: nn.Module
    optimizer: Optimizer
    task: Task
    precision: MixedPrecision
    batch: tuple[Tensor, ...]

    def forward_backward(self, model: nn.Module | None = None) -> Tensor:
        """The loss of the batch, differentiated as the training loop does it (``model``: the
        model wrapped, such as by DDP); the loss, detached."""
        with self.precision.autocast():
            loss = self.task.loss(self.model if model is None else model, self.batch)
        self.precision.backward(loss)
        return loss.detach()

    def step(self, model: nn.Module | None = None) -> None:
        """One plain PyTorch step: forward, backward, the optimizer's update."""
        self.forward_backward(model)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def resident_training(cfg: DictConfig, device: torch.device) -> Training:
    """The job's model (gradsync's constructor, its seed), optimizer, precision and task, and
    one random batch of its shapes on ``device`` (a classification job's)."""
    spec = data_spec(cfg)
    torch.manual_seed(cfg.trainer.seed)
    model = build_model(cfg, spec).to(device)
    task = build_task(spec)
    inputs, targets = task.example_batch(cfg.trainer.batch_size)
    batch = (
        torch.randn_like(inputs, device=device),
        torch.randint_like(targets, spec.num_classes, device=device),
    )
    return Training(model, build_optimizer(cfg, model), task, build_precision(cfg, device), batch)


def trainable_elements(cfg: DictConfig) -> int:
    """How many elements the job's gradient has."""
    model = build_model(cfg, data_spec(cfg))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@contextmanager
def process_group(
    device: torch.device, store: Path, *, rank: int = 0, world: int = 1
) -> Iterator[None]:
    """The default process group of ``world`` workers, this one ``rank``: NCCL with this
    worker on its GPU (bound at once, so its communicator is made here), gloo on the CPU."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        device_id=device if cuda else None,
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def release(device: torch.device) -> None:
    """Give back to the device what the objects dropped held (for the next job to have it)."""
    gc.collect()  # hooks on a model's parameters can hold it in reference cycles
    if device.type == "cuda":
        torch.cuda.empty_cache()
