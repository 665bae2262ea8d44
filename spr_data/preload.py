"""What pyarrow loads on first use, loaded where no one waits for it."""

from __future__ import annotations

import threading

import pyarrow as pa

__all__ = ["pyarrow_first_use", "pyarrow_first_use_in_background"]


def pyarrow_first_use() -> None:
    """Do now what pyarrow does on its first conversion of Python or numpy values: import
    pandas, where it is installed, to check whether the values are pandas'.

    Why: measured at 0.2-0.4 s a process, paid otherwise by whichever step first builds an
    Arrow array in that process — in the main process of ``clean``, the alignment training
    (0.44 s of its 10-12 s at 1M pairs, while the workers idled).
    """
    pa.array([0])


def pyarrow_first_use_in_background() -> None:
    """:func:`pyarrow_first_use` in a thread of its own: for a process about to wait on its
    workers."""
    threading.Thread(target=pyarrow_first_use, name="spr-data-preload", daemon=True).start()
