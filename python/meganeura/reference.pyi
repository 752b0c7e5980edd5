from ._core.reference import *  # noqa: F401,F403
