"""The one place a scheduler's hooks go onto the model. A family says what it wants to hear
(``ModelHooks``: a tensor's gradient is ready, the forward pass starts or ends, a module is about
to run or has run) and ``hook_model`` registers it; nothing else calls torch's hook methods.

Gradient hooks are ``register_post_accumulate_grad_hook``: they run once the tensor's ``.grad``
holds the whole step's gradient (after accumulation), which is when its exchange may start, as
DDP's reducer marks a bucket's tensor ready.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torch import nn
from torch.utils.hooks import RemovableHandle


@dataclass(frozen=True)
class ModelHooks:
    """What a scheduler hears of a step, each callback optional."""

    on_gradient: Callable[[int], None] | None = None
    """Tensor ``index`` (into the parameters as given, backward order) has its gradient."""
    on_forward_start: Callable[[], None] | None = None
    on_forward_end: Callable[[], None] | None = None
    before_module: Callable[[nn.Module], None] | None = None
    """A module (every one of the model's, or those ``modules`` picks) is about to run."""
    after_module: Callable[[nn.Module], None] | None = None
    """A module (as above) has run."""
    modules: Callable[[nn.Module], bool] | None = None
    """Which modules the module callbacks are for (None: all)."""


@dataclass
class Hooked:
    """The handles of what ``hook_model`` registered, to take it off again."""

    handles: list[RemovableHandle] = field(default_factory=list)
    before_module: dict[int, RemovableHandle] = field(default_factory=dict)
    """By ``id(module)``: a module's pre-hook, for a family that stops hearing of some."""

    def remove(self) -> None:
        for handle in [*self.handles, *self.before_module.values()]:
            handle.remove()
        self.handles, self.before_module = [], {}


def hook_model(model: nn.Module, params: Sequence[nn.Parameter], hooks: ModelHooks) -> Hooked:
    """Register ``hooks`` on ``model`` and its ``params``."""
    hooked = Hooked()
    if hooks.on_gradient is not None:
        on_gradient = hooks.on_gradient
        for index, param in enumerate(params):
            hooked.handles.append(
                param.register_post_accumulate_grad_hook(lambda _, i=index: on_gradient(i))
            )
    before, after = hooks.before_module, hooks.after_module
    for module in model.modules():
        if hooks.modules is not None and not hooks.modules(module):
            continue
        if before is not None:
            hooked.before_module[id(module)] = module.register_forward_pre_hook(
                lambda module, _, run=before: run(module)
            )
        if after is not None:
            hooked.handles.append(
                module.register_forward_hook(lambda module, *_, run=after: run(module))
            )
    if hooks.on_forward_start is not None:
        start = hooks.on_forward_start
        hooked.handles.append(model.register_forward_pre_hook(lambda *_: start()))
    if hooks.on_forward_end is not None:
        end = hooks.on_forward_end
        hooked.handles.append(model.register_forward_hook(lambda *_: end()))
    return hooked
