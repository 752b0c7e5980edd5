"""
Vision models in torchvision's layout.
"""
from __future__ import annotations
import meganeura._core.nn
import typing
__all__ = ['resnet']
def resnet(depth: typing.Any = 18, *, num_classes: int = 1000, in_channels: int = 3, small_input_stem: bool = False) -> meganeura._core.nn.Module:
    """
    torchvision.models.resnet18/34/50/101/152 (depth as a number or 'resnet50'), its state_dict keys; small_input_stem: a 3x3 stride-1 stem without max pool for 28x28 or 32x32 images.
    """
