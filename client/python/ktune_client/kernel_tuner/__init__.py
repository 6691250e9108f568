"""Kernel Tuner's user API, run on ktuned: a Kernel Tuner script switches by changing its
imports (`from kernel_tuner import ...` -> `from ktune_client.kernel_tuner import ...`).

Entry points: tune_kernel (every config measured by ktuned's workers, kept in its store),
run_kernel (one config run once, its outputs returned as arrays). Modules as Kernel Tuner's:
util, file_utils, integration, kernelbuilder. docs/kernel-tuner.md lists what each does here,
what differs and what is refused. The package imports without numpy; the entry points say
when they need it.
"""

from ._run import KernelRunError, run_kernel
from ._tune import (CompilationFailedConfig, ErrorConfig, InvalidConfig, RuntimeFailedConfig,
                    default_kernel_dir, tune_kernel)

__all__ = ["tune_kernel", "run_kernel", "default_kernel_dir", "ErrorConfig", "InvalidConfig",
           "CompilationFailedConfig", "RuntimeFailedConfig", "KernelRunError"]
