"""Greedy generation from a decoder-only language model, compiled end to end.

`Generator` decodes a model of `build_language_model` with each block's
key/value cache: the prompt in one call of the blocks, then one token a
step inside one `keras.ops.while_loop`, the whole of it one compiled
function (`jax.jit`, `tf.function(jit_compile=True)`), as keras-hub's
`CausalLM.generate` is. On PyTorch Keras's `while_loop` is a Python loop
and the generation runs eagerly, as keras-hub's does there, or with
`jit_compile=True` each step one `torch.compile` graph. With end
tokens (keras-hub's `stop_token_ids`) each row stops at its first one and
the rest of its row is padding; the loop ends when every row has.
"""

import contextlib

import keras
import numpy as np
from keras import ops

from keras_attention import _validation
from keras_attention.layers import GatedDeltaCache
from keras_attention.layers import GatedDeltaNet
from keras_attention.layers import KeyValueCache
from keras_attention.layers import QuantizedCache
from keras_attention.layers import RollingCache
from keras_attention.layers import _in_place

#: The quantized entries `cache_dtype` may ask for.
CACHE_DTYPES = ("int8", "float8_e4m3fn")


def _model_parts(model):
    """`(embedding, blocks, final norm, logits)` of a language model."""
    names = [layer.name for layer in model.layers]
    blocks = [layer for layer in model.layers if layer.name.startswith("block")]
    needed = ("token_embedding", "final_norm", "logits")
    if not blocks or any(name not in names for name in needed):
        raise ValueError(
            "Expected a model of `build_language_model` (layers "
            "`token_embedding`, `block_0`..., `final_norm`, `logits`). "
            f"Received: a model with layers {names}"
        )
    return (
        model.get_layer("token_embedding"),
        blocks,
        model.get_layer("final_norm"),
        model.get_layer("logits"),
    )


class Generator:
    """Greedy generation from a model of `build_language_model`, with each
    block's cache, compiled end to end.

    `generate(prompt, max_new_tokens)` runs the prompt `(batch, P)`
    through the blocks in one call, each writing its keys and values into
    its cache from position 0, then one token a step, each step one call
    of the blocks at its position, inside one `keras.ops.while_loop`; the
    whole is one `jax.jit` or `tf.function(jit_compile=True)` function,
    traced once per `(batch, P, max_new_tokens)` (PyTorch: eager, without
    gradients, or each step compiled: `jit_compile`). The caches keep a
    fixed shape through the loop: keras-hub's
    tensor of `P + max_new_tokens` slots (`KeyValueCache`), a
    `QuantizedCache` of int8 or float8 entries with `cache_dtype`, and a
    `RollingCache` of its window for a local block (`sliding_window`).
    `generate_uncached` gives the same ids by running the whole model over
    the prefix at every step: the reference.

    With `stop_token_ids`, each row ends at the first of them it
    generates (kept), the positions after it hold `pad_token_id`, and the
    loop stops once every row has ended (on PyTorch, the steps not taken
    cost nothing; compiled, the loop's condition reads it).

    On PyTorch, the loop runs with one CPU thread (`torch_threads`): a
    step's tensors are small, and from about 32k elements (a cache of
    512 positions of 64 features) PyTorch splits each copy of the cache
    and its attention across its intra-op threads, whose start and join
    cost more than the work once the cores are shared: on 2 busy cores
    2000 tokens took 8.4x the time of 500 (22 s, 186 s), with one thread
    4.1x (7.0 s, 28.6 s). On idle cores PyTorch's threads are faster
    (4.1 s, 20.1 s: 4.9x; one thread 6.2 s, 22.9 s), and a model of
    width 256 generates 20% faster with them: set `torch_threads = None`
    to keep PyTorch's setting where the cores are yours.

    Args:
        model: A model of `build_language_model`, or one loaded from its
            `.keras` file.
        cache_dtype: The global blocks' cache entries: `None` (the
            default, the compute dtype), `"int8"` or `"float8_e4m3fn"`.
            Sliding-window blocks keep a `RollingCache` and Gated
            DeltaNet blocks a `GatedDeltaCache`, both in the compute
            dtype, whatever this says.
        jit_compile: Keras's `Model.compile` argument: `"auto"` (the
            default) compiles the generation on TensorFlow and JAX and
            runs it eagerly on PyTorch, as Keras's `"auto"` does there;
            `True` compiles it on PyTorch too: the prompt's call runs
            eagerly, then each step is one `torch.compile` graph (the
            blocks, their cache writes in place, the next id's logits),
            traced once per `(batch, P, max_new_tokens)`; `False` runs
            it eagerly on every backend. On PyTorch on a CPU the first
            call compiles C++ (20 to 40 s for a 4-layer Llama of width
            256 on 2 cores, again for each new shape), then a token
            costs a third (batch 1) to a half (batch 16) of an eager
            one's time (BENCHMARKS.md, "keras-hub models on our
            attention"): worth it for long or repeated generation. PyTorch
            compiles the step at most 8 times a process, then runs it
            eagerly: pad prompts to a few lengths (docs/hub.md).

    Example:

    >>> from keras_attention.models import language_model
    >>> model = language_model.build_language_model(
    ...     16, model_dim=8, num_layers=1, num_heads=2, feed_forward_dim=16
    ... )
    >>> generator = keras_attention.models.Generator(model)
    >>> [type(cache).__name__ for cache in generator.caches(1, 7)]
    ['KeyValueCache']
    >>> prompt = np.array([[3, 4, 5]])
    >>> generator.generate_uncached(prompt, 4).shape  # as generate(prompt, 4)
    (1, 7)
    """

    #: PyTorch's intra-op CPU threads while generating (`None`: as set).
    torch_threads = 1

    def __init__(self, model, cache_dtype=None, jit_compile="auto"):
        parts = _model_parts(model)
        self.model = model
        self.embedding, self.blocks, self.norm, self.logits = parts
        if cache_dtype is not None and cache_dtype not in CACHE_DTYPES:
            raise _validation.invalid(
                "cache_dtype", cache_dtype, "None, 'int8' or 'float8_e4m3fn'"
            )
        self.cache_dtype = cache_dtype
        if not (isinstance(jit_compile, bool) or jit_compile == "auto"):
            raise _validation.invalid(
                "jit_compile", jit_compile, "True, False or 'auto'"
            )
        self.jit_compile = jit_compile
        self._compiled = {}

    def caches(self, batch_size, max_length):
        """Each block's empty cache for `max_length` positions."""
        caches = []
        for block in self.blocks:
            attention = block.self_attention
            if isinstance(attention, GatedDeltaNet):
                cache = GatedDeltaCache.allocate(attention, batch_size)
            elif block.sliding_window is not None:
                cache = RollingCache.allocate(attention, batch_size)
            elif self.cache_dtype is not None:
                cache = QuantizedCache.allocate(
                    attention, batch_size, max_length, dtype=self.cache_dtype
                )
            else:
                cache = KeyValueCache.allocate(
                    attention, batch_size, max_length
                )
            caches.append(cache)
        return caches

    def step(self, ids, caches, index):
        """`(logits, caches)`: the float32 next-id logits `(batch,
        vocabulary)` after the last of `ids` `(batch, T)`, which are the
        positions from `index` on, and the caches with them written."""
        x = self.embedding(ids)
        written = []
        for block, cache in zip(self.blocks, caches, strict=True):
            x, cache = block(
                x, use_causal_mask=True, cache=cache, cache_update_index=index
            )
            written.append(cache)
        logits = self.logits(self.norm(x[:, -1:]))[:, 0]
        return ops.cast(logits, "float32"), written

    def generate_step(
        self,
        prompt,
        max_new_tokens,
        stop_token_ids=(),
        pad_token_id=0,
        loop_step=None,
    ):
        """The traced body: the prompt, then the loop, each step
        `loop_step` (`self.step` by default; compiled, on PyTorch with
        `jit_compile=True`). Returns the ids `(batch, P +
        max_new_tokens)`, each row `pad_token_id` after its first id of
        `stop_token_ids`."""
        loop_step = self.step if loop_step is None else loop_step
        batch, length = prompt.shape
        total = length + max_new_tokens
        prompt = ops.cast(prompt, "int32")
        logits, caches = self.step(prompt, self.caches(batch, total), 0)
        chosen = _greedy(logits)
        ended = _is_stop(chosen, stop_token_ids)
        rest = ops.full((batch, max_new_tokens - 1), pad_token_id, "int32")
        tokens = ops.concatenate([prompt, chosen, rest], axis=1)
        sizes = [len(cache.tensors) for cache in caches]

        def body(index, tokens, ended, *flat):
            current = ops.slice(tokens, [0, index], [batch, 1])
            logits, written = loop_step(
                current, _unflatten(caches, sizes, flat), index
            )
            chosen = ops.where(ended, pad_token_id, _greedy(logits))
            ended = ops.logical_or(ended, _is_stop(chosen, stop_token_ids))
            tokens = _in_place.slice_update(tokens, [0, index + 1], chosen)
            return (index + 1, tokens, ended, *_flatten(written))

        def cond(index, tokens, ended, *_):
            running = ops.logical_not(ops.all(ended))
            return ops.logical_and(index < total - 1, running)

        start = ops.convert_to_tensor(length, "int32")
        loop = ops.while_loop(
            cond, body, (start, tokens, ended, *_flatten(caches))
        )
        return loop[1]

    def generate(
        self, prompt, max_new_tokens, stop_token_ids=None, pad_token_id=0
    ):
        """Greedy ids `(batch, P + max_new_tokens)`, the prompt first.

        Args:
            prompt: Integer ids `(batch, P)`, every row of the same length
                `P >= 1`, each in `[0, vocabulary)`.
            max_new_tokens: How many ids to add to each row, at most.
            stop_token_ids: End ids (keras-hub's `stop_token_ids`): a row
                ends at the first of them it generates, which is kept.
                Defaults to `None`, none: every row runs to
                `max_new_tokens`.
            pad_token_id: The id after a row's end. Defaults to `0`.

        Returns:
            An `int32` NumPy array.
        """
        prompt = self._check_prompt(prompt)
        max_new_tokens = _validation.positive_int(
            "max_new_tokens", max_new_tokens
        )
        stop, pad = self._check_ids(stop_token_ids, pad_token_id)
        key = (prompt.shape, max_new_tokens, stop, pad)
        if key not in self._compiled:
            self._compiled[key] = self._compile(max_new_tokens, stop, pad)
        ids = self._compiled[key](prompt)
        return np.asarray(ops.convert_to_numpy(ids), dtype="int32")

    def _check_ids(self, stop_token_ids, pad_token_id):
        """`(stop ids as a tuple of ints, pad id)`, each in the
        vocabulary."""
        size = self.embedding.input_dim
        stop = () if stop_token_ids is None else stop_token_ids
        if isinstance(stop, (int, np.integer)):
            stop = (stop,)
        for name, ids in (
            ("stop_token_ids", stop),
            ("pad_token_id", (pad_token_id,)),
        ):
            values = np.asarray(list(ids))
            if values.size and (
                values.dtype.kind not in "iu"
                or values.min() < 0
                or values.max() >= size
            ):
                value = pad_token_id if name == "pad_token_id" else ids
                raise _validation.invalid(
                    name, value, f"ids of the vocabulary, in [0, {size})"
                )
        return tuple(int(i) for i in stop), int(pad_token_id)

    def _check_prompt(self, prompt):
        prompt = np.asarray(prompt)
        if prompt.ndim != 2 or prompt.shape[1] < 1:
            raise ValueError(
                "Expected `prompt` of shape `(batch_size, length)` with a "
                f"length of at least 1. Received: prompt.shape={prompt.shape}"
            )
        size = self.embedding.input_dim
        if prompt.dtype.kind not in "iu" or prompt.min() < 0:
            raise ValueError(
                f"Expected `prompt` of integer ids in [0, {size}). Received: "
                f"prompt.dtype={prompt.dtype}, min={prompt.min()}"
            )
        if prompt.max() >= size:
            raise ValueError(
                f"Expected `prompt` of ids in [0, {size}) (the vocabulary). "
                f"Received: an id {prompt.max()}"
            )
        return prompt.astype("int32")

    def _compile(self, max_new_tokens, stop_token_ids=(), pad_token_id=0):
        """`prompt -> ids`: one compiled function of the whole generation
        (TensorFlow, JAX), or the eager loop (PyTorch: each step compiled
        with `jit_compile=True`)."""
        backend = keras.backend.backend()
        compiled = self.jit_compile is True or (
            self.jit_compile == "auto" and backend != "torch"
        )
        loop_step = None
        if backend == "torch" and compiled:
            loop_step = _torch_compiled(self.step)

        def traced(prompt):
            return self.generate_step(
                prompt, max_new_tokens, stop_token_ids, pad_token_id, loop_step
            )

        if backend == "tensorflow" and compiled:
            import tensorflow as tf

            return tf.function(traced, jit_compile=True)
        if backend == "jax" and compiled:
            return self._jax_function(traced)
        if backend != "torch":
            return traced
        import torch

        def eager(prompt):
            # inference_mode, not no_grad: no autograd bookkeeping at all.
            # The loop owns its caches: each step writes them in place.
            with (
                torch.inference_mode(),
                _in_place.writing_in_place(),
                _torch_threads(self.torch_threads),
            ):
                return traced(ops.convert_to_tensor(prompt))

        return eager

    def _jax_function(self, traced):
        """`jax.jit` of `traced` with the model's variables as arguments
        (stateless), as keras-hub compiles its generation."""
        import jax

        variables = self.model.variables

        @jax.jit
        def compiled(values, prompt):
            mapping = list(zip(variables, values, strict=True))
            with keras.StatelessScope(state_mapping=mapping):
                return traced(prompt)

        def call(prompt):
            return compiled([v.value for v in variables], prompt)

        return call

    def generate_uncached(
        self, prompt, max_new_tokens, stop_token_ids=None, pad_token_id=0
    ):
        """The same greedy ids from the whole model at every step, without
        a cache: the reference of `generate` (same arguments).

        Each step runs the model over all `P + max_new_tokens` positions,
        the ones not yet generated holding 0: the causal mask hides them
        from the position read, and one shape serves every step.
        """
        prompt = self._check_prompt(prompt)
        max_new_tokens = _validation.positive_int(
            "max_new_tokens", max_new_tokens
        )
        stop, pad = self._check_ids(stop_token_ids, pad_token_id)
        batch, length = prompt.shape
        tokens = np.full((batch, length + max_new_tokens), pad, "int32")
        tokens[:, :length] = prompt
        ended = np.zeros(batch, bool)
        for position in range(length, length + max_new_tokens):
            if ended.all():
                break
            logits = self.model(tokens, training=False)[:, position - 1]
            logits = ops.convert_to_numpy(ops.cast(logits, "float32"))
            tokens[:, position] = np.where(ended, pad, logits.argmax(-1))
            ended |= np.isin(tokens[:, position], stop)
        return tokens


def _greedy(logits):
    """`(batch, 1)` int32: the id of each row's highest logit, the first
    of equal ones (a NaN counts as the highest), as `ops.argmax` gives
    it. XLA's argmax, one reduction of (value, index) pairs, took 35 us
    of a 750 us step over a vocabulary of 8192 (a 4-layer Llama of
    width 256 at batch 1, JAX, a 2-core AVX-512 EPYC); the row's maximum
    and the least index that holds it are two plain reductions: 5%
    faster steps at batch 1 and 16, the same ids."""
    top = ops.max(logits, axis=-1, keepdims=True)
    size = logits.shape[-1]
    held = ops.logical_or(ops.equal(logits, top), ops.isnan(logits))
    ids = ops.where(held, ops.arange(size, dtype="int32"), size)
    return ops.min(ids, axis=-1, keepdims=True)


def _is_stop(chosen, stop_token_ids):
    """`(batch, 1)` bool: whether each of `chosen` is an end id."""
    ended = ops.zeros(ops.shape(chosen), "bool")
    for stop in stop_token_ids:
        ended = ops.logical_or(ended, ops.equal(chosen, stop))
    return ended


@contextlib.contextmanager
def _torch_threads(count):
    """PyTorch's intra-op threads set to `count` within (`None`: kept)."""
    import torch

    saved = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _torch_compiled(step):
    """`step` (`Generator.step`) with its caches' tensors through one
    `torch.compile` graph. The index is a tensor (the loop's), so that
    one graph serves every step: an int would be one graph per value,
    and a symbolic one (`dynamic=True`) breaks the graph in Keras's
    `Layer.__call__`, which asks each argument for its mask."""
    import torch

    compiled = {}

    def call(ids, caches, index):
        sizes = [len(cache.tensors) for cache in caches]
        if not compiled:
            # The first step's caches are the kinds of every step's.
            def flat(ids, index, *tensors):
                rebuilt = _unflatten(caches, sizes, tensors)
                logits, written = step(ids, rebuilt, index)
                return (logits, *_flatten(written))

            compiled["step"] = torch.compile(flat)
        logits, *tensors = compiled["step"](ids, index, *_flatten(caches))
        return logits, _unflatten(caches, sizes, tensors)

    return call


def _flatten(caches):
    """The caches' tensors in one list (a loop's variables)."""
    return [tensor for cache in caches for tensor in cache.tensors]


def _unflatten(caches, sizes, tensors):
    """Caches of the kinds of `caches` holding `tensors` (`_flatten`'s)."""
    rebuilt, at = [], 0
    for cache, size in zip(caches, sizes, strict=True):
        rebuilt.append(cache.with_tensors(list(tensors[at : at + size])))
        at += size
    return rebuilt
