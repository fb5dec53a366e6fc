"""Bad input never reaches the backend: a sweep of every public entry point.

Every public callable of the package's modules (`keras_attention`, `ops`,
`scores`, `layers`, `seq2seq`, `text`, `saving`, the data readers) has one
row in `ROWS`; a public name without a row fails
`test_every_public_name_has_a_row`, which names it. A row says how to
call the entry point on good inputs; hypothesis then feeds it:

- argument sweep: each argument that is not a tensor (every constructor
  argument of a class) replaced by a value of a wrong type or range
  (`BAD_VALUES`);
- tensor sweep: each tensor input with a wrong rank, a batch, time or
  feature size that does not match, an int / bool / float64 / string
  dtype, a zero batch or length, a NaN or an inf, and token ids out of
  range.

Each case must end in a `ValueError` or `TypeError` whose message names
the argument or the value received (`Received:`, as Keras words it), or
in a result: outputs whose shapes are those of the good call's outputs
with the mutated sizes, finite unless an input was NaN or inf (NaN and
inf propagate; docs/errors.md, "Results, not errors"). A backend error,
any other exception or a non-finite output from finite inputs fails.

Adding a row for a new public name: one entry in `ROWS`, keyed by its
dotted name, e.g. `"ops.flex_attention": fn(lambda query, key, value:
ka.ops.flex_attention(query, key, value), query=(2, 3, 2, 4), ...)`.
"""

import dataclasses
import inspect
import types
from collections.abc import Callable

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import keras_attention as ka
from keras_attention import seq2seq
from tests.profiles import examples

BACKEND = keras.backend.backend()
# Cases per entry point and sweep: JAX and PyTorch run each op eagerly at
# several times TensorFlow's cost, so their lanes draw half as many (the
# same first half: the ci profile is derandomized).
CASES = 6 if BACKEND == "tensorflow" else 3
MODULES = {
    "": ka,
    "ops": ka.ops,
    "scores": ka.scores,
    "layers": ka.layers,
    "seq2seq": seq2seq,
    "text": ka.text,
    "saving": ka.saving,
}


class _Opaque:
    def __repr__(self):
        return "<opaque object>"


#: Values of a wrong type or range for an argument.
BAD_VALUES = (
    "nope",
    -1,
    0,
    2.5,
    float("nan"),
    float("inf"),
    True,
    None,
    [1, 2],
    {"a": 1},
    _Opaque(),
)
#: Arguments the sweep leaves alone: Keras's own (`name`, `dtype`, ...).
KERAS_ARGUMENTS = {"name", "dtype", "trainable", "kwargs", "args", "self"}


@dataclasses.dataclass
class Row:
    """How to call one entry point on good inputs.

    A function is called as `function(**args, **arrays)`; a class is
    constructed as `Class(**init)` and, when `call` is given, called as
    `call(obj, **arrays)`. `args` and `init` may be functions that return
    the dict (fresh sublayers for each case). `tensors` maps each tensor
    input to its shape; `("ids", shape, vocabulary)` is integer token ids
    below `vocabulary`. `exempt` gives the reason a name is not swept
    here (a result type, or inputs that are files, covered where named).
    """

    call: Callable | None = None
    tensors: dict = dataclasses.field(default_factory=dict)
    init: dict | Callable | None = None
    args: dict | Callable = dataclasses.field(default_factory=dict)
    exempt: str | None = None
    documented: tuple = ()
    nan_on_empty: bool = False

    def good(self, field):
        value = getattr(self, field)
        return dict(value() if callable(value) else value)


def fn(function, args=None, nan_on_empty=False, **tensors):
    """A row for a function: `function(**args, **tensors)`.

    `nan_on_empty`: a mean over the batch, NaN for an empty batch (as
    `keras.ops.mean`; docs/errors.md, "Results, not errors").
    """
    del function  # The row is keyed by the function's public name.
    return Row(args=args or {}, tensors=tensors, nan_on_empty=nan_on_empty)


def cls(init, call=None, documented=(), **tensors):
    """A row for a class: `obj = Class(**init)`, then `call(obj, **t)`.

    `documented`: fragments of errors docs/errors.md documents as Keras's
    own (which name neither argument nor value).
    """
    return Row(call=call, tensors=tensors, init=init, documented=documented)


def exempt(reason):
    return Row(exempt=reason)


def _cell():
    return seq2seq.AttentionDecoderCell(
        keras.layers.GRUCell(4), seq2seq.BahdanauAttention(4)
    )


def _decode(function, **extra):
    def args():
        return {
            "cell": _cell(),
            "embedding": keras.layers.Embedding(6, 3),
            "output_layer": keras.layers.Dense(6),
            "start_token": 1,
            "end_token": 2,
            "max_length": 3,
            **extra,
        }

    return fn(function, args, memory=(2, 5, 4))


QVK = {"query": (2, 3, 4), "value": (2, 5, 4)}
FILES = "its inputs are files and folders: tests/data/ and docs/errors.md"
RESULT = "a result type (a NamedTuple or dataclass) of other entry points"

ROWS = {
    # keras_attention (layers re-exported; ka.layers.X is the same object)
    "Attention": cls({}, lambda o, query, value: o(query, value), **QVK),
    "HardAttention": cls({}, lambda o, query, value: o(query, value), **QVK),
    "MultiHeadAttention": cls(
        {"num_heads": 2, "key_dim": 2},
        lambda o, query, value: o(query, value),
        documented=("Flash attention is not supported",),
        **QVK,
    ),
    "SelfAttention": cls(
        {"num_heads": 2}, lambda o, inputs: o(inputs), inputs=(2, 5, 4)
    ),
    "StructuredSelfAttention": cls(
        {"units": 3, "num_hops": 2, "penalty_coefficient": 0.1},
        lambda o, inputs: o(inputs),
        inputs=(2, 5, 4),
    ),
    "AttentionPooling": cls({}, lambda o, inputs: o(inputs), inputs=(2, 5, 4)),
    "MultiHead": cls(
        lambda: {"layer": keras.layers.Dense(2), "num_heads": 2},
        lambda o, inputs: o(inputs),
        inputs=(2, 5, 4),
    ),
    "reinforce_loss": fn(
        ka.reinforce_loss, nan_on_empty=True, log_prob=(4,), reward=(4,)
    ),
    "load_model": exempt(FILES),
    "export_for_serving": exempt(FILES),
    # ops
    "ops.attend": fn(ka.ops.attend, logits=(2, 3, 5), value=(2, 5, 4)),
    "ops.attention": fn(
        ka.ops.attention, query=(2, 3, 4), key=(2, 5, 4), value=(2, 5, 4)
    ),
    "ops.masked_softmax": fn(ka.ops.masked_softmax, logits=(2, 3, 5)),
    "ops.dot_product": fn(ka.ops.dot_product, query=(2, 3, 4), key=(2, 5, 4)),
    "ops.scaled_dot_product": fn(
        ka.ops.scaled_dot_product, query=(2, 3, 4), key=(2, 5, 4)
    ),
    "ops.dot_product_attention": fn(
        ka.ops.dot_product_attention,
        query=(2, 3, 2, 4),
        key=(2, 5, 2, 4),
        value=(2, 5, 2, 4),
    ),
    "ops.chunked_attention": fn(
        ka.ops.chunked_attention,
        {"chunk_size": 2},
        query=(2, 4, 2, 3),
        key=(2, 4, 1, 3),
        value=(2, 4, 1, 3),
    ),
    "ops.plan_attention": fn(
        ka.ops.plan_attention,
        {"form": "dot", "shapes": (2, 4, 8, 8), "chunk_size": 2},
    ),
    "ops.frobenius_penalty": fn(
        ka.ops.frobenius_penalty, nan_on_empty=True, weights=(2, 3, 5)
    ),
    "ops.logits_dtype": fn(ka.ops.logits_dtype, {"dtype": "float16"}),
    "ops.causal_mask": fn(
        ka.ops.causal_mask, {"query_length": 3, "key_length": 4}
    ),
    "ops.sliding_window_mask": fn(
        ka.ops.sliding_window_mask,
        {"query_length": 3, "key_length": 4, "window": 2},
    ),
    "ops.band_mask": fn(
        ka.ops.band_mask, {"query_length": 3, "key_length": 4, "left": 1}
    ),
    "ops.combine_masks": fn(
        ka.ops.combine_masks, {"query_length": 3, "key_length": 4}
    ),
    # scores
    "scores.DotScore": cls(
        {},
        lambda o, query, key: o(query, key),
        **{"query": (2, 3, 4), "key": (2, 5, 4)},
    ),
    "scores.ScaledDotScore": cls(
        {},
        lambda o, query, key: o(query, key),
        **{"query": (2, 3, 4), "key": (2, 5, 4)},
    ),
    "scores.CosineScore": cls(
        {},
        lambda o, query, key: o(query, key),
        **{"query": (2, 3, 4), "key": (2, 5, 4)},
    ),
    "scores.BilinearScore": cls(
        {},
        lambda o, query, key: o(query, key),
        **{"query": (2, 3, 4), "key": (2, 5, 6)},
    ),
    "scores.AdditiveScore": cls(
        {"units": 3},
        lambda o, query, key: o(query, key),
        query=(2, 3, 4),
        key=(2, 5, 6),
    ),
    "scores.ConcatScore": cls(
        {"units": 3},
        lambda o, query, key: o(query, key),
        query=(2, 3, 4),
        key=(2, 5, 6),
    ),
    "scores.LocationScore": cls(
        {"max_length": 6},
        lambda o, query, key: o(query, key),
        query=(2, 3, 4),
        key=(2, 5, 4),
    ),
    "scores.Score": exempt(
        "the abstract base class: docs/errors.md's NotImplementedError row"
    ),
    "scores.get": fn(ka.scores.get, {"identifier": "dot"}),
    "scores.serialize": fn(
        ka.scores.serialize, {"score": ka.scores.DotScore()}
    ),
    "scores.deserialize": fn(
        ka.scores.deserialize,
        {"config": ka.scores.serialize(ka.scores.DotScore())},
    ),
    # seq2seq
    "seq2seq.BahdanauAttention": cls(
        {"units": 3},
        lambda o, query, memory: o(query, memory),
        query=(2, 4),
        memory=(2, 5, 6),
    ),
    "seq2seq.LuongAttention": cls(
        {},
        lambda o, query, memory: o(query, memory),
        query=(2, 4),
        memory=(2, 5, 6),
    ),
    "seq2seq.BahdanauMonotonicAttention": cls(
        {"units": 3},
        lambda o, query, memory: o(query, memory),
        query=(2, 4),
        memory=(2, 5, 6),
    ),
    "seq2seq.LuongMonotonicAttention": cls(
        {},
        lambda o, query, memory: o(query, memory),
        query=(2, 4),
        memory=(2, 5, 6),
    ),
    "seq2seq.AttentionMechanism": exempt(
        "the base class of the mechanisms swept above"
    ),
    "scores.NormalizedAdditiveScore": cls(
        {"units": 3},
        lambda o, query, key: o(query, key),
        query=(2, 3, 4),
        key=(2, 5, 6),
    ),
    "seq2seq.AttentionDecoderCell": cls(
        lambda: {
            "cell": keras.layers.GRUCell(4),
            "attention": seq2seq.BahdanauAttention(4),
        },
        lambda o, memory: o.get_initial_state(memory=memory),
        memory=(2, 5, 4),
    ),
    "seq2seq.AttentionDecoder": cls(
        lambda: {"cell": _cell()},
        lambda o, inputs, memory: o(inputs, memory),
        inputs=(2, 3, 4),
        memory=(2, 5, 4),
    ),
    "seq2seq.ScheduledSamplingDecoder": cls(
        lambda: {
            "cell": _cell(),
            "embedding": keras.layers.Embedding(6, 3),
            "output_layer": keras.layers.Dense(6),
        },
        lambda o, target_ids, memory: o(target_ids, memory),
        target_ids=("ids", (2, 3), 6),
        memory=(2, 5, 4),
    ),
    "seq2seq.ScheduledSampling": cls({"schedule": seq2seq.linear_decay(0.1)}),
    "seq2seq.Translator": cls(
        {
            "source_vocabulary": ["", "[UNK]", "ein", "hund"],
            "target_vocabulary": ["", "[UNK]", "[start]", "[end]", "a"],
            "embedding_dim": 4,
            "units": 4,
            "max_output_length": 3,
        },
        lambda o, source_ids: o.decode(source_ids),
        source_ids=("ids", (2, 3), 4),
    ),
    "seq2seq.TransformerTranslator": cls(
        {
            "source_vocabulary": ["", "[UNK]", "ein", "hund"],
            "target_vocabulary": ["", "[UNK]", "[start]", "[end]", "a"],
            "model_dim": 4,
            "num_layers": 1,
            "num_heads": 2,
            "feed_forward_dim": 4,
            "max_output_length": 3,
        },
        lambda o, source_ids: o.decode(source_ids),
        source_ids=("ids", (2, 3), 4),
    ),
    "seq2seq.GatedDeltaBlock": cls(
        {"model_dim": 4, "num_heads": 2, "feed_forward_dim": 4},
        lambda o, inputs: o(inputs),
        inputs=(2, 3, 4),
    ),
    "seq2seq.TransformerEncoderBlock": cls(
        {"model_dim": 4, "num_heads": 2, "feed_forward_dim": 4},
        lambda o, inputs: o(inputs),
        inputs=(2, 3, 4),
    ),
    "seq2seq.TransformerDecoderBlock": cls(
        {"model_dim": 4, "num_heads": 2, "feed_forward_dim": 4},
        lambda o, inputs, memory: o(inputs, memory),
        inputs=(2, 3, 4),
        memory=(2, 5, 4),
    ),
    "seq2seq.TransformerDecoderCell": exempt(
        "a cell of shared blocks that the decoders step (swept through "
        "seq2seq.TransformerTranslator's decode); its own refusals (a "
        "cell_state, no blocks) in tests/seq2seq/transformer/test_cell.py"
    ),
    "seq2seq.greedy_decode": _decode(seq2seq.greedy_decode),
    "seq2seq.sample_decode": _decode(seq2seq.sample_decode, seed=0),
    "seq2seq.beam_search_decode": _decode(
        seq2seq.beam_search_decode, beam_width=2
    ),
    "seq2seq.filter_logits": fn(
        seq2seq.filter_logits, {"top_k": 2}, log_probs=(2, 6)
    ),
    "seq2seq.hardmax": fn(seq2seq.hardmax, logits=(2, 5)),
    "seq2seq.sparsemax": fn(seq2seq.sparsemax, logits=(2, 5)),
    "seq2seq.monotonic_alignments": fn(
        seq2seq.monotonic_alignments,
        {"mode": "parallel"},
        p_choose=(2, 5),
        previous_alignments=(2, 5),
    ),
    "seq2seq.compute_attention": exempt(
        "the cell's step function: AttentionDecoderCell is swept above"
    ),
    "seq2seq.linear_decay": fn(seq2seq.linear_decay, {"c": 0.1}),
    "seq2seq.exponential_decay": fn(seq2seq.exponential_decay, {"k": 0.9}),
    "seq2seq.inverse_sigmoid_decay": fn(
        seq2seq.inverse_sigmoid_decay, {"k": 5.0}
    ),
    "seq2seq.DecodeResult": exempt(RESULT),
    "seq2seq.BeamHypotheses": exempt(RESULT),
    # text
    "text.tokenize": fn(ka.text.tokenize, {"text": "A dog."}),
    "text.detokenize": fn(ka.text.detokenize, {"tokens": ["a", "dog", "."]}),
    "text.as_text_list": fn(ka.text.as_text_list, {"texts": ["a dog"]}),
    "text.has_words": fn(ka.text.has_words, {"text": "a dog"}),
    "text.check_words": fn(ka.text.check_words, {"texts": ["a dog"]}),
    "text.vectorize": fn(
        ka.text.vectorize,
        {"vocabulary": ["", "[UNK]", "a"], "texts": ["a dog"]},
    ),
    "text.make_vectorizer": fn(
        ka.text.make_vectorizer, {"vocabulary": ["", "[UNK]", "a"]}
    ),
    "text.tf_tokenize": exempt(
        "TensorFlow string tensors inside a graph: tests/test_text.py"
    ),
    "text.tf_detokenize": exempt(
        "TensorFlow string tensors inside a graph: tests/test_text.py"
    ),
    "text.TextModel": exempt(
        "a keras.Model subclass: its predict is swept in "
        "test_text_model_predict_sweep"
    ),
}

# The Transformer-era layers and programmable attention (issues 28, 29).
ROWS.update(
    {
        "AdditiveAttention": cls(
            {}, lambda o, query, value: o([query, value]), **QVK
        ),
        "GroupQueryAttention": cls(
            {"head_dim": 2, "num_query_heads": 2, "num_key_value_heads": 1},
            lambda o, query, value: o(query, value),
            **QVK,
        ),
        "RotaryEmbedding": cls(
            {}, lambda o, inputs: o(inputs), inputs=(2, 3, 4)
        ),
        "MultiHeadLatentAttention": cls(
            {
                "num_heads": 2,
                "kv_lora_rank": 4,
                "qk_nope_head_dim": 2,
                "qk_rope_head_dim": 2,
                "v_head_dim": 2,
            },
            lambda o, inputs: o(inputs),
            inputs=(2, 5, 4),
        ),
        "RelativePositionBias": exempt(
            "a score mod: its call takes the index tensors of a kernel; "
            "tests/layers/test_mods.py and docs/errors.md"
        ),
        "GatedDeltaNet": cls(
            {"num_key_heads": 2, "key_head_dim": 2},
            lambda o, inputs: o(inputs),
            inputs=(2, 5, 4),
        ),
        "GatedDeltaCache": cls(
            lambda: {
                "conv_state": _zeros(2, 12, 3),
                "recurrent_state": _zeros(2, 2, 2, 2),
            },
            lambda cache, inputs: ka.GatedDeltaNet(2, 2)(inputs, cache=cache),
            inputs=(2, 1, 4),
        ),
        "ops.gated_delta_rule": fn(
            ka.ops.gated_delta_rule,
            query=(2, 5, 2, 4),
            key=(2, 5, 2, 4),
            value=(2, 5, 2, 3),
            g=(2, 5, 2),
            beta=(2, 5, 2),
        ),
        "ops.explain_attention": fn(
            ka.ops.explain_attention,
            query=(2, 3, 2, 4),
            key=(2, 5, 1, 4),
            value=(2, 5, 1, 4),
        ),
        "ops.Explanation": exempt(RESULT),
        "ops.flex_attention": fn(
            ka.ops.flex_attention,
            query=(2, 3, 2, 4),
            key=(2, 5, 1, 4),
            value=(2, 5, 1, 4),
        ),
        "ops.create_block_mask": fn(
            ka.ops.create_block_mask,
            lambda: {
                "mask_mod": ka.ops.mods.causal(),
                "batch": None,
                "heads": None,
                "q_len": 4,
                "kv_len": 4,
            },
        ),
        "ops.BlockMask": exempt(RESULT),
        "ops.Plan": exempt(RESULT),
        "ops.NativeCall": exempt(
            "a record of plain fields that the engine makes, checked by "
            "plan_attention(native=...): tests/ops/test_native_plan.py"
        ),
        "ops.and_masks": exempt(
            "combines mask mods (callables): tests/ops/test_mask_mods.py"
        ),
        "ops.or_masks": exempt(
            "combines mask mods (callables): tests/ops/test_mask_mods.py"
        ),
        "ops.apply_mods": exempt(
            "applies mods (callables) to logits: tests/ops/test_flex.py"
        ),
        "ops.one_hot_argmax": fn(ka.ops.one_hot_argmax, logits=(2, 5)),
        "ops.mask_logits": exempt(
            "a piece of masked_softmax and the decoders, swept through them"
        ),
        "ops.inverse_cdf_sample": exempt(
            "a piece of the sampling decoders, swept through them"
        ),
        "ops.rotary_angles": exempt(
            "the math of RotaryEmbedding, swept through the layer"
        ),
        "ops.apply_rotary": exempt(
            "the math of RotaryEmbedding, swept through the layer"
        ),
        "ops.rotary_frequencies": exempt(
            "the math of RotaryEmbedding, swept through the layer"
        ),
        "ops.yarn_attention_factor": exempt(
            "a number of RotaryEmbedding's, swept through the layer"
        ),
        "scores.BaseAdditiveScore": exempt(
            "the base class of the additive scores swept above"
        ),
    }
)


def _through_a_layer(index):
    """A cache row's call: a windowed GQA layer (1 K/V head of 2) decodes
    `query` with the cache at `index`."""

    def call(cache, query):
        layer = ka.GroupedQueryAttention(2, 2, 1, sliding_window=2)
        return layer(
            query,
            query,
            cache=cache,
            cache_update_index=index,
            use_causal_mask=True,
        )

    return call


def _zeros(*shape, dtype="float32"):
    return np.zeros(shape, dtype)


# The caches (issue 52): each kind through a layer.
ROWS.update(
    {
        "AttentionCache": exempt(
            "the abstract interface of the cache kinds swept below"
        ),
        "KeyValueCache": cls(
            lambda: {"tensor": _zeros(2, 2, 3, 1, 2)},
            _through_a_layer(0),
            query=(2, 1, 4),
        ),
        "RollingCache": cls(
            lambda: {
                "sinks": _zeros(2, 2, 0, 1, 2),
                "window": _zeros(2, 2, 2, 1, 2),
            },
            _through_a_layer(3),
            query=(2, 1, 4),
        ),
        "QuantizedCache": cls(
            lambda: {
                "values": _zeros(2, 2, 3, 1, 2, dtype="int8"),
                "scales": _zeros(2, 2, 3, 1),
            },
            _through_a_layer(0),
            query=(2, 1, 4),
        ),
        "PagedCache": cls(
            lambda: {
                "pages": _zeros(2, 4, 2, 1, 2),
                "block_table": np.array([[0, 1], [2, 3]], "int32"),
            },
            _through_a_layer(np.array([1, 0], "int32")),
            query=(2, 1, 4),
        ),
    }
)

# The data readers (above the core, imported on first use).
ROWS.update(
    {
        "data.read_sentiment_tsv": exempt(FILES),
        "data.read_parallel": exempt(FILES),
        "data.load_sst_splits": exempt(FILES),
        "data.load_tfds_sentiment": exempt(
            "TFDS: tests/data/test_named.py (offline too)"
        ),
        "data.load_tfds_translation": exempt(
            "TFDS: tests/data/test_named.py (offline too)"
        ),
        "data.make_synthetic_sentiment": fn(
            ka.data.make_synthetic_sentiment, {"num_examples": 4}
        ),
        "data.make_synthetic_translation": fn(
            ka.data.make_synthetic_translation, {"num_examples": 4}
        ),
        "data.make_text_vectorizer": fn(
            ka.data.make_text_vectorizer, {"sentences": ["a good film"]}
        ),
        "data.hold_out": fn(
            ka.data.hold_out,
            lambda: {
                "corpus": ka.data.ParallelCorpus(["a", "b"], ["c", "d"]),
                "count": 1,
            },
        ),
        "data.tokens_for": exempt(
            "a vectorizer's view of one sentence: tests/test_text.py"
        ),
        "data.ParallelCorpus": exempt(RESULT),
        "data.SentimentData": exempt(RESULT),
    }
)
MODULES["data"] = ka.data

# Tensor parallelism (issue 40): a LayoutMap from a mesh of device names.
ROWS["distribution.layout_map"] = fn(
    ka.distribution.layout_map,
    lambda: {
        "device_mesh": keras.distribution.DeviceMesh(
            (2, 2), ["batch", "model"], [f"cpu:{i}" for i in range(4)]
        ),
        "model_axis": "model",
        "batch_axis": "batch",
        "model": None,
        "overrides": None,
    },
)
# Context parallelism: JAX only, with a mesh of real devices (the sweep's
# lanes run TensorFlow and PyTorch too, where it is a named error).
RING = (
    "JAX only, over a mesh of devices: its bad inputs are the rows of "
    "docs/errors.md, 'Context parallelism', and tests/ops/test_ring.py"
)
ROWS["distribution.ContextParallel"] = exempt(RING)
ROWS["ops.ring_attention"] = exempt(RING)
MODULES["distribution"] = ka.distribution


def public_names():
    """`{dotted name: object}` of every public callable, one per object."""
    seen = {}
    for prefix, module in MODULES.items():
        names = getattr(module, "__all__", None) or dir(module)
        for name in names:
            obj = getattr(module, name)
            if (
                name.startswith("_")
                or isinstance(obj, types.ModuleType)
                or not callable(obj)
                or not getattr(obj, "__module__", "").startswith(
                    "keras_attention"
                )
            ):
                continue
            seen.setdefault(id(obj), (f"{prefix}.{name}".lstrip("."), obj))
    return dict(seen.values())


PUBLIC = public_names()
SWEPT = sorted(name for name, row in ROWS.items() if row.exempt is None)


def test_every_public_name_has_a_row():
    missing = sorted(set(PUBLIC) - set(ROWS))
    stale = sorted(set(ROWS) - set(PUBLIC))
    assert not missing, (
        f"public names the bad-input sweep does not know: {missing}; add "
        "one row each to ROWS in tests/test_sweep.py (module docstring)"
    )
    assert not stale, f"rows for names that are not public: {stale}"


# The outcome of one case.


def _names_its_input(error, names, values):
    """Whether the message names the argument or shows the value.

    Keras's own `get` functions say "Could not interpret initializer
    identifier: nope": the value, without quotes, counts.
    """
    message = str(error)
    shown = [repr(v) for v in values] + [
        str(v) for v in values if isinstance(v, str)
    ]
    return (
        "Received" in message
        or any(f"`{n}`" in message or f"{n}=" in message for n in names)
        or any(v in message for v in shown)
    )


def _check_outcome(run, names, values, finite=True, documented=()):
    """Runs `run()`; a bad input must end in a named error or a result."""
    try:
        result = run()
    except Exception as error:  # noqa: BLE001 - the point of the sweep
        if any(fragment in str(error) for fragment in documented):
            return None
        if not isinstance(error, (ValueError, TypeError)):
            pytest.fail(
                f"{names}={values!r}: {type(error).__name__} (not a "
                "ValueError or TypeError naming the input): "
                f"{str(error)[:300]}"
            )
        assert _names_its_input(error, names, values), (
            f"{type(error).__name__} that names neither {names} nor the "
            f"value received: {error}"
        )
        return None
    if finite:
        for leaf in keras.tree.flatten(result):
            if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
                array = keras.ops.convert_to_numpy(leaf)
                if array.dtype.kind == "f":
                    assert np.all(np.isfinite(array)), (
                        f"{names}={values!r}: a non-finite output from "
                        "finite inputs"
                    )
    return result


def _arrays(row, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, spec in row.tensors.items():
        if spec[0] == "ids":
            _, shape, vocabulary = spec
            arrays[name] = rng.integers(2, vocabulary, shape).astype("int32")
        else:
            arrays[name] = rng.normal(size=spec).astype("float32")
    return arrays


def _run(name, init=None, args=None, arrays=None):
    """The row's call, with `init` / `args` / `arrays` replacing its own."""
    row = ROWS[name]
    arrays = _arrays(row) if arrays is None else arrays
    if row.init is None:
        return PUBLIC[name](
            **(row.good("args") if args is None else args), **arrays
        )
    obj = PUBLIC[name](**(row.good("init") if init is None else init))
    return obj if row.call is None else row.call(obj, **arrays)


def _sweepable(name):
    """The arguments the argument sweep replaces.

    Every constructor argument of a class but Keras's own; of a function,
    those of the row's `args` (its plain values: lengths, token ids,
    texts), the tensors being the tensor sweep's.
    """
    row, obj = ROWS[name], PUBLIC[name]
    if row.init is None:
        return sorted(row.good("args"))
    signature = inspect.signature(obj.__init__)
    return [
        p.name
        for p in signature.parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        and p.name not in KERAS_ARGUMENTS
    ]


@pytest.mark.tensorflow_lane
def test_every_row_runs_on_good_inputs():
    """The rows themselves: each good call works (else the sweep is moot).

    The TensorFlow lane runs it (the rows are the same on every backend);
    in the other lanes each sweep's cases that end in a result run the
    good call with one defect.
    """
    for name in SWEPT:
        try:
            _run(name)
        except Exception as error:  # noqa: BLE001
            pytest.fail(f"{name}: its good call raised {error!r}")


@pytest.mark.parametrize("name", [n for n in SWEPT if _sweepable(n)])
@examples(CASES)
@given(data=st.data())
def test_argument_sweep(name, data):
    """Each non-tensor argument replaced by a value of a wrong type/range."""
    row = ROWS[name]
    argument = data.draw(st.sampled_from(_sweepable(name)), label="argument")
    good = row.good("init" if row.init is not None else "args")
    current = good.get(argument, _default(name, argument))
    value = data.draw(
        st.sampled_from([v for v in BAD_VALUES if not _same(v, current)]),
        label="value",
    )
    bad = {**good, argument: value}
    field = "init" if row.init is not None else "args"
    _check_outcome(
        lambda: _run(name, **{field: bad}),
        [argument],
        [value],
        finite=False,
        documented=row.documented,
    )


def _default(name, argument):
    row, obj = ROWS[name], PUBLIC[name]
    signature = inspect.signature(obj.__init__ if row.init is not None else obj)
    return signature.parameters[argument].default


def _same(a, b):
    try:
        return a is b or bool(a == b)
    except Exception:  # noqa: BLE001 - arrays, objects
        return False


# The tensor sweep.

FLOAT_MUTATIONS = (
    "rank_up",
    "rank_down",
    "batch",
    "time",
    "features",
    "int32",
    "bool",
    "float64",
    "string",
    "zero_batch",
    "zero_time",
    "nan",
    "inf",
)
IDS_MUTATIONS = (
    "rank_up",
    "rank_down",
    "batch",
    "time",
    "float32",
    "bool",
    "string",
    "zero_batch",
    "zero_time",
    "ids_high",
    "ids_negative",
)
#: Mutations whose result may hold NaN or inf (they propagate).
NON_FINITE = ("nan", "inf")
#: Mutations that must end in an error: no result is right for them. A
#: NumPy array of number strings is converted to the layer's float dtype
#: by Keras itself on JAX and PyTorch before a layer's `call` sees it (a
#: result, docs/errors.md); TensorFlow refuses it, and so do we.
MUST_FAIL = ("ids_high", "ids_negative") + (
    ("string",) if BACKEND == "tensorflow" else ()
)
#: Keras's own refusal of a NumPy string array, on PyTorch, before a
#: layer's `call` runs (docs/errors.md).
KERAS_STRING_ERROR = "Invalid dtype: str"


def mutate(array, mutation, spec):
    """`array` with one defect (`FLOAT_MUTATIONS`, `IDS_MUTATIONS`)."""
    array = np.array(array)
    changes = {
        "rank_up": lambda a: a[..., None],
        "rank_down": lambda a: a[0],
        "batch": lambda a: np.concatenate([a, a[:1]], 0),
        "time": lambda a: np.concatenate([a, a[:, :1]], 1),
        "features": lambda a: np.concatenate([a, a[..., :1]], -1),
        "int32": lambda a: a.astype("int32"),
        "float32": lambda a: a.astype("float32"),
        "bool": lambda a: a > 0,
        "float64": lambda a: a.astype("float64"),
        "string": lambda a: a.astype(str),
        "zero_batch": lambda a: a[:0],
        "zero_time": lambda a: a[:, :0],
    }
    if mutation in changes:
        return changes[mutation](array)
    value = {
        "nan": np.nan,
        "inf": np.inf,
        "ids_high": spec[-1] + 3 if spec[0] == "ids" else 0,
        "ids_negative": -1,
    }[mutation]
    array.flat[0] = value
    return array


def _mutations(name):
    row = ROWS[name]
    cases = []
    for tensor, spec in row.tensors.items():
        rank = len(spec[1] if spec[0] == "ids" else spec)
        pool = IDS_MUTATIONS if spec[0] == "ids" else FLOAT_MUTATIONS
        for mutation in pool:
            if mutation == "time" and rank < 2:
                continue
            if mutation == "zero_time" and rank < 3 and spec[0] != "ids":
                continue
            if mutation == "rank_down" and rank < 1:
                continue
            cases.append((tensor, mutation))
    return cases


def _tensor_case(name, tensor, mutation):
    row = ROWS[name]
    arrays = _arrays(row)
    # An empty batch is empty for every input; an empty sequence, for
    # every sequence input `(batch, time, ...)`. The other defects are
    # in one input.
    together = [tensor]
    if mutation == "zero_batch":
        together = list(arrays)
    elif mutation == "zero_time":
        together = [n for n, a in arrays.items() if a.ndim >= 3 or n == tensor]
    for each in together:
        arrays[each] = mutate(arrays[each], mutation, row.tensors[each])
    result = _check_outcome(
        lambda: _run(name, arrays=arrays),
        [tensor],
        [],
        finite=mutation not in NON_FINITE
        and not (row.nan_on_empty and mutation == "zero_batch"),
        documented=row.documented
        + ((KERAS_STRING_ERROR,) if mutation == "string" else ()),
    )
    if mutation in MUST_FAIL:
        assert result is None, (
            f"{tensor} with {mutation}: a result where no result is right"
        )


@pytest.mark.parametrize("name", [n for n in SWEPT if ROWS[n].tensors])
@examples(CASES)
@given(data=st.data())
def test_tensor_sweep(name, data):
    """Each tensor input with a wrong rank, size, dtype, value or emptiness."""
    tensor, mutation = data.draw(
        st.sampled_from(_mutations(name)), label="tensor, mutation"
    )
    _tensor_case(name, tensor, mutation)
