"""The numba compile options of the maintenance-side kernels (``cuckoo``, ``othello``, ``ops``).

Owns: ``kernel``/``inlined``, the decorators those modules use instead of a bare ``@njit``, and
``view_of`` (an unchecked typed view into the one state buffer). Must not: be used for code that
allocates arrays (it compiles without numba's reference-counting runtime).

``kernel`` = ``njit(cache=True, _nrt=False)``. ``_nrt`` is numba's private switch for the
reference-counting runtime; these kernels only index preallocated arrays, and without it every
non-inlined call increfs and decrefs each array argument (~60 atomic calls per ``apply_ops``
entry, which also serialise the cache misses this code is bound by). Measured: inserts 25-40%
faster. If a numba release drops the switch, replace the body by ``njit(cache=True)(fn)``; only
speed is lost.

``inlined`` adds ``inline="always"`` (numba inlines at IR level, before typing): the operation
loop and every helper it calls become one function, so no arrays are passed between them, and the
public entry ``ops.update_batch(mem, ...)`` takes one array. The cost is compile time (about a
minute for the first call of a fresh cache).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

F = TypeVar("F", bound=Callable[..., Any])
_njit: Any = njit


def kernel(fn: F) -> F:
    """Compile ``fn`` as a cached, runtime-free numba kernel (see module docstring)."""
    return cast(F, _njit(cache=True, _nrt=False)(fn))


def inlined(fn: F) -> F:
    """``kernel`` inlined into every caller at numba-IR level (see module docstring)."""
    return cast(F, _njit(cache=True, _nrt=False, inline="always")(fn))


def _view_impl(typingctx: Any, mem: Any, byte_offset: Any, n: Any, dtype: Any) -> Any:
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
view_of: Any = intrinsic(_view_impl)
"""``view_of(mem, byte_offset, n, dtype)``: ``n`` items of ``dtype`` at ``byte_offset`` into
``mem``'s data, as a C-contiguous 1-D array (njit only; no checks, no owner: the caller keeps
``mem`` alive and the range inside it). Pure, so fields a kernel never reads cost nothing."""
