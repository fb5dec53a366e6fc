"""Every layer trains under XLA and under mixed precision (issue 7, item 4).

For each layer of the library (each score through `Attention`, `Attention`
with and without a key, `HardAttention` in all its modes, the dense and
chunked paths of `MultiHeadAttention` and `SelfAttention`,
`StructuredSelfAttention` with its penalty, and the seq2seq mechanisms on
their own and through `AttentionDecoder`) a small functional branch is
fitted with `jit_compile=True` under the `float32`, `mixed_float16` and
`mixed_bfloat16` policies: one layer of each family under all three, the
rest of the family (and each decoder, whose recurrent loop is the
costliest to compile) under one (`ONE_POLICY`). Each test checks, for its
layer and policy, that

- the training loss is finite, and the layer's error on an easy fixed
  target goes down;
- the weights of the layer itself, and the query projection in front of it
  (which only reaches the loss through the attention weights), change;
- the layer's output has the policy's compute dtype and every variable
  stays `float32`.

Compiling one model per layer and policy takes most of the time, so the
branches of a policy are trained together, in `GROUPS` multi-output
models (one model of all of them compiles for longer than the four), the
first time a test of that group runs. If that joint run raises, each test
of the group trains its own branch alone, so the error names the layer.

Each policy trains in one lane: float32 (this module) and mixed_float16
on TensorFlow, mixed_bfloat16 on JAX. The cheaper cover of the others in
each lane: every layer's basics (`tests/layer_basics.py`: a float32
training step, under `jax.jit` on JAX, and a call under mixed_float16) and
the property tests (`tests/test_properties.py`, the layers called under a
policy drawn from the three).
"""

import dataclasses
from collections.abc import Callable

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention import scores
from keras_attention import seq2seq

BATCH, TQ, TV, DIM = 8, 3, 5, 8
STEPS = 30
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def _data():
    rng = np.random.default_rng(0)
    return {
        "query": rng.normal(size=(BATCH, TQ, DIM)).astype("float32"),
        "value": rng.normal(size=(BATCH, TV, DIM)).astype("float32"),
        "targets": rng.normal(size=(BATCH, TQ, 4)).astype("float32"),
    }


@dataclasses.dataclass
class Branch:
    """One layer under test inside the joint model.

    `output` is the branch's model output and `layer_output` the (first)
    output of the layer itself; `projection` is the trainable layer in
    front of it whose only path to the loss is the attention weights.
    """

    layer: keras.layers.Layer
    projection: keras.layers.Layer
    inputs: tuple
    output: object
    layer_output: object
    target: np.ndarray
    loss: object = "mse"
    # How many trailing features of `output` are not the prediction (the
    # log-probability packed in by the REINFORCE branch).
    extra_features: int = 0
    # Variables whose gradient is zero in exact arithmetic, so they need
    # not move: a bias added to every key shifts all logits of a row by the
    # same amount, which the softmax ignores.
    may_stay: tuple = ()


def _target(data, rows):
    """The easy target: value 0 of each example, repeated `rows` times."""
    return np.repeat(data["value"][:, :1], rows, axis=1)


def _query_value(make_layer, with_key=False, single_query=False):
    """`layer(Dense(query), Dense(value)[, Dense(key)])`."""

    def build(inputs, data):
        query = inputs["query"]
        if single_query:
            query = keras.layers.Lambda(lambda q: q[:, 0])(query)
        projection = keras.layers.Dense(DIM)
        args = [projection(query), keras.layers.Dense(DIM)(inputs["value"])]
        if with_key:
            args.append(keras.layers.Dense(DIM)(inputs["value"]))
        layer = make_layer()
        out = layer(*args)
        target = _target(data, TQ)
        if single_query:
            target = target[:, 0]
        return Branch(layer, projection, ("query", "value"), out, out, target)

    return build


def _score(score, with_key=True):
    return _query_value(
        lambda: keras_attention.Attention(score=score), with_key=with_key
    )


def _hard_straight_through(mode):
    return _query_value(
        lambda: keras_attention.HardAttention(
            score="bilinear", mode=mode, seed=3
        )
    )


def _reinforce_loss(y_true, y_pred):
    """Squared error of the selection plus the REINFORCE surrogate.

    The reward of a selection is its negative squared error and the
    baseline the batch mean, so the policy learns to pick better values.
    """
    out, log_prob = y_pred[..., :-1], y_pred[..., -1]
    error = ops.mean(ops.square(out - y_true), axis=-1)
    baseline = ops.mean(-error)
    surrogate = keras_attention.reinforce_loss(log_prob, -error, baseline)
    return ops.mean(error) + surrogate


def _hard_reinforce(mode):
    """The selection has no gradient; the log-probability does."""

    def build(inputs, data):
        projection = keras.layers.Dense(DIM)
        layer = keras_attention.HardAttention(
            score="bilinear", mode=mode, estimator="reinforce", seed=3
        )
        out, log_prob = layer(
            projection(inputs["query"]),
            keras.layers.Dense(DIM)(inputs["value"]),
            return_log_prob=True,
        )
        packed = keras.layers.Concatenate()(
            [out, keras.layers.Reshape((TQ, 1))(log_prob)]
        )
        return Branch(
            layer,
            projection,
            ("query", "value"),
            packed,
            out,
            _target(data, TQ),
            loss=_reinforce_loss,
            extra_features=1,
        )

    return build


def _multi_head(chunk_size, score="scaled_dot"):
    def build(inputs, data):
        projection = keras.layers.Dense(DIM)
        layer = keras_attention.MultiHeadAttention(
            num_heads=2, key_dim=4, chunk_size=chunk_size, score=score
        )
        out = layer(projection(inputs["query"]), inputs["value"])
        return Branch(
            layer,
            projection,
            ("query", "value"),
            out,
            out,
            _target(data, TQ),
            may_stay=("key/bias",),
        )

    return build


def _self_attention(chunk_size):
    def build(inputs, data):
        projection = keras.layers.Dense(DIM)
        layer = keras_attention.SelfAttention(
            num_heads=2, chunk_size=chunk_size
        )
        out = layer(projection(inputs["value"]), use_causal_mask=True)
        return Branch(
            layer,
            projection,
            ("value",),
            out,
            out,
            _target(data, TV),
            may_stay=("key/bias",),
        )

    return build


def _single_input(make_layer, rows=TV, pooled=False):
    """`layer(Dense(value))`: one input (issue 16's layers)."""

    def build(inputs, data):
        projection = keras.layers.Dense(DIM)
        layer = make_layer()
        out = layer(projection(inputs["value"]))
        target = _target(data, rows)
        if pooled:
            target = target[:, 0]
        return Branch(
            layer,
            projection,
            ("value",),
            out,
            out,
            target,
            may_stay=("key/bias",),
        )

    return build


def _grouped_query(inputs, data):
    branch = _query_value(
        lambda: keras_attention.GroupedQueryAttention(
            head_dim=4, num_query_heads=4, num_key_value_heads=2
        )
    )(inputs, data)
    return dataclasses.replace(branch, may_stay=("key/bias",))


def _additive_list_call(inputs, data):
    """Keras's list call, `AdditiveAttention()([query, value])`."""
    projection = keras.layers.Dense(DIM)
    layer = keras_attention.AdditiveAttention()
    out = layer(
        [projection(inputs["query"]), keras.layers.Dense(DIM)(inputs["value"])]
    )
    return Branch(
        layer, projection, ("query", "value"), out, out, _target(data, TQ)
    )


def _multi_head_wrapper(inputs, data):
    projection = keras.layers.Dense(DIM)
    layer = keras_attention.MultiHead(
        keras_attention.Attention(score="bilinear"),
        2,
        reg_index=0,
        reg_factor=0.01,
    )
    out = layer(projection(inputs["value"]))
    output = keras.layers.Reshape((TV, 2 * DIM))(out)
    target = np.repeat(_target(data, TV), 2, axis=-1)
    return Branch(layer, projection, ("value",), output, out, target)


def _structured(inputs, data):
    projection = keras.layers.Dense(DIM)
    layer = keras_attention.StructuredSelfAttention(
        units=6, num_hops=2, penalty_coefficient=1.0
    )
    out = layer(projection(inputs["value"]))
    target = _target(data, 2).reshape(BATCH, 2 * DIM)
    return Branch(layer, projection, ("value",), out, out, target)


def _mechanism(make_mechanism):
    """A seq2seq mechanism on its own: `Dense(query)` over `Dense(value)`."""

    def build(inputs, data):
        projection = keras.layers.Dense(DIM)
        layer = make_mechanism()
        context, _ = layer(
            projection(inputs["query"]),
            keras.layers.Dense(DIM)(inputs["value"]),
        )
        return Branch(
            layer,
            projection,
            ("query", "value"),
            context,
            context,
            _target(data, TQ),
        )

    return build


def _decoder(make_mechanism, attention_layer_units=DIM):
    """`AttentionDecoder` over a projected memory; target: memory step 0."""

    def build(inputs, data):
        projection = keras.layers.Dense(DIM)
        cell = seq2seq.AttentionDecoderCell(
            keras.layers.GRUCell(DIM),
            make_mechanism(),
            attention_layer_units=attention_layer_units,
        )
        layer = seq2seq.AttentionDecoder(cell)
        out = layer(inputs["targets"], projection(inputs["value"]))
        return Branch(
            layer,
            projection,
            ("targets", "value"),
            out,
            out,
            _target(data, TQ),
        )

    return build


MECHANISMS = {
    "bahdanau": lambda: seq2seq.BahdanauAttention(DIM),
    "bahdanau_normalized": lambda: seq2seq.BahdanauAttention(
        DIM, normalize=True
    ),
    "luong_dot": lambda: seq2seq.LuongAttention("dot"),
    "luong_general": lambda: seq2seq.LuongAttention("general"),
    "luong_concat": lambda: seq2seq.LuongAttention("concat", units=DIM),
    "luong_location": lambda: seq2seq.LuongAttention("location", max_length=TV),
}

LAYERS: dict[str, Callable] = {
    "attention_dot": _score("dot"),
    "attention_scaled_dot": _score("scaled_dot"),
    "attention_cosine": _score("cosine"),
    "attention_bilinear": _score("bilinear"),
    "attention_additive": _score("additive"),
    "attention_concat": _score("concat"),
    # The location score ignores the keys, so it gets none.
    "attention_location": _score(
        scores.LocationScore(max_length=TV), with_key=False
    ),
    "attention_without_key": _score("scaled_dot", with_key=False),
    "attention_single_query": _query_value(
        lambda: keras_attention.Attention(score="additive"),
        single_query=True,
    ),
    "hard_argmax_straight_through": _hard_straight_through("argmax"),
    "hard_sample_straight_through": _hard_straight_through("sample"),
    "hard_argmax_reinforce": _hard_reinforce("argmax"),
    "hard_sample_reinforce": _hard_reinforce("sample"),
    "multi_head_dense": _multi_head(0),
    "multi_head_chunked": _multi_head(2),
    "multi_head_additive": _multi_head(0, score="additive"),
    "self_attention_dense": _self_attention(0),
    "self_attention_chunked": _self_attention(2),
    "structured_self_attention": _structured,
    "attention_self_local": _single_input(
        lambda: keras_attention.Attention(
            score="additive",
            attention_width=3,
            attention_activation="sigmoid",
            use_attention_bias=True,
            penalty_coefficient=0.01,
        )
    ),
    "self_attention_local": _single_input(
        lambda: keras_attention.SelfAttention(
            num_heads=2,
            attention_width=3,
            attention_activation="sigmoid",
            penalty_coefficient=0.01,
        )
    ),
    "attention_pooling_learned": _single_input(
        lambda: keras_attention.AttentionPooling(score="additive"), pooled=True
    ),
    "attention_pooling_last": _single_input(
        lambda: keras_attention.AttentionPooling(
            query="last", score="bilinear", units=DIM
        ),
        pooled=True,
    ),
    "multi_head_wrapper": _multi_head_wrapper,
    # Issue 29's layers: grouped K/V heads, Keras's additive layer, T5's
    # bias (a layer that is a score mod; its table must train) and rotary
    # embeddings (no weights of their own) on a causal layer.
    "grouped_query": _grouped_query,
    "additive_attention": _additive_list_call,
    "relative_position_bias": _single_input(
        lambda: keras_attention.SelfAttention(
            num_heads=2,
            score_mod=keras_attention.RelativePositionBias(
                num_heads=2, num_buckets=8, max_distance=16
            ),
        )
    ),
    "rotary_embedding": _single_input(
        lambda: keras_attention.SelfAttention(
            num_heads=2, rotary_embedding=keras_attention.RotaryEmbedding()
        )
    ),
    # Issue 38's: multi-head latent attention, its query latent too.
    "latent_attention": _single_input(
        lambda: keras_attention.MultiHeadLatentAttention(
            num_heads=2,
            kv_lora_rank=4,
            qk_nope_head_dim=4,
            qk_rope_head_dim=2,
            v_head_dim=4,
            q_lora_rank=4,
        )
    ),
    **{f"mechanism_{k}": _mechanism(v) for k, v in MECHANISMS.items()},
    **{
        f"decoder_{k}": _decoder(
            v, attention_layer_units=None if k == "luong_dot" else DIM
        )
        for k, v in MECHANISMS.items()
    },
    # Issue 14: sparsemax weights, and the monotonic mechanisms (one decoder
    # step at a time, so through the decoder only).
    "mechanism_bahdanau_sparsemax": _mechanism(
        lambda: seq2seq.BahdanauAttention(DIM, probability_fn="sparsemax")
    ),
    "decoder_bahdanau_monotonic": _decoder(
        lambda: seq2seq.BahdanauMonotonicAttention(DIM, normalize=True)
    ),
    "decoder_luong_monotonic": _decoder(
        lambda: seq2seq.LuongMonotonicAttention(
            "general", scale=True, mode="recursive"
        )
    ),
}


def _numpy(x):
    return keras.ops.convert_to_numpy(x).astype("float32")


def _error(model, names, branches, data):
    """Each branch's mean squared error at inference (training=False)."""
    # One branch: the model returns its tensor, not a list of one.
    outputs = keras.tree.flatten(
        model([data[k] for k in _input_names(branches)], training=False)
    )
    errors = {}
    for name, output in zip(names, outputs, strict=True):
        branch = branches[name]
        output = _numpy(output)
        if branch.extra_features:
            output = output[..., : -branch.extra_features]
        errors[name] = float(np.mean(np.square(output - branch.target)))
    return errors


def _input_names(branches):
    used = {k for b in branches.values() for k in b.inputs}
    return [k for k in ("query", "value", "targets") if k in used]


def _train(policy, names):
    """Trains the branches `names` together; one result dict per branch."""
    keras.config.set_dtype_policy(policy)
    compute_dtype = keras.config.dtype_policy().compute_dtype
    data = _data()
    inputs = {k: keras.Input(v.shape[1:], name=k) for k, v in data.items()}
    branches = {name: LAYERS[name](inputs, data) for name in names}
    model_inputs = [inputs[k] for k in _input_names(branches)]
    model = keras.Model(model_inputs, [branches[n].output for n in names])
    results = {name: {} for name in names}

    # The layer's own output is in the compute dtype, symbolically and
    # when the model runs.
    for name, branch in branches.items():
        probe = keras.Model(
            [inputs[k] for k in branch.inputs], branch.layer_output
        )
        actual = probe([data[k] for k in branch.inputs])
        results[name]["output_dtypes"] = {
            keras.backend.standardize_dtype(t.dtype)
            for t in (branch.layer_output, actual)
        } - {compute_dtype}

    def watched(branch):
        variables = branch.layer.trainable_variables
        variables += branch.projection.trainable_variables
        return {id(v): (v.path, _numpy(v)) for v in variables}

    before = {name: watched(b) for name, b in branches.items()}
    error_before = _error(model, names, branches, data)
    model.compile(
        optimizer=keras.optimizers.Adam(0.02),
        loss=[branches[n].loss for n in names],
        jit_compile=True,
    )
    # One epoch of STEPS identical batches: one update per batch.
    history = model.fit(
        [np.concatenate([data[k]] * STEPS) for k in _input_names(branches)],
        [np.concatenate([branches[n].target] * STEPS) for n in names],
        batch_size=BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
    )
    loss = history.history["loss"][0]
    error_after = _error(model, names, branches, data)

    for name, branch in branches.items():
        after = watched(branch)
        results[name]["loss"] = loss
        results[name]["frozen"] = [
            path
            for key, (path, value) in before[name].items()
            if np.array_equal(value, after[key][1])
            and not path.endswith(branch.may_stay)
        ]
        variables = branch.layer.variables + branch.projection.variables
        results[name]["not_float32"] = [
            (v.path, keras.backend.standardize_dtype(v.dtype))
            for v in variables
            if (v.trainable or "float" in v.dtype) and v.dtype != "float32"
        ]
        results[name]["errors"] = (error_before[name], error_after[name])
    return results


# Each policy trains on one backend, in its own module: float32
# (`tensorflow_lane`, this module) and mixed_float16 (`tensorflow_lane`)
# on TensorFlow, mixed_bfloat16 (`jax_lane`) on JAX. The layers below
# train under the one policy given here; the others (one of each family:
# an Attention score, the hard layers, the multi-head engine dense and in
# blocks, StructuredSelfAttention, a Bahdanau and a Luong mechanism) under
# all three. A layer here shares its code path with its family's member
# that trains under all three (another score through Attention, another
# estimator or mode, the same engine through SelfAttention, another
# mechanism); compiling a decoder's recurrent loop costs the most, so each
# decoder runs under one policy, two of them (one with an attention layer,
# one without) under mixed_bfloat16.
ONE_POLICY = {
    "attention_dot": "mixed_bfloat16",
    "attention_scaled_dot": "mixed_float16",
    "attention_bilinear": "float32",
    "attention_concat": "mixed_bfloat16",
    "attention_location": "mixed_float16",
    "attention_without_key": "float32",
    "attention_single_query": "mixed_bfloat16",
    "hard_argmax_straight_through": "float32",
    "hard_argmax_reinforce": "mixed_float16",
    "hard_sample_reinforce": "mixed_bfloat16",
    "self_attention_dense": "mixed_bfloat16",
    "self_attention_chunked": "mixed_float16",
    "multi_head_additive": "mixed_bfloat16",
    "mechanism_bahdanau_normalized": "mixed_bfloat16",
    "mechanism_luong_dot": "float32",
    "mechanism_luong_concat": "mixed_bfloat16",
    "mechanism_luong_location": "float32",
    "mechanism_bahdanau_sparsemax": "mixed_bfloat16",
    "decoder_bahdanau": "float32",
    "decoder_luong_general": "float32",
    "decoder_luong_monotonic": "float32",
    "decoder_bahdanau_normalized": "mixed_float16",
    "decoder_luong_concat": "mixed_float16",
    "decoder_bahdanau_monotonic": "mixed_float16",
    "decoder_luong_dot": "mixed_bfloat16",
    "decoder_luong_location": "mixed_bfloat16",
    # Layers whose attention runs through code the three-policy cases
    # already cover (the Attention and multi-head paths), spread out.
    "attention_self_local": "float32",
    "self_attention_local": "mixed_float16",
    "attention_pooling_learned": "mixed_bfloat16",
    "attention_pooling_last": "float32",
    "multi_head_wrapper": "mixed_float16",
    # Issue 29's and 38's layers.
    "grouped_query": "mixed_float16",
    "additive_attention": "float32",
    "relative_position_bias": "mixed_bfloat16",
    "rotary_embedding": "mixed_float16",
    # tests/layers/test_latent.py checks mixed_bfloat16 on every backend.
    "latent_attention": "mixed_float16",
}
CASES = [
    (name, policy)
    for name in sorted(LAYERS)
    for policy in POLICIES
    if ONE_POLICY.get(name, policy) == policy
]

_JOINT = {}
# XLA's compile time grows faster than the model: the 29 branches of
# mixed_float16 on TensorFlow compiled and trained in 129 s as one model,
# in 69 s as four of 7 or 8 branches (load 3); so each policy's branches
# train in GROUPS joint models, every GROUPS-th name in sorted order.
GROUPS = 4


def _group(name, policy):
    names = sorted(n for n, p in CASES if p == policy)
    return tuple(names[names.index(name) % GROUPS :: GROUPS])


def _result(name, policy):
    key = (policy, _group(name, policy))
    if key not in _JOINT:
        try:
            _JOINT[key] = _train(policy, list(key[1]))
        except Exception as error:  # noqa: BLE001 - retried one by one
            _JOINT[key] = error
    if isinstance(_JOINT[key], Exception):
        return _train(policy, [name])[name]
    return _JOINT[key][name]


def check_layer_trains(name, policy):
    """The checks of one layer under one policy (see the module doc)."""
    result = _result(name, policy)
    where = f"{name} under {policy}"
    assert not result["output_dtypes"], (
        f"{where}: output dtypes {result['output_dtypes']}"
    )
    assert np.isfinite(result["loss"]), f"{where}: loss {result['loss']}"
    assert not result["frozen"], f"{where}: unchanged {result['frozen']}"
    assert not result["not_float32"], f"{where}: {result['not_float32']}"
    before, after = result["errors"]
    assert np.isfinite(after), f"{where}: error {before} -> {after}"
    assert after < 0.8 * before, f"{where}: error {before} -> {after}"


def policy_test(policy):
    """The parametrized test of every layer under `policy`.

    Each policy has its own test module, so that pytest-xdist's
    `--dist loadfile` can give the three joint models (and the
    quantization test) to different workers.
    """

    @pytest.mark.heavy
    @pytest.mark.parametrize("name", [n for n, p in CASES if p == policy])
    def test_layer_trains_under_xla_and_policy(name):
        check_layer_trains(name, policy)

    return test_layer_trains_under_xla_and_policy


test_layer_trains_under_xla_and_float32 = pytest.mark.tensorflow_lane(
    policy_test("float32")
)


def _predict(model, data, branches):
    outputs = model([data[k] for k in _input_names(branches)], training=False)
    return [_numpy(o) for o in outputs]
