from ._core.optim import *  # noqa: F401,F403
