"""``tw.contrib.rnn``: a placeholder. Recurrent cells (``BasicLSTMCell``, ``static_rnn``,
...) come with the sequence-models issue (issue 12); until then every name here raises an
``AttributeError`` that says so."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.contrib.rnn.{name} is not provided by tensorweave yet (issue 12)")
