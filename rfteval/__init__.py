"""rfteval: an eval harness for reinforcement fine-tuning.

Light on purpose: importing the package must not pull pandas, pyarrow or openai, so that
`rfteval --help` starts fast. Import from the submodules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, MutableMapping

__version__ = "0.1.0"


def lazy_reexport(namespace: MutableMapping[str, object], module_of: Callable[[str], str]) -> Callable[[str], object]:
    """A package's module `__getattr__` (PEP 562) that hands out a submodule's public names on first use and
    caches them in the package (`namespace` is its `globals()`).

    rfteval.compare, .readiness and .stats re-export their main module this way: those are the public paths the
    README shows, and importing one submodule of a package must not load the others. No list of names, so the
    submodule may gain or lose names without this changing.
    """

    def __getattr__(name: str) -> object:
        module = importlib.import_module(module_of(name))
        if name.startswith("_") or not hasattr(module, name):
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(module, name)
        namespace[name] = value
        return value

    return __getattr__
