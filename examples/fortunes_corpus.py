"""The English corpus of the examples: the plain text of Debian's ``fortunes`` package
(``apt-get install fortunes``: quotations, jokes, literature; about 460,000 words),
read through tensorweave's own input pipeline (``tw.data.TextLineDataset``).

Used by ``word2vec.py`` (a stream of words) and ``lstm_lm.py`` (words with an end-of-line
marker)."""

from __future__ import annotations

import os
import re

import tensorweave as tw

CORPUS_DIR = "/usr/share/games/fortunes"
TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?")


def corpus_files(directory: str = CORPUS_DIR) -> list[str]:
    """The fortune files: every plain file of the directory without an extension (the
    ``.dat`` files are indexes, the ``.u8`` files links to the same text)."""
    if not os.path.isdir(directory):
        raise SystemExit(f"no corpus at {directory}: install Debian's 'fortunes' package "
                         "(apt-get install fortunes)")
    return sorted(os.path.join(directory, f) for f in os.listdir(directory)
                  if "." not in f and os.path.isfile(os.path.join(directory, f)))


def iter_lines(files: list[str], batch: int = 4096):
    """The corpus's lines in order, lower-case, without the ``%`` lines that separate two
    fortunes; read ``batch`` lines at a time with ``tw.data.TextLineDataset``."""
    g = tw.Graph()
    with g.as_default():
        lines = tw.data.TextLineDataset(files).batch(batch).make_one_shot_iterator().get_next()
    with tw.Session(graph=g) as sess:
        while True:
            try:
                chunk = sess.run(lines)
            except tw.errors.OutOfRangeError:
                return
            for line in chunk:
                text = line.decode("utf-8", "replace").lower()
                if text.strip() == "%":  # the separator between two fortunes
                    continue
                yield text


def read_words(files: list[str], max_words: int | None = None) -> list[str]:
    """The corpus as lower-case words (at least the first ``max_words``, then cut there)."""
    words: list[str] = []
    for text in iter_lines(files):
        if max_words is not None and len(words) >= max_words:
            break
        words.extend(TOKEN.findall(text))
    return words if max_words is None else words[:max_words]


def read_sentences(files: list[str], max_words: int | None = None) -> list[list[str]]:
    """The corpus's non-empty lines as lists of lower-case words, up to about ``max_words``
    words in all (whole lines)."""
    sentences: list[list[str]] = []
    count = 0
    for text in iter_lines(files):
        if max_words is not None and count >= max_words:
            break
        words = TOKEN.findall(text)
        if words:
            sentences.append(words)
            count += len(words)
    return sentences
