"""The layouts the tests cover, from NumPy's side and as Rust-side (shape, strides, offset)."""

import numpy as np

# name -> function from a 24-element base array to a NumPy array of that layout.
NUMPY_LAYOUTS = {
    "C": lambda b: b.reshape(2, 3, 4),
    "F": lambda b: np.asfortranarray(b.reshape(2, 3, 4)),
    "steps": lambda b: b.reshape(4, 6)[::2, ::3],
    "negative": lambda b: b.reshape(4, 6)[::-1, ::-2],
    "broadcast": lambda b: np.broadcast_to(b[:3], (4, 3)),
    "0-d": lambda b: b.reshape(2, 12)[1, 5, ...],
    "size-0": lambda b: b[:0].reshape(0, 3),
    "read-only": lambda b: _read_only(b.reshape(6, 4)),
}

# name -> (shape, strides in elements or None for row-major, offset of the first element in
# elements, read_only), over a 24-element buffer.
RUST_LAYOUTS = {
    "C": ((2, 3, 4), None, 0, False),
    "F": ((2, 3, 4), (1, 2, 6), 0, False),
    "steps": ((3, 2), (8, 3), 1, False),
    "negative": ((4, 3), (-3, -1), 11, False),
    "broadcast": ((4, 3), (0, 1), 2, False),
    "0-d": ((), (), 5, False),
    "size-0": ((0, 3), None, 0, False),
    "read-only": ((6, 4), None, 0, True),
}


def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def expected_view(base, shape, strides, offset):
    """The NumPy view of `base` that a Rust layout describes."""
    if strides is None:
        strides = []
        step = 1
        for d in reversed(shape):
            strides.insert(0, step)
            step *= max(d, 1)
    item = base.itemsize
    start = base[offset:] if len(base) else base
    return np.lib.stride_tricks.as_strided(
        start, shape=shape, strides=[s * item for s in strides], writeable=False
    )


def element_strides(a):
    """A NumPy array's strides in elements."""
    return [s // a.itemsize for s in a.strides]
