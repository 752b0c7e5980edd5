from ._core.lm import *  # noqa: F401,F403
