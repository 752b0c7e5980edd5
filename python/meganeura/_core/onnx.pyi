"""
ONNX models as graphs.
"""
from __future__ import annotations
import meganeura._core
from meganeura.onnx import UnsupportedError
import os
__all__ = ['Model', 'UnsupportedError', 'load', 'supported_ops']
class Model:
    """
    An imported ONNX model: its graph (inputs and outputs by the model's names, float initializers as parameters) and weights.
    """
    def load_weights(self, session: meganeura._core.Session) -> None:
        """
        Writes every weight into the session's parameter of the same name.
        """
    @property
    def graph(self) -> meganeura._core.Graph:
        ...
    @property
    def inputs(self) -> list:
        ...
    @property
    def op_counts(self) -> dict[str, int]:
        ...
    @property
    def opset(self) -> int:
        ...
    @property
    def outputs(self) -> list:
        ...
    @property
    def producer(self) -> str:
        ...
    @property
    def specialized_inputs(self) -> list[str]:
        ...
    @property
    def weights(self) -> dict:
        ...
def load(path: os.PathLike, input_shapes: dict = {}, input_values: dict = {}, initializers_as_parameters: bool = True) -> Model:
    """
    Imports an ONNX model file. input_shapes binds symbolic dimensions ({name: shape}); input_values gives inputs whose values decide shapes ({name: array}).
    """
def supported_ops() -> list[str]:
    """
    The ONNX op types the importer knows.
    """
