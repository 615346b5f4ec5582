"""A test server whose loop does not stop fails with every thread's stack, at once, instead of hanging."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.servers.stopping import stop_loop


def test_a_loop_that_does_not_stop_fails_with_the_stacks_of_its_threads():
    held, entered = threading.Event(), threading.Event()

    class Stuck(ThreadingHTTPServer):
        def process_request(self, request, client_address):  # the loop itself blocks here
            entered.set()
            held.wait(10)
            super().process_request(request, client_address)

    httpd = Stuck(("127.0.0.1", 0), BaseHTTPRequestHandler)
    loop = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="stuck-loop", daemon=True)
    loop.start()
    conn = socket.create_connection(httpd.server_address)
    try:
        assert entered.wait(30), "the loop never took the connection"  # stuck for sure before the stop is asked
        with pytest.raises(AssertionError) as failed:
            stop_loop(httpd, loop, "the stuck server", deadline_s=0.5)
        said = str(failed.value)
        assert "did not stop within 0.5 s" in said and "stuck-loop" in said and "held.wait(10)" in said
    finally:
        held.set()
        loop.join(15)
        conn.close()
        httpd.server_close()
    assert not loop.is_alive()
