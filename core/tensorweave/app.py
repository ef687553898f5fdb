"""``tw.app``: TF1's program entry point, ``tw.app.run(main=None, argv=None)``, and
``tw.app.flags`` (the same module as ``tw.flags``).

``run`` parses the command line into ``tw.flags.FLAGS``, calls ``main(argv)`` with what is
left (``argv[0]`` first), and exits with ``main``'s return value, as TF1's ``tf.app.run``
does. As in TF1, flags no ``DEFINE_*`` defined are not an error here: they stay in the
``argv`` handed to ``main``, so programs that parse part of the command line themselves
(``argparse``'s ``parse_known_args``, then ``tf.app.run(argv=[sys.argv[0]] + unparsed)``)
keep working. A bad value for a defined flag (or a missing required one) prints
``FATAL Flags parsing error: ...`` to stderr and exits with status 1; ``--help`` prints the
flags and exits.
"""

from __future__ import annotations

import sys

from tensorweave import flags

__all__ = ["run", "flags"]


def run(main=None, argv=None):
    """Parse flags from ``argv`` (default ``sys.argv``), then ``sys.exit(main(rest))``.

    ``main`` defaults to the ``main`` function of the ``__main__`` module.
    """
    if main is None:
        main = getattr(sys.modules.get("__main__"), "main", None)
        if main is None:
            raise ValueError("tw.app.run: no main function given and the __main__ module has no 'main'")
    if not callable(main):
        raise TypeError(f"tw.app.run: main must be callable, got {main!r}")
    args = list(sys.argv if argv is None else argv)
    if not args:
        args = [sys.argv[0] if sys.argv else "program"]
    try:
        rest = flags.FLAGS(args, known_only=True)
    except flags.Error as e:
        sys.stderr.write(f"FATAL Flags parsing error: {e}\nPass --help to see help on flags.\n")
        sys.exit(1)
    sys.exit(main(rest))
