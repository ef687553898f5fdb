"""tw.logging: TF1's functions and levels on the "tensorweave" logger, and when lines show."""

import logging
import subprocess
import sys
import textwrap

import tensorweave as tw


def test_levels_are_the_standard_ones():
    assert (tw.logging.DEBUG, tw.logging.INFO, tw.logging.WARN, tw.logging.ERROR, tw.logging.FATAL) == \
        (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)


def test_functions_log_to_the_tensorweave_logger_at_their_level(caplog):
    tw.logging.set_verbosity(tw.logging.DEBUG)
    assert tw.logging.get_verbosity() == logging.DEBUG
    with caplog.at_level(logging.DEBUG, logger="tensorweave"):
        tw.logging.debug("d %d", 1)
        tw.logging.info("i %s", "two")
        tw.logging.warn("w")
        tw.logging.warning("w2")
        tw.logging.error("e")
        tw.logging.fatal("f")
        tw.logging.log(tw.logging.INFO, "l %d", 3)
        tw.logging.vlog(15, "v")
        tw.logging.log_if(tw.logging.INFO, "shown", True)
        tw.logging.log_if(tw.logging.INFO, "hidden", False)
    got = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [("tensorweave", 10, "d 1"), ("tensorweave", 20, "i two"), ("tensorweave", 30, "w"),
                   ("tensorweave", 30, "w2"), ("tensorweave", 40, "e"), ("tensorweave", 50, "f"),
                   ("tensorweave", 20, "l 3"), ("tensorweave", 15, "v"), ("tensorweave", 20, "shown")]
    assert all(r.filename == "test_logging.py" for r in caplog.records)  # the caller, not tw.logging


def test_set_verbosity_filters(caplog):
    tw.logging.set_verbosity(tw.logging.ERROR)
    with caplog.at_level(logging.NOTSET):
        tw.logging.info("no")
        tw.logging.warning("no")
        tw.logging.error("yes")
    assert [r.getMessage() for r in caplog.records] == ["yes"]


def test_log_every_n_and_first_n_count_per_call_site(caplog):
    tw.logging.set_verbosity(tw.logging.INFO)
    with caplog.at_level(logging.INFO, logger="tensorweave"):
        for i in range(7):
            tw.logging.log_every_n(tw.logging.INFO, "every %d", 3, i)
            tw.logging.log_first_n(tw.logging.INFO, "first %d", 2, i)
        tw.logging.log_first_n(tw.logging.INFO, "another site %d", 2, 99)
    assert [r.getMessage() for r in caplog.records] == [
        "every 0", "first 0", "first 1", "every 3", "every 6", "another site 99"]


def _stderr_of(code):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_nothing_is_printed_unless_the_program_logs():
    assert _stderr_of("""
        import logging, tensorweave as tf
        logging.getLogger("tensorweave.plugins").warning("a library warning")
        with tf.Session() as s:
            s.run(tf.constant(1.0) + 1.0)
    """) == ""


def test_tf1_default_visibility_on_stderr():
    err = _stderr_of("""
        import tensorweave as tf
        tf.logging.info("not yet")            # TF1: INFO is hidden until set_verbosity(INFO)
        tf.logging.warning("careful %d", 1)
        tf.logging.set_verbosity(tf.logging.INFO)
        tf.logging.info("loss = %.2f", 0.5)
        tf.logging.debug("hidden")
    """)
    assert err.splitlines() == ["WARNING:tensorweave:careful 1", "INFO:tensorweave:loss = 0.50"]


def test_an_application_logging_config_wins_without_duplicates():
    err = _stderr_of("""
        import logging, tensorweave as tf
        tf.logging.set_verbosity(tf.logging.INFO)
        logging.basicConfig(format="app %(name)s %(message)s")
        tf.logging.info("once")
    """)
    assert err.splitlines() == ["app tensorweave once"]
