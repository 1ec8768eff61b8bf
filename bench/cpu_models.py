"""Models the CPU benchmark runs that have no library to come from here (ResNet-18, MobileNetV3-small).

torchvision is not installed on the development machine, so ResNet-18 is written
out: BasicBlock, stages [2, 2, 2, 2] of 64-128-256-512 channels, batch norm,
a 7x7 stride-2 stem with 3x3 max pool, global average pool, a 1000-way linear
head, and the same weight initialisation as torchvision's `resnet18()`.
"""

from __future__ import annotations

import torch
import torch.nn as nn


def _conv3x3(inputs: int, outputs: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(inputs, outputs, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm; a 1x1 projection on the shortcut when the shape changes."""

    def __init__(self, inputs: int, outputs: int, stride: int = 1):
        super().__init__()
        self.conv1 = _conv3x3(inputs, outputs, stride)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(outputs, outputs)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.downsample = None
        if stride != 1 or inputs != outputs:
            self.downsample = nn.Sequential(
                nn.Conv2d(inputs, outputs, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(outputs),
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        widths = [64, 128, 256, 512]
        stages = []
        inputs = 64
        for index, width in enumerate(widths):
            stride = 1 if index == 0 else 2
            stages.append(nn.Sequential(BasicBlock(inputs, width, stride), BasicBlock(width, width)))
            inputs = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, classes)
        self._initialise()

    def _initialise(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _divisible(value: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round to a multiple of divisor, never below 90% of value."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_norm(inputs: int, outputs: int, kernel: int, stride: int = 1, groups: int = 1,
               activation: type[nn.Module] | None = None) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(inputs, outputs, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(outputs, eps=0.001, momentum=0.01),
    ]
    if activation is not None:
        layers.append(activation(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        scale = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        scale = self.fc2(torch.relu(self.fc1(scale)))
        return x * torch.nn.functional.hardsigmoid(scale)


class InvertedResidual(nn.Module):
    """MobileNetV3's block: 1x1 expansion, depthwise kxk, optional squeeze-excitation, 1x1 projection."""

    def __init__(self, inputs: int, kernel: int, expanded: int, outputs: int, squeeze: bool, hardswish: bool,
                 stride: int):
        super().__init__()
        activation = nn.Hardswish if hardswish else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != inputs:
            layers.append(_conv_norm(inputs, expanded, 1, activation=activation))
        layers.append(_conv_norm(expanded, expanded, kernel, stride, groups=expanded, activation=activation))
        if squeeze:
            layers.append(SqueezeExcitation(expanded, _divisible(expanded // 4)))
        layers.append(_conv_norm(expanded, outputs, 1))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and inputs == outputs

    def forward(self, x):
        out = self.block(x)
        return out + x if self.residual else out


# (kernel, expanded, outputs, squeeze-excitation, hardswish, stride) per block, torchvision's table.
MOBILENET_V3_SMALL = [
    (3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2), (3, 88, 24, False, False, 1),
    (5, 96, 40, True, True, 2), (5, 240, 40, True, True, 1), (5, 240, 40, True, True, 1),
    (5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1), (5, 288, 96, True, True, 2),
    (5, 576, 96, True, True, 1), (5, 576, 96, True, True, 1),
]


class MobileNetV3Small(nn.Module):
    """torchvision's mobilenet_v3_small written out (torchvision is not installed here):
    the same blocks, widths, activations, batch-norm settings and classifier."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [_conv_norm(3, 16, 3, 2, activation=nn.Hardswish)]
        inputs = 16
        for kernel, expanded, outputs, squeeze, hardswish, stride in MOBILENET_V3_SMALL:
            layers.append(InvertedResidual(inputs, kernel, expanded, outputs, squeeze, hardswish, stride))
            inputs = outputs
        layers.append(_conv_norm(inputs, 6 * inputs, 1, activation=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * inputs, 1024), nn.Hardswish(inplace=True),
                                        nn.Dropout(0.2, inplace=True), nn.Linear(1024, classes))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def calibrate_batch_norms(model: nn.Module, inputs: list) -> None:
    """Running statistics of every batch norm set to one batch's: with the initial ones (mean 0,
    variance 1) MobileNetV3's activations shrink a hundredfold per stage in eval mode and
    its logits are ~1e-9, too small for comparing compiled and eager outputs."""
    norms = [module for module in model.modules() if isinstance(module, nn.BatchNorm2d)]
    momenta = [norm.momentum for norm in norms]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: after one batch, that batch's statistics
    model.train()
    with torch.no_grad():
        model(*inputs)
    for norm, momentum in zip(norms, momenta):
        norm.momentum = momentum
