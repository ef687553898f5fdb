"""A 2-layer LSTM word-level language model on real English text, trained with truncated BPTT.

    python examples/lstm_lm.py                  # the whole corpus, 2 epochs (4-6 minutes on 2 cores)
    python examples/lstm_lm.py --epochs 6       # longer: lower perplexity
    python examples/lstm_lm.py --max-words 60000 --vocab-size 1000 --hidden 128 --num-steps 10 \\
        --epochs 3 --eval-every 100             # the slice the tests run (half a minute)

The model is the one of TensorFlow's PTB tutorial (``ptb_word_lm.py``, after Zaremba et al.
2014) written as a TF1 user writes it: words embedded with ``tw.nn.embedding_lookup``, two
``tw.nn.rnn_cell.BasicLSTMCell`` stacked by ``MultiRNNCell`` (each in a ``DropoutWrapper``
while training: ``--keep-prob``), unrolled by ``tw.nn.dynamic_rnn`` over ``--num-steps``
words, gradients clipped with ``tw.clip_by_global_norm`` (norm 5) and applied by plain SGD
whose learning rate (1.0) halves each epoch after the first two (a variable assigned between
epochs, as the tutorial does).

The corpus is the plain English text of Debian's ``fortunes`` package (``apt-get install
fortunes``; about 480,000 words with an ``<eos>`` after each line), read with
``fortunes_corpus.read_sentences``. Words outside the ``--vocab-size`` most frequent ones
(counted on the training part) become ``<unk>``. The last 5% of the text is held out.

Truncated BPTT as in the tutorial: the training text is cut into ``--batch-size`` rows read
side by side, ``--num-steps`` words at a time; the LSTM state at the end of one batch is
fetched and fed back as the initial state of the next (``Session.run`` feeds any tensor:
here the zero state's tensors), so the state runs across the whole epoch while gradients
stop at each batch's edge. The input placeholders are ``[None, None]`` (batch, time): one
graph without dropout evaluates the held-out text and samples words one at a time
(batch 1, one step), sharing the training graph's variables (``reuse=True``).

Softmax: with a large vocabulary (more than 5,000 words: the default 10,000) training uses
``tw.nn.sampled_softmax_loss`` with ``--num-sampled`` classes (256; log-uniform samples, as
the word ids are by falling frequency, Zipf's law) and evaluation the full softmax; with a
small vocabulary (the tests' 1,000 words) both use the full softmax. ``--softmax full`` or
``sampled`` overrides the choice. Perplexities are always full-softmax ones.

Printed: the training perplexity every ``--log-every`` steps, the held-out perplexity every
``--eval-every`` steps and after each epoch (beside the held-out unigram perplexity, the
baseline a model of word frequencies alone reaches), and at the end a few sentences sampled
word by word from the softmax (seeded by ``--seed``).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import numpy as np
from fortunes_corpus import CORPUS_DIR, corpus_files, read_sentences

import tensorweave as tw

EOS, UNK = "<eos>", "<unk>"
SAMPLED_ABOVE = 5000  # --softmax auto: sampled softmax for training above this many words


# ----------------------------------------------------------------------------------------
# data
def build_vocabulary(words: list[str], vocab_size: int) -> list[str]:
    """``<eos>`` and ``<unk>``, then the most frequent words: ids by falling frequency."""
    counts = collections.Counter(w for w in words if w != EOS)
    return [EOS, UNK] + [w for w, _ in counts.most_common(max(0, vocab_size - 2))]


def to_ids(words: list[str], vocab: list[str]) -> np.ndarray:
    index = {w: i for i, w in enumerate(vocab)}
    unk = index[UNK]
    return np.fromiter((index.get(w, unk) for w in words), dtype=np.int32, count=len(words))


def unigram_perplexity(train_ids: np.ndarray, test_ids: np.ndarray, vocab_size: int) -> float:
    """The held-out perplexity of the training text's word frequencies (add-one smoothed)."""
    counts = np.bincount(train_ids, minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(np.exp(-logp[test_ids].mean()))


def batches(ids: np.ndarray, batch_size: int, num_steps: int, last: bool = False):
    """The PTB reader: ``ids`` cut into ``batch_size`` rows read side by side, ``num_steps``
    at a time; yields (inputs, targets), each ``[batch_size, num_steps]``, targets one word on.
    ``last``: also the shorter window at the rows' end (the time dimension is ``None``)."""
    batch_len = len(ids) // batch_size
    rows = ids[:batch_size * batch_len].reshape(batch_size, batch_len)
    for s in range(0, batch_len - 1, num_steps):
        n = min(num_steps, batch_len - 1 - s)
        if n < num_steps and not last:
            return
        yield rows[:, s:s + n], rows[:, s + 1:s + n + 1]


# ----------------------------------------------------------------------------------------
# model
class LanguageModel:
    """The PTB tutorial's model; ``is_training`` adds dropout, the loss for training and the
    SGD step. Build the evaluation model in the same variable scope with ``reuse=True``."""

    def __init__(self, is_training: bool, vocab_size: int, hidden: int, num_layers: int, keep_prob: float,
                 num_sampled: int, max_grad_norm: float):
        self.inputs = tw.placeholder(tw.int32, [None, None], name="inputs")    # [batch, num_steps]
        self.targets = tw.placeholder(tw.int32, [None, None], name="targets")
        batch_size = tw.shape(self.inputs)[0]

        embedding = tw.get_variable("embedding", [vocab_size, hidden], dtype=tw.float32)
        inputs = tw.nn.embedding_lookup(embedding, self.inputs)
        if is_training and keep_prob < 1:
            inputs = tw.nn.dropout(inputs, keep_prob)

        def make_cell():
            # (the tutorial also passes reuse=not is_training; the enclosing variable scope's
            # reuse=True is enough, and tensorweave's cells reject reuse=True on a first call)
            cell = tw.nn.rnn_cell.BasicLSTMCell(hidden, forget_bias=0.0, state_is_tuple=True)
            if is_training and keep_prob < 1:
                cell = tw.nn.rnn_cell.DropoutWrapper(cell, output_keep_prob=keep_prob)
            return cell

        cell = tw.nn.rnn_cell.MultiRNNCell([make_cell() for _ in range(num_layers)], state_is_tuple=True)
        self.initial_state = cell.zero_state(batch_size, tw.float32)
        outputs, self.final_state = tw.nn.dynamic_rnn(cell, inputs, initial_state=self.initial_state)
        output = tw.reshape(outputs, [-1, hidden])                              # [batch * num_steps, hidden]

        # [vocab, hidden]: the layout tw.nn.sampled_softmax_loss takes
        softmax_w = tw.get_variable("softmax_w", [vocab_size, hidden], dtype=tw.float32)
        softmax_b = tw.get_variable("softmax_b", [vocab_size], dtype=tw.float32)
        labels = tw.reshape(self.targets, [-1])
        logits = tw.matmul(output, softmax_w, transpose_b=True) + softmax_b
        self.probabilities = tw.nn.softmax(logits)
        # mean cross entropy per word under the full softmax: log(perplexity)
        self.word_loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        if not is_training:
            return

        if num_sampled:
            per_word = tw.nn.sampled_softmax_loss(softmax_w, softmax_b, labels=tw.expand_dims(labels, 1),
                                                  inputs=output, num_sampled=num_sampled, num_classes=vocab_size)
            self.train_loss = tw.reduce_mean(per_word)
        else:
            self.train_loss = self.word_loss
        # the tutorial's cost: summed over the unrolled steps, averaged over the batch
        cost = self.train_loss * tw.cast(tw.shape(self.inputs)[1], tw.float32)
        self.lr = tw.Variable(0.0, trainable=False, name="learning_rate")
        tvars = tw.trainable_variables()
        grads, self.global_norm = tw.clip_by_global_norm(tw.gradients(cost, tvars), max_grad_norm)
        self.global_step = tw.train.get_or_create_global_step()
        self.train_op = tw.train.GradientDescentOptimizer(self.lr).apply_gradients(
            zip(grads, tvars), global_step=self.global_step)
        self.new_lr = tw.placeholder(tw.float32, [], name="new_learning_rate")
        self.lr_update = tw.assign(self.lr, self.new_lr)


def state_feed(model: LanguageModel, state) -> dict:
    """The feed that starts ``model`` from ``state`` (the fetched final state of a run)."""
    feed = {}
    for (c, h), (c_v, h_v) in zip(model.initial_state, state):
        feed[c], feed[h] = c_v, h_v
    return feed


def zero_state(num_layers: int, batch: int, hidden: int):
    zeros = np.zeros((batch, hidden), np.float32)
    return tuple((zeros, zeros) for _ in range(num_layers))


def perplexity(sess, model: LanguageModel, ids: np.ndarray, args) -> float:
    """Full-softmax perplexity of ``ids``, read as in training (rows, state carried)."""
    state = zero_state(args.num_layers, args.eval_batch_size, args.hidden)
    total, count = 0.0, 0
    for x, y in batches(ids, args.eval_batch_size, args.num_steps, last=True):
        loss, state = sess.run([model.word_loss, model.final_state],
                               {model.inputs: x, model.targets: y, **state_feed(model, state)})
        total += loss * y.size
        count += y.size
    return float(np.exp(total / count))


def sample_sentences(sess, model: LanguageModel, vocab: list[str], args, n: int, rng, max_len: int = 30):
    """``n`` sentences, each word drawn from the softmax given the words before it, starting
    after an ``<eos>``; ``<unk>`` is never drawn."""
    sentences = []
    for _ in range(n):
        state, word, words = zero_state(args.num_layers, 1, args.hidden), 0, []
        for _ in range(max_len):
            p, state = sess.run([model.probabilities, model.final_state],
                                {model.inputs: [[word]], **state_feed(model, state)})
            p = p[0].astype(np.float64)
            p[1] = 0.0  # <unk>
            if not words:
                p[0] = 0.0  # nor an empty sentence
            word = int(rng.choice(len(p), p=p / p.sum()))
            if word == 0:
                break
            words.append(vocab[word])
        sentences.append(" ".join(words))
    return sentences


# ----------------------------------------------------------------------------------------
def train(args) -> dict:
    t0 = time.perf_counter()
    words = [w for sentence in read_sentences(corpus_files(args.corpus), args.max_words)
             for w in [*sentence, EOS]]
    cut = int(len(words) * (1.0 - args.held_out))
    vocab = build_vocabulary(words[:cut], args.vocab_size)
    train_ids, test_ids = to_ids(words[:cut], vocab), to_ids(words[cut:], vocab)
    sampled = args.softmax == "sampled" or (args.softmax == "auto" and len(vocab) > SAMPLED_ABOVE)
    num_sampled = min(args.num_sampled, len(vocab) - 1) if sampled else 0
    unigram = unigram_perplexity(train_ids, test_ids, len(vocab))
    steps_per_epoch = (len(train_ids) // args.batch_size - 1) // args.num_steps
    total_steps = args.steps or args.epochs * steps_per_epoch
    print(f"corpus: {len(words)} words ({len(train_ids)} training, {len(test_ids)} held out), "
          f"vocabulary {len(vocab)}, {np.mean(test_ids == 1):.1%} of the held-out words <unk>; "
          f"read in {time.perf_counter() - t0:.1f}s", flush=True)
    loss_kind = f"sampled softmax ({num_sampled} samples)" if num_sampled else "full softmax"
    print(f"model: {args.num_layers} x LSTM({args.hidden}), {args.num_steps} steps x batch {args.batch_size}, "
          f"{loss_kind} for training; "
          f"{steps_per_epoch} steps per epoch, {total_steps} steps", flush=True)
    print(f"held-out unigram perplexity: {unigram:.1f}", flush=True)

    g = tw.Graph()
    with g.as_default():
        tw.set_random_seed(args.seed)
        initializer = tw.random_uniform_initializer(-args.init_scale, args.init_scale)
        dims = dict(vocab_size=len(vocab), hidden=args.hidden, num_layers=args.num_layers,
                    keep_prob=args.keep_prob, num_sampled=num_sampled, max_grad_norm=args.max_grad_norm)
        with tw.variable_scope("Model", reuse=None, initializer=initializer):
            m = LanguageModel(True, **dims)
        with tw.variable_scope("Model", reuse=True, initializer=initializer):
            mvalid = LanguageModel(False, **dims)
        init = tw.global_variables_initializer()

    history = []
    with tw.Session(graph=g) as sess:
        sess.run(init)
        step, epoch = 0, 0
        t_train = time.perf_counter()
        while step < total_steps:
            lr = args.lr * args.lr_decay ** max(0, epoch - args.decay_after + 1)
            sess.run(m.lr_update, {m.new_lr: lr})
            state = zero_state(args.num_layers, args.batch_size, args.hidden)
            costs, n, t_log = 0.0, 0, time.perf_counter()
            for x, y in batches(train_ids, args.batch_size, args.num_steps):
                if step >= total_steps:
                    break
                loss, state, _ = sess.run([m.word_loss if not num_sampled else m.train_loss, m.final_state,
                                           m.train_op], {m.inputs: x, m.targets: y, **state_feed(m, state)})
                step += 1
                costs += loss
                n += 1
                if step % args.log_every == 0:
                    what = "sampled-softmax loss" if num_sampled else "perplexity"
                    value = costs / n if num_sampled else np.exp(costs / n)
                    print(f"epoch {epoch + 1} step {step:5d}/{total_steps}  lr {lr:.3g}  training {what} "
                          f"{value:.2f}  ({n * args.batch_size * args.num_steps / (time.perf_counter() - t_log):.0f}"
                          f" words/s)", flush=True)
                    costs, n, t_log = 0.0, 0, time.perf_counter()
                if args.eval_every and step % args.eval_every == 0 and step < total_steps:
                    t_eval = time.perf_counter()
                    ppl = perplexity(sess, mvalid, test_ids, args)
                    history.append((step, ppl))
                    print(f"step {step:5d}: held-out perplexity {ppl:.1f}  (unigram {unigram:.1f})", flush=True)
                    t_log += time.perf_counter() - t_eval  # the words/s of training alone
            epoch += 1
            ppl = perplexity(sess, mvalid, test_ids, args)
            history.append((step, ppl))
            done = "done" if step % steps_per_epoch == 0 else "stopped"
            print(f"epoch {epoch} {done}, step {step}: held-out perplexity {ppl:.1f}  (unigram {unigram:.1f}); "
                  f"{time.perf_counter() - t_train:.0f}s so far", flush=True)
        samples = sample_sentences(sess, mvalid, vocab, args, args.samples, np.random.default_rng(args.seed))
    print(f"final held-out perplexity {history[-1][1]:.1f}, unigram perplexity {unigram:.1f} "
          f"(ratio {history[-1][1] / unigram:.2f}) after {step} steps")
    print("sampled sentences:")
    for s in samples:
        print(f"  > {s}")
    print(f"done in {time.perf_counter() - t0:.1f}s", flush=True)
    return dict(history=history, unigram=unigram, samples=samples)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=CORPUS_DIR)
    ap.add_argument("--max-words", type=int, default=None, help="read only about the first N words")
    ap.add_argument("--held-out", type=float, default=0.05, help="the fraction of the text held out (its end)")
    ap.add_argument("--vocab-size", type=int, default=10_000)
    ap.add_argument("--hidden", type=int, default=200)
    ap.add_argument("--num-layers", type=int, default=2)
    ap.add_argument("--num-steps", type=int, default=35, help="words unrolled per batch (truncated BPTT)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--eval-batch-size", type=int, default=32)
    ap.add_argument("--softmax", choices=["auto", "full", "sampled"], default="auto",
                    help=f"the training loss; auto: sampled softmax above {SAMPLED_ABOVE} words, else full")
    ap.add_argument("--num-sampled", type=int, default=256, help="classes sampled per batch by the sampled softmax")
    ap.add_argument("--keep-prob", type=float, default=0.9, help="dropout keep probability while training")
    ap.add_argument("--lr", type=float, default=1.0, help="SGD's initial learning rate")
    ap.add_argument("--lr-decay", type=float, default=0.5)
    ap.add_argument("--decay-after", type=int, default=2,
                    help="epochs at the initial learning rate; then it halves (--lr-decay) each epoch")
    ap.add_argument("--max-grad-norm", type=float, default=5.0)
    ap.add_argument("--init-scale", type=float, default=0.1)
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--epochs", type=int, default=2)
    group.add_argument("--steps", type=int, default=None, help="train this many steps instead of --epochs")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=200, help="also evaluate every N steps (0: only after each epoch)")
    ap.add_argument("--samples", type=int, default=5, help="sentences sampled at the end")
    ap.add_argument("--seed", type=int, default=0)
    train(ap.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
