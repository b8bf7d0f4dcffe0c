"""Waits on the cluster that say what they waited for when they time out.

``distributed`` says only ``timed out after 600 s.``; the user needs to know which wait it
was, to look at the right worker or raise the right limit.
"""

from __future__ import annotations


def result(future, timeout: float, what: str):
    """``future.result(timeout)``; on timeout a ``TimeoutError`` naming ``what`` and the limit."""
    try:
        return future.result(timeout=timeout)
    except TimeoutError:
        raise TimeoutError(f"waited {timeout:g} s for {what}; it did not come (a worker stuck, gone "
                           "or overloaded? the dashboard's task stream shows it)") from None
