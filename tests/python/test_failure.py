"""A server process SIGKILLed under a live worker: waits fail within their timeout."""

import os
import signal
import subprocess
import time

import numpy as np
import pytest

import layerps

HB = dict(heartbeat_interval_ms=100, heartbeat_timeout_ms=1000, connect_timeout_ms=10000)


def test_killed_server_makes_wait_raise_within_its_timeout(tmp_path):
    request_timeout_s = 4.0
    sched = layerps.Scheduler("tcp://127.0.0.1:0", num_servers=1, num_workers=1, **HB,
                              request_timeout_ms=int(request_timeout_s * 1000))
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [layerps.tool_path("layerps-server"), f"--scheduler={sched.address}",
         "--heartbeat_interval_ms=100", "--heartbeat_timeout_ms=1000", "--connect_timeout_ms=10000"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        w = layerps.Worker(sched.address, **HB, request_timeout_ms=int(request_timeout_s * 1000))
        t = w.declare_dense("x", 1000)
        s = w.declare_sparse("e", 4)
        w.push(t, np.ones(1000, np.float32)).wait(timeout=5)
        np.testing.assert_array_equal(w.pull(t).wait(timeout=5), 1)

        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=5)
        t0 = time.monotonic()
        handles = [w.pull(t), w.push_sparse(s, [1, 2], np.ones((2, 4), np.float32))]
        for h in handles:
            with pytest.raises(layerps.LayerPSError) as e:
                h.wait(timeout=request_timeout_s + 2)
            elapsed = time.monotonic() - t0
            print(f"after SIGKILL: {type(e.value).__name__} after {elapsed:.2f} s: {e.value}")
            assert isinstance(e.value, (layerps.UnavailableError, layerps.TimeoutError))
            assert not isinstance(e.value, layerps.TimeoutError) or "still in flight" not in str(e.value), \
                "the request's own timeout must fire, not only the wait's"
            assert elapsed <= request_timeout_s + 1.0
        # New requests fail too (promptly, once the scheduler declared the server dead).
        t1 = time.monotonic()
        with pytest.raises((layerps.UnavailableError, layerps.TimeoutError)):
            w.pull(t).wait(timeout=request_timeout_s + 2)
        assert time.monotonic() - t1 <= request_timeout_s + 1.0
        w.stop()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()
        sched.stop()
