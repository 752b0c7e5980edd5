"""
The CPU reference interpreter.
"""
from __future__ import annotations
import meganeura._core
__all__ = ['evaluate', 'initial_parameters']
def evaluate(graph: meganeura._core.Graph, feeds: dict = {}) -> dict:
    """
    Every output of `graph` computed on the CPU in float64 (feeds: inputs, and parameters in place of their initializers).
    """
def initial_parameters(graph: meganeura._core.Graph) -> dict:
    """
    The initial values of every parameter and state.
    """
