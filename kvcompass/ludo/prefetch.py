"""A software-prefetch intrinsic for numba kernels (``llvm.prefetch``), read intent, keep in cache.

Owns: ``prefetch(array, index)`` — a hint that ``array[index]`` will be read soon; it never faults
and has no effect on results. Batched kernels issue it a few operations ahead so the cache misses
of consecutive operations overlap instead of queueing one after another. Must not: be used for
anything that affects results. With the JIT off it is a no-op Python function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from numba import types
from numba.core import cgutils

from kvcompass.ludo.jit import with_python_twin

_cg: Any = cgutils  # numba's codegen helpers are untyped
_ir: Any = _cg.ir


def _prefetch_py(arr: Any, idx: Any) -> None:
    """JIT off: a hint has nothing to do."""


@with_python_twin(_prefetch_py)
def _prefetch(typingctx: Any, arr: Any, idx: Any) -> Any:
    """``prefetch(arr, i)``: hint that ``arr[i]`` (1-D array, integer index) is read soon."""
    sig = types.void(arr, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = _cg.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        ptr = builder.bitcast(ptr, cgutils.voidptr_t)
        i32 = cgutils.int32_t
        fnty = _ir.FunctionType(_ir.VoidType(), [cgutils.voidptr_t, i32, i32, i32])
        fn = _cg.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # (address, rw = read, locality = 3 keep in all levels, cache type = data)
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


prefetch = cast(Callable[[Any, Any], None], _prefetch)
"""``prefetch(arr, i)`` (typed alias of the intrinsic; its no-op twin when the JIT is off)."""
