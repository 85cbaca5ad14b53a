"""SGD with fresh gradients against SGD that applies each gradient one step late (what DeFT does
with every update), on the DeFT parity reproduction's model, data and optimizer: the CNN on
Fashion-MNIST, lr 0.05, momentum 0.9, a global batch of 64. One process, no gradsync scheduler:
whatever separates the two curves is the staleness alone.

    python -m benchmarks.delayed_sgd [--steps 300] [--write]
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader

from benchmarks.report import machine, publish
from gradsync.jobs.compose import compose_jobs
from gradsync.tasks import build_task
from gradsync.train.build import build_data, build_model

OVERRIDES = ["model=cnn", "dataset=fashion_mnist", "trainer.lr=0.05", "trainer.momentum=0.9"]
GLOBAL_BATCH = 64  # the parity runs' 2 workers x 32
WINDOW = 40  # steps per reported mean loss


def losses(delay: int, steps: int) -> list[float]:
    """Training loss of every step, applying each step's gradient ``delay`` steps late."""
    (cfg,) = compose_jobs(OVERRIDES, multirun=False, launcher_here=False)
    torch.manual_seed(int(cfg.trainer.seed))
    data = build_data(cfg)
    model = build_model(cfg, data.spec)
    task = build_task(data.spec)
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=float(cfg.trainer.lr), momentum=cfg.trainer.momentum)
    loader = DataLoader(data.train, batch_size=GLOBAL_BATCH, shuffle=True, drop_last=True)
    pending: list[list[torch.Tensor]] = []
    seen = []
    for step, batch in enumerate(loader):
        if step == steps:
            break
        optimizer.zero_grad(set_to_none=True)
        loss = task.loss(model, tuple(batch))
        loss.backward()
        pending.append([p.grad.clone() for p in params])
        if len(pending) > delay:
            for param, grad in zip(params, pending.pop(0), strict=True):
                param.grad = grad
            optimizer.step()
        seen.append(loss.item())
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    torch.set_num_threads(2)
    windows = range(0, args.steps, WINDOW)
    lines = [
        f"`python -m benchmarks.delayed_sgd --steps {args.steps} --write` — {machine()}",
        "",
        f"Mean training loss per {WINDOW} steps ({', '.join(OVERRIDES)}, batch {GLOBAL_BATCH}; "
        "chance is ln 10 = 2.30):",
        "",
        "| gradient | "
        + " | ".join(f"steps {w}–{min(w + WINDOW, args.steps) - 1}" for w in windows)
        + " |",
        "|---|" + "---:|" * len(windows),
    ]
    for delay, name in ((0, "fresh"), (1, "one step late")):
        seen = losses(delay, args.steps)
        means = [sum(seen[w : w + WINDOW]) / len(seen[w : w + WINDOW]) for w in windows]
        lines.append(f"| {name} | " + " | ".join(f"{m:.2f}" for m in means) + " |")
    title = "Delayed SGD on the DeFT parity recipe"
    publish("delayed_sgd", title, "\n".join(lines), write=args.write)


if __name__ == "__main__":
    main()
