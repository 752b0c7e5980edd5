"""
Data-parallel training over processes (MPI, NCCL).
"""
from __future__ import annotations
import numpy
import typing
__all__ = ['Communicator', 'connect', 'launched_by_env', 'launched_by_mpi']
class Communicator:
    """
    The processes of one data-parallel job, numbered 0 to size - 1. Every collective must be called by every process, in the same order, with the same sizes; one that does not complete within the timeout raises DistributedError.
    """
    def abort(self, code: int = 1) -> None:
        """
        Ends every process of the job with `code` (after an error the others cannot see).
        """
    def all_reduce_sum(self, values: typing.Any) -> numpy.ndarray:
        """
        Sums the array over the processes, in place (every process gets the sums); returns it.
        """
    def broadcast(self, values: typing.Any, root: int = 0) -> numpy.ndarray:
        """
        Rank `root`'s array into every process's (same size everywhere), in place; returns it.
        """
    @property
    def engine(self) -> str:
        """
        'mpi' or 'nccl'
        """
    @property
    def rank(self) -> int:
        ...
    @property
    def size(self) -> int:
        ...
def connect(engine: str = 'auto', timeout: float = 0.0) -> Communicator:
    """
    The job this process belongs to, or None to train alone. engine: 'auto' (MPI under mpirun, NCCL when started by environment: WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT; else None), 'mpi', 'nccl' or 'none'. timeout: seconds a collective may take (0: $MN_DISTRIBUTED_TIMEOUT, else 600).
    """
def launched_by_env() -> bool:
    """
    Whether the environment (WORLD_SIZE) says this process belongs to a job.
    """
def launched_by_mpi() -> bool:
    """
    Whether mpirun (or another MPI launcher) started this process.
    """
