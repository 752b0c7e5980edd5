"""
Modules in PyTorch's layout.
"""
from __future__ import annotations
import meganeura._core
import os
import typing
__all__ = ['BatchNorm2d', 'Conv1d', 'Conv2d', 'Dropout', 'Embedding', 'Flatten', 'GELU', 'LayerNorm', 'Linear', 'Module', 'ModuleList', 'MultiheadAttention', 'RMSNorm', 'ReLU', 'Sequential', 'SiLU', 'TransformerBlock']
class BatchNorm2d(Module):
    def __init__(self, num_features: int, eps: float = 1e-05, momentum: float = 0.1, affine: bool = True) -> None:
        ...
class Conv1d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> None:
        ...
class Conv2d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: typing.Any, stride: typing.Any = 1, padding: typing.Any = 0, dilation: typing.Any = 1, groups: int = 1, bias: bool = True) -> None:
        ...
class Dropout(Module):
    def __init__(self, p: float = 0.5) -> None:
        ...
class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None) -> None:
        ...
    @property
    def embedding_dim(self) -> int:
        ...
    @property
    def num_embeddings(self) -> int:
        ...
    @property
    def padding_idx(self) -> int | None:
        ...
class Flatten(Module):
    def __init__(self, start_dim: int = 1) -> None:
        ...
class GELU(Module):
    def __init__(self, approximate: str = 'none') -> None:
        ...
class LayerNorm(Module):
    def __init__(self, normalized_shape: typing.Any, eps: float = 1e-05, elementwise_affine: bool = True, bias: bool = True) -> None:
        ...
class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        ...
    @property
    def in_features(self) -> int:
        ...
    @property
    def out_features(self) -> int:
        ...
class Module:
    """
    A module in PyTorch's layout: parameters and buffers named as state_dict keys.
    """
    def __call__(self, *args, **kwargs) -> typing.Any:
        ...
    def __getattr__(self, arg0: str) -> Module:
        ...
    def __init__(self, kind: str = 'Module') -> None:
        ...
    def __repr__(self) -> str:
        ...
    def __setattr__(self, arg0: str, arg1: typing.Any) -> None:
        ...
    def child(self, name: str) -> Module:
        ...
    def eval(self) -> Module:
        ...
    def forward(self, x: meganeura._core.Tensor) -> meganeura._core.Tensor:
        ...
    def load_state_dict(self, session: meganeura._core.Session, state_dict: typing.Any) -> None:
        """
        Strict: every key exactly once (a dict of arrays or a safetensors file PyTorch wrote).
        """
    def named_buffers(self) -> typing.Any:
        ...
    def named_children(self) -> list[tuple[str, Module]]:
        ...
    def named_parameters(self) -> typing.Any:
        """
        (key, shape, dtype) of every parameter, in PyTorch's order.
        """
    def register_buffer(self, name: str, shape: list[int], init: meganeura._core.Init = ..., dtype: typing.Any = meganeura._core.DType.f32) -> None:
        ...
    def register_module(self, name: str, module: typing.Any) -> typing.Any:
        ...
    def register_parameter(self, name: str, shape: list[int], init: meganeura._core.Init = ..., dtype: typing.Any = meganeura._core.DType.f32) -> None:
        ...
    def reset_init(self, name: str, init: meganeura._core.Init) -> None:
        """
        Replaces the initializer of this module's parameter or buffer `name` (as torch.nn.init's functions do) for graphs built after the call.
        """
    def save_state_dict(self, session: meganeura._core.Session, path: os.PathLike) -> None:
        """
        A safetensors file that torch's load_state_dict(safetensors.torch.load_file(path)) reads.
        """
    def seed(self, seed: int) -> Module:
        """
        Seeds the initializers of the whole tree (each parameter draws from the seed and its name).
        """
    def state_dict(self, session: meganeura._core.Session) -> dict:
        """
        The session's values of this module's state, keyed as PyTorch's.
        """
    def state_keys(self) -> list[str]:
        ...
    def tensor(self, graph: meganeura._core.Graph, name: str) -> meganeura._core.Tensor:
        """
        The graph tensor of this module's parameter or buffer `name` in `graph`.
        """
    def train(self, mode: bool = True) -> Module:
        ...
    @property
    def kind(self) -> str:
        ...
    @property
    def path(self) -> str:
        ...
    @property
    def training(self) -> bool:
        ...
class ModuleList(Module):
    def __getitem__(self, index: int) -> Module:
        ...
    def __init__(self, modules: list[Module] = []) -> None:
        ...
    def __len__(self) -> int:
        ...
    def append(self, module: Module) -> None:
        ...
class MultiheadAttention(Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        ...
    def forward(self, query: meganeura._core.Tensor, key: meganeura._core.Tensor | None = None, value: meganeura._core.Tensor | None = None, mask: meganeura._core.Tensor | None = None, causal: bool = False, key_padding_mask: meganeura._core.Tensor | None = None) -> meganeura._core.Tensor:
        """
        Inputs [B, L, E] (batch first); key and value default to the query. key_padding_mask [B, Lk]: integers, nonzero where a key is left out (PyTorch's bool), or floats added to the scores.
        """
class RMSNorm(Module):
    def __init__(self, normalized_shape: typing.Any, eps: float | None = None, elementwise_affine: bool = True) -> None:
        ...
class ReLU(Module):
    def __init__(self) -> None:
        ...
class Sequential(Module):
    def __getitem__(self, index: int) -> Module:
        ...
    def __init__(self, *args) -> None:
        ...
    def __len__(self) -> int:
        ...
    def append(self, module: Module) -> None:
        ...
class SiLU(Module):
    def __init__(self) -> None:
        ...
class TransformerBlock(Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1, activation: str = 'relu', layer_norm_eps: float = 1e-05, bias: bool = True) -> None:
        ...
    def forward(self, x: meganeura._core.Tensor, mask: meganeura._core.Tensor | None = None, causal: bool = False, src_key_padding_mask: meganeura._core.Tensor | None = None) -> meganeura._core.Tensor:
        """
        torch.nn.TransformerEncoderLayer(batch_first=True, norm_first=True).
        """
