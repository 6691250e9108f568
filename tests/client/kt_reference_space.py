"""Kernel Tuner's search space, computed the way its documentation describes it, independently
of ktune_client (tests compare ktune's admitted configs with this):

- the configs are the cartesian product of tune_params, in the order the parameters and their
  values are given;
- a string restriction is a Python expression: each parameter name in it is replaced by the
  config's value and the result is evaluated; a function in the restrictions list is called with
  the parameters as keyword arguments; a (function, [names]) tuple with those parameters; a
  `restrictions` that is itself a function is called with the config as a dict;
- when any of the default block size names (block_size_x, block_size_y, block_size_z, ngangs,
  nworkers, vlength) is a parameter, the product of those present may not exceed the device's
  maximum threads per block (1024).

With Kernel Tuner importable, its own Searchspace answers instead.
"""

import itertools
import re

BLOCK_SIZE_NAMES = ["block_size_x", "block_size_y", "block_size_z", "ngangs", "nworkers", "vlength"]


def _substituted(text, config):
    return "".join(str(config[part]) if part in config else part
                   for part in re.split(r"([a-zA-Z0-9_]+)", text))


def _holds(restriction, config):
    if isinstance(restriction, str):
        return bool(eval(_substituted(restriction, config)))  # noqa: S307 (the test's own text)
    if isinstance(restriction, tuple):
        function, names = restriction
        return bool(function(**{n: config[n] for n in names}))
    return bool(restriction(**config))


def admitted(tune_params, restrictions=None, max_threads=1024):
    """Kernel Tuner's admitted configs as a list of value tuples in tune_params order."""
    try:
        from kernel_tuner.searchspace import Searchspace  # noqa: PLC0415
    except ImportError:
        Searchspace = None
    if Searchspace is not None:
        space = Searchspace(tune_params, restrictions, max_threads)
        return [tuple(c) for c in space.list]
    names = list(tune_params)
    block_names = [n for n in BLOCK_SIZE_NAMES if n in tune_params]
    out = []
    for values in itertools.product(*tune_params.values()):
        config = dict(zip(names, values))
        if callable(restrictions):
            ok = bool(restrictions(dict(config)))
        else:
            items = [restrictions] if isinstance(restrictions, str) else (restrictions or [])
            ok = all(_holds(r, config) for r in items)
        if ok and block_names:
            product = 1
            for n in block_names:
                product *= config[n]
            ok = product <= max_threads
        if ok:
            out.append(values)
    return out
