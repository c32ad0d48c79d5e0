"""readable waits on any descriptor number: a bots process running many steps at once may hold
descriptors past 1024, where select.select raises (it did, in a long run of generated recipes)."""

from __future__ import annotations

import os
import resource

import pytest

from engine_adapter.sandbox.readable import readable

HIGH = 1500


@pytest.fixture
def high_pipe():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= HIGH + 1:
        pytest.skip(f"the descriptor limit ({hard}) is below {HIGH + 1}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH + 1), hard))
    r, w = os.pipe()
    high_r = os.dup2(r, HIGH)
    os.close(r)
    try:
        yield high_r, w
    finally:
        os.close(high_r)
        os.close(w)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_descriptor_past_1024_is_waited_on(high_pipe):
    r, w = high_pipe
    assert not readable(r, 0.01)
    os.write(w, b"x")
    assert readable(r, 0.01)


def test_a_wait_shorter_than_a_millisecond_still_waits_for_what_is_there(high_pipe):
    r, w = high_pipe
    os.write(w, b"x")
    assert readable(r, 0.0001)
