"""Context parallelism: `ring_attention` and `ContextParallel`.

The ring needs several devices, which must exist before JAX starts: the
numerical checks run in one subprocess with 8 simulated CPU devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=8`), in the JAX lane.
Each compares the ring with the one-device result, outputs and
gradients (`flex_attention`'s dense path, or the same layer called
outside the `ContextParallel`). The block arithmetic, the refusals and
the TensorFlow / PyTorch errors run in-process, in every lane.
"""

import json

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.ops import _ring
from keras_attention.ops import mods
from tests import subprocesses as processes

JAX = keras.backend.backend() == "jax"
DEVICES = [f"cpu:{i}" for i in range(8)]


def _kind(limits, queries, keys):
    return int(
        keras.ops.convert_to_numpy(_ring.pair_kind(limits, queries, keys))
    )


@pytest.mark.parametrize(
    "limits, queries, keys, kind",
    [
        # Causal, blocks of 16: the future block is empty, the diagonal
        # one cut, the past one whole.
        ((None, 0), (0, 16), (16, 16), _ring.EMPTY),
        ((None, 0), (16, 16), (16, 16), _ring.PARTIAL),
        ((None, 0), (32, 16), (16, 16), _ring.FULL),
        # A window of 3 each side: blocks two apart do not meet; the
        # neighbour is cut (its far keys are out of reach).
        ((3, 3), (32, 16), (0, 16), _ring.EMPTY),
        ((3, 3), (32, 16), (16, 16), _ring.PARTIAL),
        # A wide window keeps the neighbour whole; no limit keeps all.
        ((40, 40), (32, 16), (16, 16), _ring.FULL),
        ((None, None), (0, 16), (48, 16), _ring.FULL),
        # Query and key blocks of different lengths (Tq != Tk).
        ((None, 0), (8, 8), (16, 16), _ring.EMPTY),
        ((None, 0), (16, 8), (0, 16), _ring.FULL),
    ],
)
def test_pair_kind_by_hand(limits, queries, keys, kind):
    assert _kind(limits, queries, keys) == kind


def _step_kind(index, src, band=None, segments=None):
    config = _ring.Config(
        axis="sequence",
        size=4,
        scale=1.0,
        sizes=(8, 8),
        lengths=(16, 16),
        band=band,
    )
    extras, kv_extras = {}, {}
    if segments is not None:
        extras["segment_ids"] = segments[:, 16 * index : 16 * (index + 1)]
        kv_extras["segment_ids"] = segments[:, 16 * src : 16 * (src + 1)]
    step = _ring._Step(config, index, src, extras, kv_extras)
    return int(keras.ops.convert_to_numpy(step.kind()))


def test_a_step_skips_the_device_blocks_its_band_or_documents_empty():
    # Four devices of 16 positions: the causal future is skipped.
    assert _step_kind(1, 2, mods.causal()) == _ring.EMPTY
    assert _step_kind(2, 2, mods.causal()) == _ring.PARTIAL
    assert _step_kind(2, 1) == _ring.FULL
    # Documents: two of 32 in row 0, one of 64 in row 1 (it meets all).
    segments = np.stack([np.repeat([0, 1], 32), np.zeros(64, int)])
    assert _step_kind(0, 3, segments=segments) == _ring.FULL
    assert _step_kind(0, 3, segments=segments[:1]) == _ring.EMPTY
    assert _step_kind(0, 1, segments=segments[:1]) == _ring.FULL
    # Both: a past block of another document.
    assert _step_kind(3, 0, mods.causal(), segments[:1]) == _ring.EMPTY


def test_plan_takes_the_ring_and_refuses_what_it_cannot_give():
    plan = ka.ops.plan_attention("dot", (1, 8, 64, 64), None, ring=True)
    assert (plan.path, plan.block_size) == ("ring", (512, 512))
    plan = ka.ops.plan_attention("dot", (1, 8, 64, 64), 16, ring=True)
    assert plan.block_size == (16, 16)
    with pytest.raises(ValueError, match="no attention weights"):
        ka.ops.plan_attention(
            "dot", (1, 8, 64, 64), None, ring=True, weights=True
        )
    with pytest.raises(ValueError, match="a dot-product score"):
        ka.ops.plan_attention("additive", (1, 8, 64, 64), None, ring=True)
    with pytest.raises(ValueError, match="no `attention_mask` tensor"):
        ka.ops.plan_attention(
            "dot", (1, 8, 64, 64), None, ring=True, tensor_mask=True
        )


@pytest.mark.skipif(JAX, reason="the error of TensorFlow and PyTorch")
def test_other_backends_get_a_named_error():
    mesh = keras.distribution.DeviceMesh((8,), ["sequence"], DEVICES)
    with pytest.raises(ValueError, match="needs the JAX backend.*backend="):
        ka.distribution.ContextParallel(mesh)
    q = np.zeros((1, 8, 2, 4), "float32")
    with pytest.raises(ValueError, match="ring_attention needs the JAX"):
        ka.ops.ring_attention(q, q, q)


def _context(shape=(4,), names=("sequence",), **kwargs):
    mesh = keras.distribution.DeviceMesh(shape, list(names), DEVICES[:4])
    return ka.distribution.ContextParallel(mesh, **kwargs)


@pytest.mark.skipif(not JAX, reason="ContextParallel runs on JAX")
def test_an_axis_that_does_not_divide_the_sequence_is_named():
    q = np.zeros((1, 10, 2, 4), "float32")
    with pytest.raises(ValueError, match="'sequence' of 4 devices.*length 10"):
        ka.ops.ring_attention(q, q, q, _context())
    with _context((2, 2), ("batch", "sequence"), batch_axis="batch"):
        q = np.zeros((3, 8, 2, 4), "float32")
        with pytest.raises(ValueError, match="'batch'.*batch size=3"):
            ka.ops.ring_attention(q, q, q)
    assert ka.ops.ring.current() is None


@pytest.mark.skipif(not JAX, reason="ContextParallel runs on JAX")
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"device_mesh": "mesh"}, "device_mesh"),
        ({"sequence_axis": "time"}, "sequence_axis.*time"),
        ({"batch_axis": "sequence"}, "different mesh axes"),
    ],
)
def test_bad_context_arguments_name_what_was_received(kwargs, match):
    mesh = keras.distribution.DeviceMesh((4,), ["sequence"], DEVICES[:4])
    args = {"device_mesh": mesh, **kwargs}
    with pytest.raises(ValueError, match=match):
        ka.distribution.ContextParallel(**args)


@pytest.mark.skipif(not JAX, reason="ContextParallel runs on JAX")
def test_what_cannot_cross_the_ring_is_refused():
    q = np.zeros((2, 8, 2, 4), "float32")
    context = _context()
    with pytest.raises(ValueError, match="mods.document.*Padding"):
        ka.ops.ring_attention(
            q, q, q, context, mask_mod=mods.padding(np.array([3, 8]))
        )
    with pytest.raises(ValueError, match="score mods of positions"):
        ka.ops.ring_attention(
            q, q, q, context, score_mod=mods.bias(np.zeros((1, 1, 8, 8)))
        )
    with pytest.raises(ValueError, match="a `ContextParallel`"):
        ka.ops.ring_attention(q, q, q)
    layer = ka.MultiHeadAttention(2, 4)
    x = np.zeros((2, 8, 8), "float32")
    with context, pytest.raises(ValueError, match="no attention weights"):
        layer(x, x, return_attention_scores=True)


@pytest.mark.skipif(not JAX, reason="ContextParallel runs on JAX")
def test_a_function_jitted_outside_is_traced_again_inside():
    # jit keeps a trace: a function traced outside ran its one-device
    # program inside the context (issue 54). Entering it sets JAX's mesh
    # context, part of jit's cache key. One device is enough to see it.
    import jax

    traces = []

    def attend(q):
        traces.append(len(traces))
        return ka.ops.flex_attention(q, q, q, mask_mod=mods.causal())

    f = jax.jit(attend)
    mesh = keras.distribution.DeviceMesh(
        (1,), ["sequence"], keras.distribution.list_devices()[:1]
    )
    context = ka.distribution.ContextParallel(mesh)
    q = np.random.default_rng(0).normal(size=(2, 8, 2, 4)).astype("float32")
    outside = f(q)
    assert len(traces) == 1
    assert "shard_map" not in str(jax.make_jaxpr(f)(q))
    with context:
        inside = f(q)
        assert len(traces) == 2
        assert "shard_map" in str(jax.make_jaxpr(f)(q))
        f(q)
    f(q)
    assert len(traces) == 2  # Each context traced once.
    np.testing.assert_allclose(inside, outside, rtol=1e-6, atol=1e-6)

    @jax.jit
    def entered_inside_a_trace(q):
        with context:  # JAX refuses a mesh here: this trace is new anyway.
            return attend(q)

    np.testing.assert_allclose(
        entered_inside_a_trace(q), outside, rtol=1e-6, atol=1e-6
    )


def ring_checks():
    """Run in a subprocess with 8 devices: prints JSON, per check the
    largest output and gradient differences from one device."""
    import jax
    import jax.numpy as jnp

    assert len(jax.devices()) == 8, jax.devices()
    rng = np.random.default_rng(0)
    report = {}

    def worst(a, b):
        return max(
            float(jnp.max(jnp.abs(x - y)))
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
        )

    def compare(name, ring_fn, single_fn, args, context=None):
        def step(fn):
            loss = lambda *t: jnp.sum(fn(*t) ** 2)  # noqa: E731
            return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))

        single = step(single_fn)(*args)
        if context is None:
            ring = step(ring_fn)(*args)
        else:
            with context:
                lowered = step(ring_fn).lower(*args)
            ring = lowered.compile()(*args)
            text = lowered.as_text()
            report[name + ": permutes"] = "collective_permute" in text
        # The loss (a sum of thousands of squares) relative to its size,
        # so that the float32 rounding of other summation orders passes.
        loss = worst(ring[0], single[0]) / float(jnp.abs(single[0]))
        report[name] = [loss, worst(ring[1], single[1])]

    mesh = keras.distribution.DeviceMesh(
        (4,), ["sequence"], keras.distribution.list_devices()[:4]
    )
    context = ka.distribution.ContextParallel(mesh)
    batch, length = 2, 64
    q = rng.normal(size=(batch, length, 4, 8)).astype("float32")
    kv = rng.normal(size=(2, batch, length, 2, 8)).astype("float32")
    segments = np.repeat(np.arange(4), 16)[None].repeat(batch, 0)
    segments[1] = np.repeat([0, 1], 32)  # A document across devices.
    keys = np.ones((batch, length), bool)
    keys[1, 40:] = False
    cases = {
        "causal, grouped heads": (
            {"causal": True},
            {"mask_mod": mods.causal()},
        ),
        "documents, causal": (
            {"causal": True, "mask_mod": mods.document(segments)},
            {
                "mask_mod": ka.ops.and_masks(
                    mods.causal(), mods.document(segments)
                )
            },
        ),
        "window, key mask, alibi": (
            {
                "mask_mod": mods.sliding_window(5),
                "key_mask": keys,
                "score_mod": mods.alibi(4),
            },
            {
                "mask_mod": ka.ops.and_masks(
                    mods.sliding_window(5),
                    lambda b, h, qi, ki: keras.ops.take(
                        keras.ops.reshape(keys, (-1,)), b * length + ki
                    ),
                ),
                "score_mod": mods.alibi(4),
            },
        ),
    }
    for name, (ring_kwargs, flex_kwargs) in cases.items():
        compare(
            name,
            lambda a, b, c, kw=ring_kwargs: ka.ops.ring_attention(
                a, b, c, context, chunk_size=8, **kw
            ),
            lambda a, b, c, kw=flex_kwargs: ka.ops.flex_attention(
                a, b, c, chunk_size=0, **kw
            ),
            (q, kv[0], kv[1]),
        )

    # The log-sum-exp beside the output, and the gradient through it.
    def with_lse(result):
        out, lse = result
        # sin: the lse (about log N) would otherwise make the loss large
        # enough that float32 rounding alone passes the tolerance.
        return out + jnp.sin(jnp.transpose(lse, (0, 2, 1)))[..., None]

    compare(
        "causal, lse",
        lambda a, b, c: with_lse(
            ka.ops.ring_attention(
                a, b, c, context, causal=True, chunk_size=8, return_lse=True
            )
        ),
        lambda a, b, c: with_lse(
            ka.ops.flex_attention(
                a, b, c, mask_mod=mods.causal(), chunk_size=0, return_lse=True
            )
        ),
        (q, kv[0], kv[1]),
    )
    # flex_attention inside the scope, on a 2 × 4 mesh (batch, sequence).
    mesh = keras.distribution.DeviceMesh(
        (2, 4), ["batch", "sequence"], keras.distribution.list_devices()
    )
    both = ka.distribution.ContextParallel(mesh, batch_axis="batch")

    def flex(a, b, c):
        return ka.ops.flex_attention(a, b, c, mask_mod=mods.causal())

    compare("flex_attention in the scope", flex, flex, (q, kv[0], kv[1]), both)
    _layer_checks(report, both, compare, rng)
    _with_tensor_parallelism(report)
    print(json.dumps(report))


def _with_tensor_parallelism(report):
    """One training step under `ModelParallel` (the heads over `model`)
    and `ContextParallel` (the sequence over `sequence`, the key/value
    heads over `model` too) equals one device's."""

    def build():
        ids = keras.Input((32,), dtype="int32")
        x = keras.layers.Embedding(10, 16, name="embedding")(ids)
        x = ka.MultiHeadAttention(4, 8, name="mha")(x, x, use_causal_mask=True)
        model = keras.Model(ids, keras.layers.Dense(3)(x))
        model.compile(keras.optimizers.SGD(0.1), "mse")
        return model

    rng = np.random.default_rng(1)
    x = rng.integers(0, 10, (4, 32)).astype("int32")
    y = rng.normal(size=(4, 32, 3)).astype("float32")
    single = build()
    weights = single.get_weights()
    mesh = keras.distribution.DeviceMesh(
        (1, 2, 4),
        ["batch", "model", "sequence"],
        keras.distribution.list_devices(),
    )
    layouts = ka.distribution.layout_map(mesh)
    tensor = keras.distribution.ModelParallel(
        layout_map=layouts, batch_dim_name="batch"
    )
    context = ka.distribution.ContextParallel(mesh, heads_axis="model")
    with tensor.scope():
        sharded = build()
        sharded.set_weights(weights)
        with context:
            loss = sharded.train_on_batch(x, y)
    single_loss = single.train_on_batch(x, y)
    difference = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(
            single.get_weights(), sharded.get_weights(), strict=True
        )
    )
    report["ModelParallel and ContextParallel"] = [
        abs(float(loss) - float(single_loss)),
        difference,
    ]


def _layer_checks(report, context, compare, rng):
    """Each multi-head layer called in the scope and outside it: the same
    loss, and the same gradients of its weights and input."""
    x = rng.normal(size=(2, 32, 16)).astype("float32")
    mask = np.ones((2, 32), bool)
    mask[1, 20:] = False
    layers = {
        "MultiHeadAttention": ka.MultiHeadAttention(4, 8, chunk_size=8),
        "GroupedQueryAttention": ka.GroupedQueryAttention(
            head_dim=8, num_query_heads=4, num_key_value_heads=2
        ),
        # Sinks correct the ring's output through its log-sum-exp.
        "MultiHeadAttention with sinks": ka.MultiHeadAttention(
            4, 8, chunk_size=8, use_sinks=True
        ),
        "GroupedQueryAttention with sinks": ka.GroupedQueryAttention(
            head_dim=8, num_query_heads=4, num_key_value_heads=2, use_sinks=True
        ),
        "MultiHeadLatentAttention": ka.MultiHeadLatentAttention(
            num_heads=4,
            kv_lora_rank=8,
            qk_nope_head_dim=4,
            qk_rope_head_dim=2,
            v_head_dim=4,
        ),
        "MultiHeadLatentAttention with sinks": ka.MultiHeadLatentAttention(
            num_heads=4,
            kv_lora_rank=8,
            qk_nope_head_dim=4,
            qk_rope_head_dim=2,
            v_head_dim=4,
            use_sinks=True,
        ),
    }
    plans = []
    original = ka.ops.plan.plan_attention

    def counting(*args, **kwargs):
        plans.append(original(*args, **kwargs))
        return plans[-1]

    ka.ops.plan.plan_attention = counting
    for name, layer in layers.items():
        one_input = name.startswith("MultiHeadLatentAttention")
        args = (x,) if one_input else (x, x)
        kwargs = {"use_causal_mask": True}
        if not one_input:
            kwargs.update(query_mask=mask, value_mask=mask)
        layer(*args, **kwargs)
        weights = [v.value for v in layer.trainable_variables]

        def call(w, inputs, _, layer=layer, kwargs=kwargs, one=one_input):
            args = (inputs,) if one else (inputs, inputs)
            out, _ = layer.stateless_call(w, [], *args, **kwargs)
            return out

        plans.clear()
        compare(name, call, call, (weights, x, x), context)
        # One plan per trace of the layer's call: the one-device step's,
        # then the ring's (the forward is traced once for its gradient).
        report[name + ": plans"] = [p.path for p in plans]
    ka.ops.plan.plan_attention = original


@pytest.mark.heavy
@pytest.mark.skipif(not JAX, reason="runs in the JAX lane")
def test_the_ring_on_eight_devices_equals_one_device():
    env = processes.environment(
        KERAS_BACKEND="jax",
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
    )
    code = "from tests.ops import test_ring; test_ring.ring_checks()"
    done = processes.run_python(["-c", code], env=env)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    checked = [k for k in report if not k.endswith(("permutes", ": plans"))]
    assert len(checked) == 12, report
    for name in checked:
        loss, grads = report[name]
        assert loss < 1e-5 and grads < 1e-4, (name, report[name])
    # Each layer call was planned once, on one device and in the ring.
    for name in [k for k in report if k.endswith(": plans")]:
        assert report[name][-1] == "ring" and len(report[name]) == 2, (
            name,
            report[name],
        )
    # The layers and flex_attention ran the ring: their programs pass the
    # key/value blocks between devices.
    assert all(v for k, v in report.items() if k.endswith("permutes")), report
