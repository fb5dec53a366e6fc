"""Generation compiled end to end: the cached loop against the full model.

Two paths that must agree: `Generator.generate` (the prompt in one call,
then one token a step with each block's cache, one `ops.while_loop` under
`jax.jit` / `tf.function(jit_compile=True)`; eager on PyTorch) and
`generate_uncached` (the whole model over the prefix at every step). The
model has a local block (a `RollingCache` of its window, passed four
times over) under a global one (keras-hub's cache tensor, or int8 entries).
In the PyTorch lane too (`TORCH_LANE`): it needs no TensorFlow.
"""

import keras
import numpy as np
import pytest

from keras_attention.models import Generator
from keras_attention.models import build_language_model

VOCABULARY = 24
WINDOW = 2
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def model():
    # Seeded: the assertion on the continuation's ids below holds for
    # these weights, drawn the same whatever ran before in the worker.
    keras.utils.set_random_seed(7)
    model = build_language_model(
        VOCABULARY,
        model_dim=8,
        num_layers=2,
        num_heads=2,
        feed_forward_dim=16,
        dropout=0.0,
        sliding_window=WINDOW,
        global_every=2,
    )
    # Larger embeddings than Keras's initial ones, so that greedy choices
    # vary from step to step and a wrong cache shows.
    rng = np.random.default_rng(3)
    table = model.get_layer("token_embedding")
    table.set_weights([rng.normal(size=(VOCABULARY, 8)).astype("float32")])
    return model


PROMPT = np.array([[3, 9, 14], [20, 5, 7]], "int32")


@pytest.mark.parametrize("cache_dtype", [None, "int8"])
def test_compiled_cached_generation_equals_uncached_greedy(model, cache_dtype):
    local, global_ = (block.sliding_window for block in model.layers[2:4])
    assert (local, global_) == (WINDOW, None)
    generator = Generator(model, cache_dtype=cache_dtype)
    cached = generator.generate(PROMPT, NEW_TOKENS)
    uncached = generator.generate_uncached(PROMPT, NEW_TOKENS)
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_array_equal(cached[:, :3], PROMPT)
    # The continuation is not one id repeated: a wrong cache would show.
    assert len(np.unique(cached[:, 3:])) >= 4
    # A second call reuses the compiled function.
    np.testing.assert_array_equal(
        generator.generate(PROMPT, NEW_TOKENS), cached
    )
    assert len(generator._compiled) == 1


@pytest.mark.parametrize("jit_compile", [True, False])
def test_compiled_and_eager_generation_give_the_same_ids(
    model, jit_compile, monkeypatch
):
    """On PyTorch `jit_compile=True` runs each step as one `torch.compile`
    graph; `False` is eager on every backend. Both give the uncached
    greedy ids, a rolling and a full cache."""
    graphs = []
    if keras.backend.backend() == "torch":
        import torch

        # The graphs Dynamo captures, run as captured: inductor's C++
        # (44 s for this model on 2 cores) is the benchmark's to check
        # (benchmarks/hub_generation.py --jit-compile).
        def backend(graph, example_inputs):
            graphs.append(graph)
            return graph.forward

        compile_ = torch.compile
        monkeypatch.setattr(
            torch, "compile", lambda f, **o: compile_(f, backend=backend, **o)
        )
    generator = Generator(model, jit_compile=jit_compile)
    ids = generator.generate(PROMPT, NEW_TOKENS)
    np.testing.assert_array_equal(
        ids, generator.generate_uncached(PROMPT, NEW_TOKENS)
    )
    # One graph for every step: no graph break in Keras's `Layer.__call__`
    # or ours, and no step traced again (the index is a tensor).
    on_torch = keras.backend.backend() == "torch"
    assert len(graphs) == (1 if jit_compile and on_torch else 0)


def test_jit_compile_is_true_false_or_auto(model):
    with pytest.raises(ValueError, match="Received: jit_compile='yes'"):
        Generator(model, jit_compile="yes")
    assert Generator(model).jit_compile == "auto"


def test_the_caches_keep_a_fixed_shape_and_the_local_one_its_window(model):
    caches = Generator(model, cache_dtype="int8").caches(2, 11)
    assert type(caches[0]).__name__ == "RollingCache"
    assert tuple(caches[0].window.shape) == (2, 2, WINDOW, 2, 4)
    assert type(caches[1]).__name__ == "QuantizedCache"
    assert tuple(caches[1].values.shape) == (2, 2, 11, 2, 4)
    assert type(Generator(model).caches(2, 11)[1]).__name__ == "KeyValueCache"


def test_bad_arguments_are_named(model):
    generator = Generator(model)
    with pytest.raises(ValueError, match="cache_dtype"):
        Generator(model, cache_dtype="int4")
    with pytest.raises(ValueError, match=r"prompt.shape=\(3,\)"):
        generator.generate(np.array([1, 2, 3]), 2)
    with pytest.raises(ValueError, match=r"\[0, 24\).*an id 24"):
        generator.generate(np.array([[1, 24]]), 2)
    with pytest.raises(ValueError, match="prompt.dtype=float"):
        generator.generate(np.array([[1.0, 2.0]]), 2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generator.generate(PROMPT, 0)
    with pytest.raises(ValueError, match="build_language_model"):
        Generator(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]))


def _first_end(ids, stop):
    """Each row's position of its first id of `stop` after the prompt, or
    the last position where it has none."""
    found = [np.flatnonzero(np.isin(row[3:], stop)) for row in ids]
    return [int(f[0]) + 3 if f.size else ids.shape[1] - 1 for f in found]


def _stop(free):
    """An end id that row 0 generates before row 1 does (if ever): the
    rows end at different steps, the first one padded while the other
    runs on."""
    for position in range(3, free.shape[1] - 2):
        stop = [int(free[0, position])]
        ends = _first_end(free, stop)
        if ends[0] < ends[1]:
            return stop, ends
    raise AssertionError(f"no end id that ends the rows apart: {free}")


def test_each_row_stops_at_its_own_end_token_and_pads_the_rest(model):
    generator = Generator(model)
    free = generator.generate(PROMPT, NEW_TOKENS)
    stop, ends = _stop(free)
    ids = generator.generate(PROMPT, NEW_TOKENS, stop_token_ids=stop)
    for b, end in enumerate(ends):
        np.testing.assert_array_equal(ids[b, : end + 1], free[b, : end + 1])
        assert (ids[b, end + 1 :] == 0).all(), ids[b]
    uncached = generator.generate_uncached(PROMPT, NEW_TOKENS, stop)
    np.testing.assert_array_equal(ids, uncached)
    padded = generator.generate(PROMPT, NEW_TOKENS, stop, pad_token_id=23)
    assert (padded[0, ends[0] + 1 :] == 23).all()


def test_greedy_takes_the_first_highest_logit_and_a_nan_as_argmax_does(
    model, monkeypatch
):
    """Ties go to the lowest id and a NaN counts as the highest, as NumPy's
    argmax (and `generate_uncached`) picks them."""
    row = np.zeros(VOCABULARY, "float32")
    row[[5, 9]] = 1.0
    with_nan = row.copy()
    with_nan[[11, 13]] = np.nan
    logits = np.stack([row, with_nan])
    generator = Generator(model)
    step = generator.step

    def step_of_these_logits(ids, caches, index):
        _, written = step(ids, caches, index)
        return keras.ops.convert_to_tensor(logits), written

    monkeypatch.setattr(generator, "step", step_of_these_logits)
    ids = generator.generate(PROMPT, 3)[:, PROMPT.shape[1] :]
    want = np.argmax(logits, axis=-1)
    np.testing.assert_array_equal(want, [5, 11])
    np.testing.assert_array_equal(ids, np.repeat(want[:, None], 3, axis=1))


@pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="counts the eager loop's steps: compiled, a step is traced once",
)
def test_the_loop_stops_when_every_row_has_ended(model, monkeypatch):
    generator = Generator(model)
    free = generator.generate(PROMPT, NEW_TOKENS)
    # Each row ends at position 5 at the latest, 3 of its 8 new ids.
    stop = [int(free[0, 5]), int(free[1, 5])]
    last = max(_first_end(free, stop))
    steps = []
    step = generator.step
    monkeypatch.setattr(
        generator, "step", lambda *a: steps.append(1) or step(*a)
    )
    generator.generate(PROMPT, NEW_TOKENS, stop_token_ids=stop)
    # The prompt's call, then one a step up to the last row's end.
    assert len(steps) == 1 + last - PROMPT.shape[1]
    assert len(steps) < NEW_TOKENS


@pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="PyTorch's CPU threads"
)
def test_the_eager_loop_runs_on_one_thread_and_restores_it(model):
    """The cost of PyTorch's intra-op threads grew with the cache (2000
    tokens 8.4x the time of 500 on 2 cores; one thread: 4.1x): each
    step's calls run on one thread, and the setting comes back after."""
    import torch

    generator = Generator(model)
    threads = []
    step = generator.step
    generator.step = lambda *a: (
        threads.append(torch.get_num_threads()) or (step(*a))
    )
    # Two threads before, so that one thread while generating is seen
    # whatever the machine's cores.
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    before = torch.get_num_threads()
    generator.generate(PROMPT, 3)
    assert threads == [1, 1, 1]
    assert torch.get_num_threads() == before
    generator.torch_threads = None
    generator._compiled.clear()
    threads.clear()
    generator.generate(PROMPT, 2)
    torch.set_num_threads(saved)
    assert threads == [before, before]


def test_bad_end_and_pad_ids_are_named(model):
    generator = Generator(model)
    with pytest.raises(ValueError, match=r"Received: stop_token_ids=\[24\]"):
        generator.generate(PROMPT, 2, stop_token_ids=[24])
    with pytest.raises(ValueError, match="Received: pad_token_id=-1"):
        generator.generate(PROMPT, 2, pad_token_id=-1)
