"""A stop that arrives while the workers are starting is not lost. uvloop
drops a signal delivered after add_signal_handler() but before its loop
runs; a worker therefore keeps its stop signals blocked until its loop runs,
and reports ready from inside it."""
import signal
import time

from tests.e2e.test_process import one_route


def test_term_while_workers_start_stops_at_once(server):
    for attempt in range(5):
        srv = server(one_route("x", workers=2,
                               extra="shutdown_timeout: 20s\n        log: {{level: info}}"),
                     start=False)
        srv.start(wait=False)
        # TERM as soon as the first worker is forked: the master holds it
        # (its signals are blocked while it waits for the workers to say
        # ready) and passes it on the moment they have.
        deadline = time.monotonic() + 15
        while "started (pid" not in srv.log():
            assert time.monotonic() < deadline, srv.log()
            time.sleep(0.002)
        srv.kill(signal.SIGTERM)
        t = time.monotonic()
        assert srv.stop(timeout=25) == 0, srv.log()
        took = time.monotonic() - t
        assert took < 5, f"attempt {attempt}: the stop took {took:.1f} s (a worker missed TERM):\n{srv.log()}"
