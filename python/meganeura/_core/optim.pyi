"""
Optimizers, schedules and the update counter.
"""
from __future__ import annotations
import meganeura._core
import typing
__all__ = ['Adam', 'AdamW', 'LrSchedule', 'Optimizer', 'SGD', 'Stepper']
class LrSchedule:
    """
    Learning rate per update: linear warm-up, then constant, step decay or cosine down to min_lr.
    """
    gamma: float
    min_lr: float
    step_size: int
    warmup: int
    def __init__(self, kind: str = 'constant', *, warmup: int = 0, step_size: int = 1000, gamma: float = 0.1, min_lr: float = 0.0) -> None:
        ...
    def lr_at(self, base_lr: float, update: int, total: int) -> float:
        ...
class Optimizer:
    """
    An optimizer's kind and hyperparameters (made by SGD, Adam, AdamW).
    """
    accumulate: int
    beta1: float
    beta2: float
    clip_grad_norm: float
    dampening: float
    eps: float
    lr: float
    momentum: float
    nesterov: bool
    schedule: LrSchedule
    weight_decay: float
    def __repr__(self) -> str:
        ...
    def lr_at(self, update: int, total: int) -> float:
        ...
    def validate(self) -> None:
        """
        Raises mn.Error naming the first hyperparameter out of its range.
        """
    @property
    def kind(self) -> str:
        ...
class Stepper:
    """
    Keeps a training session's update count and sets its learning rate, step and bias corrections before every step.
    """
    def __init__(self, optimizer: Optimizer, total_updates: int = 0) -> None:
        ...
    def advance(self) -> None:
        ...
    def seek(self, micro_batches: int) -> None:
        ...
    def set_inputs(self, session: meganeura._core.Session) -> None:
        ...
    def step(self, session: meganeura._core.Session) -> None:
        """
        set_inputs, one session step, and counts it.
        """
    @property
    def lr(self) -> float:
        ...
    @property
    def micro_batches(self) -> int:
        ...
    @property
    def optimizer(self) -> Optimizer:
        ...
    @property
    def updates(self) -> int:
        ...
def Adam(lr: float = 0.001, *, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-08, weight_decay: float = 0.0, clip_grad_norm: float = 0.0, accumulate: int = 1, schedule: typing.Any = None) -> Optimizer:
    """
    torch.optim.Adam's semantics and defaults.
    """
def AdamW(lr: float = 0.001, *, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-08, weight_decay: float = 0.01, clip_grad_norm: float = 0.0, accumulate: int = 1, schedule: typing.Any = None) -> Optimizer:
    """
    torch.optim.AdamW's semantics and defaults.
    """
def SGD(lr: float = 0.001, *, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, clip_grad_norm: float = 0.0, accumulate: int = 1, schedule: typing.Any = None) -> Optimizer:
    """
    torch.optim.SGD's semantics and defaults.
    """
