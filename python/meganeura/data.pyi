from ._core.data import *  # noqa: F401,F403
