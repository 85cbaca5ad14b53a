"""Image models: build from their config options, train a step on their datasets' shapes, and
the CIFAR/ImageNet variants really are the networks they claim to be."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradsync.config.instantiate import build
from gradsync.data.spec import DataSpec
from gradsync.jobs.compose import ConfigError, compose_jobs

CIFAR = DataSpec(task="classification", num_classes=10, input_shape=(3, 32, 32))
MNIST = DataSpec(task="classification", num_classes=10, input_shape=(1, 28, 28))
SMALL_IMAGENET = DataSpec(task="classification", num_classes=7, input_shape=(3, 64, 64))
IMAGENET = DataSpec(task="classification", num_classes=1000, input_shape=(3, 224, 224))

IMAGE_MODELS = [
    "resnet18",
    "resnet50",
    "resnet101",
    "resnet20",
    "vgg16",
    "vgg19",
    "alexnet",
    "cifarnet",
]
IMAGENET_MODELS = ["resnet18", "resnet50", "resnet101", "vgg16", "vgg19", "alexnet"]


def make(option: str, spec: DataSpec, *overrides: str) -> nn.Module:
    """The model for ``spec``'s images, from a job of those images (composing tries it on them)."""
    shape = ",".join(str(size) for size in spec.input_shape)
    data = [f"dataset.image_shape=[{shape}]", f"dataset.num_classes={spec.num_classes}"]
    cfg = compose_jobs([f"model={option}", "dataset=synthetic", *data, *overrides], multirun=False)[
        0
    ]
    return build(cfg.model, path="model")(spec=spec)


def train_step(model: nn.Module, spec: DataSpec, batch: int = 2) -> torch.Tensor:
    model.train()
    out = model(torch.randn(batch, *spec.input_shape))
    assert out.shape == (batch, spec.num_classes)
    nn.functional.cross_entropy(out, torch.randint(spec.num_classes, (batch,))).backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    return out


def convs(model: nn.Module) -> list[nn.Conv2d]:
    return [m for m in model.modules() if isinstance(m, nn.Conv2d)]


def count(model: nn.Module, kind: type[nn.Module]) -> int:
    return sum(isinstance(m, kind) for m in model.modules())


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("option", IMAGE_MODELS)
def test_trains_on_cifar_shapes(option):
    train_step(make(option, CIFAR), CIFAR)


@pytest.mark.parametrize("option", ["resnet18", "resnet20", "alexnet", "cifarnet"])
def test_trains_on_one_channel_mnist_shapes(option):
    model = make(option, MNIST)
    assert convs(model)[0].in_channels == 1
    train_step(model, MNIST)


@pytest.mark.parametrize("option", IMAGENET_MODELS)
def test_imagenet_variant_trains_on_small_inputs(option):
    model = make(option, SMALL_IMAGENET, "model.variant=imagenet")
    assert model.variant == "imagenet"
    train_step(model, SMALL_IMAGENET)


def test_auto_variant_is_imagenet_for_full_size_inputs():
    model = make("resnet18", IMAGENET)
    assert model.variant == "imagenet"
    train_step(model, IMAGENET, batch=1)


@pytest.mark.parametrize(("height", "variant"), [(32, "cifar"), (64, "cifar"), (65, "imagenet")])
def test_auto_variant_switches_above_64_pixels(height, variant):
    spec = DataSpec(task="classification", num_classes=10, input_shape=(3, height, height))
    assert make("resnet18", spec).variant == variant


def test_resnet_cifar_variant_has_a_3x3_stride_1_stem_and_no_max_pool():
    cifar, imagenet = (
        make("resnet18", CIFAR).net,
        make("resnet18", CIFAR, "model.variant=imagenet").net,
    )
    assert (cifar.conv1.kernel_size, cifar.conv1.stride) == ((3, 3), (1, 1))
    assert isinstance(cifar.maxpool, nn.Identity)
    assert (imagenet.conv1.kernel_size, imagenet.conv1.stride) == ((7, 7), (2, 2))
    assert isinstance(imagenet.maxpool, nn.MaxPool2d)
    # Same body and head otherwise: only the stem's weights differ in count.
    stem = 64 * 3 * (7 * 7 - 3 * 3)
    assert num_params(imagenet) - num_params(cifar) == stem


@pytest.mark.parametrize(
    ("option", "depth", "bottleneck"), [("resnet50", 50, 3), ("resnet101", 101, 3)]
)
def test_deep_resnets_use_bottleneck_blocks_of_their_depth(option, depth, bottleneck):
    model = make(option, CIFAR).net
    blocks = [
        b for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for b in layer
    ]
    assert len(blocks) * bottleneck + 2 == depth
    assert model.fc.in_features == 2048


def test_resnet20_is_the_paper_network():
    model = make("resnet20", CIFAR)
    weighted = [m for m in model.modules() if isinstance(m, nn.Conv2d | nn.Linear)]
    assert len(weighted) == 20
    assert sorted({c.out_channels for c in convs(model)}) == [16, 32, 64]
    # 0.27M parameters in He et al. 2016, Table 6 (option A shortcuts have none).
    assert num_params(model) == 269_722


def test_resnet20_shortcut_zero_pads_new_channels():
    from gradsync.models.resnet20 import BasicBlock

    block = BasicBlock(16, 32, stride=2)
    x = torch.randn(1, 16, 8, 8)
    short = block.shortcut(x)
    assert short.shape == (1, 32, 4, 4)
    assert torch.equal(short[:, 8:24], x[:, :, ::2, ::2])
    assert short[:, :8].abs().sum() == 0 and short[:, 24:].abs().sum() == 0


@pytest.mark.parametrize(("option", "num_convs"), [("vgg16", 13), ("vgg19", 16)])
def test_vgg_variants(option, num_convs):
    cifar = make(option, CIFAR)
    imagenet = make(option, CIFAR, "model.variant=imagenet")
    assert len(convs(cifar)) == num_convs == len(convs(imagenet))
    head = cifar.net.classifier
    assert isinstance(head, nn.Linear) and (head.in_features, head.out_features) == (512, 10)
    assert isinstance(cifar.net.avgpool, nn.AdaptiveAvgPool2d)
    linears = [m for m in imagenet.net.classifier if isinstance(m, nn.Linear)]
    assert [m.out_features for m in linears] == [4096, 4096, 10]


def test_vgg_batch_norm_option():
    with_bn = make("vgg16", CIFAR)
    without = make("vgg16", CIFAR, "model.batch_norm=false")
    assert count(with_bn, nn.BatchNorm2d) == 13 and count(without, nn.BatchNorm2d) == 0
    train_step(without, CIFAR)


def test_alexnet_variants_and_dropout():
    cifar = make("alexnet", CIFAR, "model.dropout=0.3")
    imagenet = make("alexnet", SMALL_IMAGENET, "model.variant=imagenet")  # too small for 32 px
    assert (convs(cifar)[0].kernel_size, convs(cifar)[0].stride) == ((3, 3), (1, 1))
    assert (convs(imagenet)[0].kernel_size, convs(imagenet)[0].stride) == ((11, 11), (4, 4))
    assert cifar.net.classifier[1].in_features == 256 * 3 * 3
    assert imagenet.net.classifier[1].in_features == 256 * 6 * 6
    assert {m.p for m in cifar.modules() if isinstance(m, nn.Dropout)} == {0.3}
    assert {m.p for m in make("alexnet", CIFAR).modules() if isinstance(m, nn.Dropout)} == {0.2}


def test_cifarnet_layers():
    model = make("cifarnet", CIFAR)
    assert [(c.kernel_size, c.out_channels) for c in convs(model)] == [((5, 5), 64)] * 2
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [
        (64 * 8 * 8, 384),
        (384, 192),
        (192, 10),
    ]
    assert count(model, nn.LocalResponseNorm) == 2
    assert [m.p for m in model.modules() if isinstance(m, nn.Dropout)] == [0.5]


def test_cifarnet_without_dropout_is_deterministic_in_training_mode():
    model = make("cifarnet", CIFAR, "model.dropout=0")
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(model.train()(x), model(x))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=resnet18", "model.variant=tiny"], "model.variant must be one of"),
        (["model=resnet18", "model.depth=20"], "model.depth must be one of"),
        (["model=vgg16", "model.depth=17"], "model.depth must be one of"),
        (["model=alexnet", "model.dropout=1.5"], "model.dropout must be in"),
    ],
)
def test_bad_model_options_are_refused_up_front(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose_jobs(overrides, multirun=False)
