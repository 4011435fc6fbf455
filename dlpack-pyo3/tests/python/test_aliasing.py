"""Python code can write the memory a Rust import reads (the import shares it, and Python keeps
the array): no such write can put an invalid value under a Rust reference. A `bool` import is
read through a checked copy, so a byte Python sets to 2 is an error, never a `bool` holding 2."""

import numpy as np
import pytest


def test_a_bool_that_python_sets_to_2_is_refused_when_rust_reads_it(m):
    arr = np.zeros(4, dtype=bool)
    arr[1] = True
    assert m.import_values(arr) == [False, True, False, False]
    arr.view(np.uint8)[0] = 2
    with pytest.raises(BufferError, match="element 0 holds byte 0x02, not a valid bool"):
        m.import_values(arr)
    # The memory is still shared: the import reads what Python wrote.
    arr.view(np.uint8)[0] = 1
    assert m.import_values(arr) == [True, True, False, False]
