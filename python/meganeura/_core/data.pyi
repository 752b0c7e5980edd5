"""
Data sets and tensor files.
"""
from __future__ import annotations
import numpy
import os
import typing
__all__ = ['DataLoader', 'TensorDataset', 'fashion_mnist_classes', 'imagenet_preprocess', 'load_fashion_mnist', 'load_npy', 'load_safetensors', 'log_mel_spectrogram', 'read_image', 'read_wav', 'save_safetensors']
class DataLoader:
    """
    Batches of a classification data set, epoch after epoch, in the order the C++ trainer uses (a pure function of the seed and the epoch).
    """
    def __init__(self, inputs: typing.Any, labels: typing.Any, *, batch_size: int = 32, shuffle: bool = True, seed: int = 0, drop_last: bool = False, classes: int | None = None) -> None:
        ...
    def epoch_order(self, epoch: int) -> list[int]:
        ...
    def next(self) -> dict:
        """
        The next batch: {'inputs', 'labels', 'epoch', 'step', 'indices'} (the last batch of an epoch may be short unless drop_last).
        """
    def seek(self, epoch: int, step: int = 0) -> None:
        ...
    @property
    def batches_per_epoch(self) -> int:
        ...
    @property
    def position(self) -> tuple:
        ...
class TensorDataset:
    """
    Named columns of samples (the first dimension of every array), fed to a graph's inputs of the same names by the Trainer.
    """
    @staticmethod
    def from_npy(files: dict[str, os.PathLike]) -> TensorDataset:
        """
        Each .npy file (dict of column name -> path) a column.
        """
    @staticmethod
    def from_safetensors(path: os.PathLike, names: list[str] = []) -> TensorDataset:
        """
        The named tensors of a safetensors file (all when `names` is empty), each a column.
        """
    def __init__(self, columns: dict = {}) -> None:
        """
        From a dict of column name -> array.
        """
    def __len__(self) -> int:
        ...
    def add(self, name: str, values: typing.Any) -> None:
        ...
    def column(self, name: str) -> numpy.ndarray:
        ...
    def slice(self, begin: int, count: int) -> TensorDataset:
        ...
    @property
    def names(self) -> list[str]:
        ...
def fashion_mnist_classes() -> list[str]:
    ...
def imagenet_preprocess(image: typing.Any) -> numpy.ndarray:
    """
    torchvision's Resize(256), CenterCrop(224), ToTensor, Normalize(ImageNet) on a PIL image, computed as PIL and torchvision do: float32 [3, 224, 224] from a path or uint8 pixels [H, W, 3].
    """
def load_fashion_mnist(split: str = 'train', layout: str = 'flat', dir: os.PathLike = '', max_samples: int | None = None) -> tuple:
    """
    (images float32 [N, 784] or [N, 1, 28, 28] in [0, 1], labels int32 [N]); the files are looked for in `dir`, $MN_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist.
    """
def load_npy(path: os.PathLike) -> numpy.ndarray:
    """
    A .npy file as the column the Trainer would make of it.
    """
def load_safetensors(path: os.PathLike) -> dict:
    """
    Every tensor of a safetensors file, by name.
    """
def log_mel_spectrogram(samples: typing.Any, sample_rate: int, n_mels: int = 80, pad_to_samples: int = 480000) -> numpy.ndarray:
    """
    Whisper's log-mel features float32 [n_mels, frames] as transformers' WhisperFeatureExtractor computes them (pad_to_samples=0: the audio's own length).
    """
def read_image(path: os.PathLike) -> numpy.ndarray[numpy.uint8]:
    """
    A PNG or JPEG file as uint8 RGB pixels [height, width, 3].
    """
def read_wav(path: os.PathLike) -> tuple:
    """
    A WAV file (PCM 16/24/32 bits or float32) as (float32 mono samples, sample rate, the file's channel count); channels are averaged.
    """
def save_safetensors(path: os.PathLike, tensors: dict, metadata: dict[str, str] = {}) -> None:
    """
    Writes the arrays (float32, int32, uint32) atomically: a failure leaves the old file.
    """
