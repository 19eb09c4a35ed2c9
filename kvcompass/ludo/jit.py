"""The numba compile options of the maintenance-side kernels (``cuckoo``, ``othello``, ``ops``).

Owns: ``kernel``/``inlined``, the decorators those modules use instead of a bare ``@njit``;
``view_of`` (an unchecked typed view into the one state buffer); and ``with_python_twin``, which
gives a numba intrinsic the plain-numpy body it runs when the JIT is off. Must not: be used for
code that allocates arrays (it compiles without numba's reference-counting runtime).

``kernel`` = ``njit(cache=True, _nrt=False)``. ``_nrt`` is numba's private switch for the
reference-counting runtime; these kernels only index preallocated arrays, and without it every
non-inlined call increfs and decrefs each array argument (~60 atomic calls per ``apply_ops``
entry, which also serialise the cache misses this code is bound by). Measured: inserts 25-40%
faster. If a numba release drops the switch, replace the body by ``njit(cache=True)(fn)``; only
speed is lost (measure again then: the helpers pass the ``TableState`` tuple ``st`` to one
another, whose members the runtime would count at every read).

``inlined`` adds ``inline="always"`` (numba inlines at IR level, before typing): the operation
loop and every helper it calls become one function, so no arrays are passed between them, and the
public entry ``ops.update_batch(mem, ...)`` takes one array. The cost is compile time (about a
minute for the first call of a fresh cache).

JIT off (``NUMBA_DISABLE_JIT=1``, ``make test-nojit``): numba's decorators then return the Python
function itself, so every kernel runs as plain Python over numpy scalars and arrays (the same
results, ~1000x slower: a debugger and coverage see every line). An intrinsic has no Python body,
so each one here is declared with ``with_python_twin`` and becomes its twin when the JIT is off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

F = TypeVar("F", bound=Callable[..., Any])
_njit: Any = njit

_config: Any = config  # numba.config's settings are set at import (untyped)
JIT_ENABLED: bool = not _config.DISABLE_JIT
"""False under ``NUMBA_DISABLE_JIT=1``: kernels are their Python functions."""


def kernel(fn: F) -> F:
    """Compile ``fn`` as a cached, runtime-free numba kernel (see module docstring)."""
    return cast(F, _njit(cache=True, _nrt=False)(fn))


def inlined(fn: F) -> F:
    """``kernel`` inlined into every caller at numba-IR level (see module docstring)."""
    return cast(F, _njit(cache=True, _nrt=False, inline="always")(fn))


def with_python_twin(twin: Callable[..., Any]) -> Callable[[Callable[..., Any]], Any]:
    """Decorate a numba intrinsic's typing function: the intrinsic when the JIT is on, else
    ``twin`` (a plain function with the same effect on results)."""

    def wrap(impl: Callable[..., Any]) -> Any:
        return intrinsic(impl) if JIT_ENABLED else twin

    return wrap


def _view_py(mem: Any, byte_offset: Any, n: Any, dtype: Any) -> Any:
    dt = np.dtype(dtype)
    start = int(byte_offset)
    return mem.view(np.uint8)[start : start + int(n) * dt.itemsize].view(dt)


@with_python_twin(_view_py)
def view_of(typingctx: Any, mem: Any, byte_offset: Any, n: Any, dtype: Any) -> Any:
    """``view_of(mem, byte_offset, n, dtype)``: ``n`` items of ``dtype`` at ``byte_offset`` into
    ``mem``'s data, as a C-contiguous 1-D array (no checks, no owner: the caller keeps ``mem``
    alive and the range inside it). Pure, so fields a kernel never reads cost nothing."""
    item = dtype.dtype if isinstance(dtype, types.DType) else dtype.instance_type
    arr = types.Array(item, 1, "C")
    sig = arr(mem, byte_offset, n, dtype)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        src = context.make_array(signature.args[0])(context, builder, args[0])
        out = context.make_array(arr)(context, builder)
        llty = context.get_data_type(item)
        size = context.get_abi_sizeof(llty)
        raw = builder.gep(builder.bitcast(src.data, cgutils.voidptr_t), [args[1]])
        intp = context.get_value_type(types.intp)
        context.populate_array(
            out,
            data=builder.bitcast(raw, llty.as_pointer()),
            shape=[args[2]],
            strides=[_ir.Constant(intp, size)],
            itemsize=_ir.Constant(intp, size),
            meminfo=None,  # no owner: the caller's ``mem`` keeps the memory alive
        )
        return out._getvalue()

    return sig, codegen


_cg: Any = cgutils
_ir: Any = _cg.ir
