"""The migration guides in docs/migration run, and their ports are exact.

Every `python` block of every guide is executed (blocks labelled
`python old` show the retired APIs and are not). A block preceded by
`<!-- check: NAME -->` ports trained weights or behaviour from an old
layer; `CHECKS[NAME]` re-implements that old layer's formula in NumPy
(from the old packages' source) and compares it with the variables the
block leaves behind, so a guide whose mapping is wrong fails here.
"""

import pathlib
import re

import numpy as np
import pytest

# Checks the guides, not a backend: the TensorFlow lane runs it.
pytestmark = pytest.mark.backend_independent

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE_DIR = ROOT / "docs" / "migration"
GUIDES = (
    "keras-self-attention.md",
    "keras-multi-head.md",
    "attention-package.md",
    "tfa-seq2seq.md",
    "seed-self-attention.md",
    "keras-layers.md",
)
NEW = "python"
OLD = "python old"
_FENCE = re.compile(
    r"^(?:<!-- check: (?P<check>\w+) -->\n)?"
    r"```(?P<info>[^\n`]*)\n(?P<code>.*?)^```$",
    flags=re.M | re.S,
)
_TABLE = re.compile(r"^\|.*\|\n\|[-| :]+\|$", flags=re.M)


def _blocks(guide):
    path = GUIDE_DIR / guide
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [
        {
            "guide": guide,
            "line": text.count("\n", 0, m.start("code")) + 1,
            "info": m.group("info").strip(),
            "code": m.group("code"),
            "check": m.group("check"),
        }
        for m in _FENCE.finditer(text)
    ]


BLOCKS = [block for guide in GUIDES for block in _blocks(guide)]
RUNNABLE = [block for block in BLOCKS if block["info"] == NEW]
CHECKED = [block for block in BLOCKS if block["check"]]
_NAMESPACES = {}


def _run(block):
    """Executes a block once (the numeric checks reuse its variables)."""
    key = (block["guide"], block["line"])
    if key not in _NAMESPACES:
        namespace = {"__name__": f"migration_{block['line']}"}
        code = compile(
            block["code"], f"{block['guide']}:{block['line']}", "exec"
        )
        exec(code, namespace)
        _NAMESPACES[key] = namespace
    return _NAMESPACES[key]


def _id(block):
    return f"{block['guide']}:{block['line']}"


# The doc set.


def test_every_guide_exists_and_is_linked_from_the_index():
    index = (GUIDE_DIR / "README.md").read_text(encoding="utf-8")
    for guide in GUIDES:
        assert (GUIDE_DIR / guide).exists(), guide
        assert f"]({guide})" in index, f"README.md does not link {guide}"


@pytest.mark.parametrize("guide", GUIDES)
def test_guide_has_old_code_new_code_and_a_table(guide):
    blocks = _blocks(guide)
    infos = [block["info"] for block in blocks]
    assert OLD in infos, f"{guide} shows no old code"
    assert NEW in infos, f"{guide} has no runnable new code"
    text = (GUIDE_DIR / guide).read_text(encoding="utf-8")
    assert _TABLE.search(text), f"{guide} has no argument table"
    assert "## Not carried over" in text, f"{guide} lists no gaps"


@pytest.mark.parametrize("guide", GUIDES)
def test_python_blocks_are_labelled_new_or_old(guide):
    for block in _blocks(guide):
        if block["info"].startswith("py"):
            assert block["info"] in (NEW, OLD), _id(block)
        if block["info"] == OLD:
            # New code labelled old would silently never run.
            assert "import keras_attention" not in block["code"], _id(block)


def test_every_check_marker_has_a_reference():
    markers = [block["check"] for block in CHECKED]
    assert sorted(markers) == sorted(CHECKS), markers
    for block in CHECKED:
        assert block["info"] == NEW, _id(block)


@pytest.mark.parametrize("block", RUNNABLE, ids=_id)
def test_new_code_block_runs(block):
    _run(block)


@pytest.mark.parametrize("block", CHECKED, ids=lambda block: block["check"])
def test_port_reproduces_the_old_formula(block):
    assert block["check"] in CHECKS, f"no NumPy reference for {_id(block)}"
    CHECKS[block["check"]](_run(block))


# NumPy references of the old layers.


def _close(actual, expected):
    np.testing.assert_allclose(
        np.asarray(actual, dtype="float64"), expected, rtol=1e-5, atol=1e-5
    )


def _softmax(e):
    e = np.exp(e - e.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _f64(*arrays):
    return [np.asarray(a, dtype="float64") for a in arrays]


def _seq_self_attention(
    x, Wt, Wx, bh, Wa, ba, activation=None, valid=None, window=None
):
    """keras-self-attention's `SeqSelfAttention`, additive (later releases)."""
    x, Wt, Wx, bh, Wa, ba = _f64(x, Wt, Wx, bh, Wa, ba)
    h = np.tanh((x @ Wt)[:, :, None] + (x @ Wx)[:, None] + bh)
    e = (h @ Wa)[..., 0] + ba[0]
    return _seq_self_attention_tail(x, e, activation, valid, window)


def _seq_self_attention_tail(x, e, activation=None, valid=None, window=None):
    if activation is not None:
        e = activation(e)
    if window is not None:
        e = e - 10000.0 * (1.0 - window)
    if valid is not None:
        m = valid.astype("float64")
        # Only (padding, padding) pairs are penalised.
        e = e - 10000.0 * ((1.0 - m[:, :, None]) * (1.0 - m[:, None, :]))
    a = _softmax(e)
    return a @ x, a


def _window(length, width, history_only):
    """Which keys each query may see, one position at a time."""
    allowed = np.zeros((length, length))
    for t in range(length):
        first = t - (width - 1 if history_only else width // 2)
        for key in range(first, first + width):
            if 0 <= key < length:
                allowed[t, key] = 1.0
    return allowed


def check_seq_self_attention_weights(ns):
    expected, weights = _seq_self_attention(
        ns["x"], ns["Wt"], ns["Wx"], ns["bh"], ns["Wa"], ns["ba"]
    )
    _close(ns["output"], expected)
    _close(ns["weights"], weights)


def check_seq_self_attention_multiplicative(ns):
    x, Wa = _f64(ns["x"], ns["Wa"])
    expected, _ = _seq_self_attention_tail(x, x @ Wa @ x.transpose(0, 2, 1))
    _close(ns["output"], expected)


def check_seq_self_attention_masks(ns):
    Wt, Wx, v, bh = ns["score"].get_weights()
    x, valid = ns["x"], ns["valid"]
    old, _ = _seq_self_attention(
        x, Wt, Wx, bh, v[:, None], np.zeros(1), valid=valid
    )
    _close(ns["output_old_rule"], old)
    # The recommended masks: padded keys out, padded queries zero.
    x64, Wt, Wx, v, bh = _f64(x, Wt, Wx, v, bh)
    h = np.tanh((x64 @ Wt)[:, :, None] + (x64 @ Wx)[:, None] + bh)
    e = np.where(valid[:, None, :], h @ v, -np.inf)
    expected = (_softmax(e) @ x64) * valid[:, :, None]
    _close(ns["output"], expected)


def check_seq_self_attention_local(ns):
    x = np.asarray(ns["x"], dtype="float64")
    (kernel,) = ns["layer"].get_weights()
    e = x @ np.asarray(kernel, dtype="float64") @ x.transpose(0, 2, 1)
    length = x.shape[1]
    _, weights = _seq_self_attention_tail(
        x, e, window=_window(length, 3, history_only=False)
    )
    _close(ns["weights"], weights)
    history, _ = _seq_self_attention_tail(
        x, e, window=_window(length, 3, history_only=True)
    )
    _close(ns["history"], history)
    # history_only without a width: the old layer used a width of 1e9.
    causal, _ = _seq_self_attention_tail(
        x, e, window=_window(length, length + 1, history_only=True)
    )
    _close(ns["causal"], causal)


def check_seq_self_attention_activation(ns):
    expected, _ = _seq_self_attention(
        ns["x"],
        ns["Wt"],
        ns["Wx"],
        ns["bh"],
        ns["Wa"],
        ns["ba"],
        activation=_sigmoid,
    )
    _close(ns["output"], expected)
    # b_a matters once there is an activation: the guide did not drop it.
    without_ba, _ = _seq_self_attention(
        ns["x"],
        ns["Wt"],
        ns["Wx"],
        ns["bh"],
        ns["Wa"],
        np.zeros(1),
        activation=_sigmoid,
    )
    assert np.abs(without_ba - expected).max() > 1e-3


def check_seq_self_attention_regularizer(ns):
    x = np.asarray(ns["x"], dtype="float64")
    (kernel,) = ns["layer"].get_weights()
    e = x @ np.asarray(kernel, dtype="float64") @ x.transpose(0, 2, 1)
    expected, a = _seq_self_attention_tail(x, e)
    _close(ns["output"], expected)
    # keras-self-attention's _attention_regularizer.
    gram = a @ a.transpose(0, 2, 1) - np.eye(a.shape[-1])
    penalty = 1e-4 * np.sum(np.square(gram)) / a.shape[0]
    _close(ns["penalty"], penalty)


def check_seq_weighted_attention(ns):
    x = np.asarray(ns["embedded"], dtype="float64")
    W = np.asarray(ns["W"], dtype="float64")
    mask = (ns["ids"] != 0).astype("float64")
    b = 0.37  # any bias: the old layer's b cancels
    logits = (x @ W)[..., 0] + b
    ai = np.exp(logits - logits.max(axis=-1, keepdims=True)) * mask
    a = ai / (ai.sum(axis=1, keepdims=True) + 1e-7)
    _close(ns["weight_values"], a)
    _close(ns["pooled_values"], np.sum(x * a[..., None], axis=1))


def check_scaled_dot_product_attention(ns):
    query, key, value = _f64(ns["query"], ns["key"], ns["value"])
    e = query @ key.transpose(0, 2, 1) / np.sqrt(query.shape[-1])
    length = e.shape[-1]
    upper = np.arange(length)[None, :] > np.arange(length)[:, None]
    e = e - 10000.0 * upper  # history_only
    e = e - 10000.0 * (1.0 - ns["key_valid"][:, None, :])  # key mask
    a = _softmax(e)
    _close(ns["a"], a)
    _close(ns["y"], a @ value)


def check_multi_head_weights(ns):
    """keras-multi-head's `MultiHeadAttention(activation=None)`."""
    query, key, value = _f64(ns["query"], ns["key"], ns["value"])
    Wq, bq, Wk, bk, Wv, bv, Wo, bo = _f64(*ns["old_weights"])
    heads = 4

    def split(x):  # _reshape_to_batches
        b, t, f = x.shape
        return x.reshape(b, t, heads, f // heads).transpose(0, 2, 1, 3)

    q, k, v = (
        split(query @ Wq + bq),
        split(key @ Wk + bk),
        split(value @ Wv + bv),
    )
    a = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]))
    y = (
        (a @ v)
        .transpose(0, 2, 1, 3)
        .reshape(query.shape[0], query.shape[1], -1)
    )
    _close(ns["output"], y @ Wo + bo)


def _attention_package(h_s, score, w_c):
    h_t = h_s[:, -1, :]
    alpha = _softmax(score)
    context = np.einsum("bt,btd->bd", alpha, h_s)
    return np.tanh(np.concatenate([context, h_t], axis=-1) @ w_c), alpha


def check_attention_package_luong(ns):
    h_s, luong_w, w_c = _f64(ns["h_s"], ns["luong_w"], ns["w_c"])
    score = np.einsum("bd,btd->bt", h_s[:, -1, :], h_s @ luong_w)
    output, alpha = _attention_package(h_s, score, w_c)
    _close(ns["output"], output)
    _close(ns["alpha"], alpha)


def check_attention_package_bahdanau(ns):
    h_s, v, w1, w2, w_c = _f64(
        ns["h_s"], ns["v"], ns["w1"], ns["w2"], ns["w_c"]
    )
    hidden = np.tanh((h_s[:, -1, :] @ w1)[:, None, :] + h_s @ w2)
    output, _ = _attention_package(h_s, (hidden @ v)[..., 0], w_c)
    _close(ns["output"], output)


def check_seed_self_attention(ns):
    """The FlyAI article's `SelfAttention.call`, functional mode."""
    hidden, W1, W2 = _f64(ns["hidden"], ns["W1"], ns["W2"])
    batch, _, features = hidden.shape
    scores = np.tanh(W1[None] @ hidden.transpose(0, 2, 1))  # (B, size, S)
    A = _softmax(W2[None] @ scores)  # (B, hops, S)
    _close(ns["A"], A)
    _close(ns["embedding"], (A @ hidden).reshape(batch, -1))
    gram = A @ A.transpose(0, 2, 1) - np.eye(A.shape[1])
    snippet = 0.1 * np.sqrt(np.sum(np.square(gram)))
    _close(ns["snippet_penalty"], snippet)
    ours = 0.1 * np.mean(np.sum(np.square(gram), axis=(1, 2)))
    _close(ns["penalty"], ours)
    # The conversion the guide states.
    _close(snippet, 0.1 * np.sqrt(batch * ours / 0.1))
    assert features == 10


def _tfa_bahdanau(query, memory, mask, query_kernel, memory_kernel, v):
    keys = memory @ memory_kernel
    score = np.tanh(keys + (query @ query_kernel)[:, None, :]) @ v
    return _tfa_attend(score, memory, mask)


def _tfa_attend(score, memory, mask):
    """tfa: `-inf` on padded scores, padded memory rows zeroed."""
    alignments = _softmax(np.where(mask, score, -np.inf))
    values = memory * mask[..., None]
    return np.einsum("bt,btd->bd", alignments, values), alignments


def check_tfa_mechanisms(ns):
    query, memory = _f64(ns["query"], ns["memory"])
    mask = ns["memory_mask"]
    context, alignments = _tfa_bahdanau(
        query,
        memory,
        mask,
        *_f64(ns["query_kernel"], ns["memory_kernel"], ns["attention_v"]),
    )
    _close(ns["context"], context)
    _close(ns["alignments"], alignments)
    # _luong_score with scale: g * query . (memory W).
    keys = memory @ np.asarray(ns["luong_memory_kernel"], dtype="float64")
    score = float(ns["attention_g"]) * np.einsum("bd,btd->bt", query, keys)
    context, alignments = _tfa_attend(score, memory, mask)
    _close(ns["luong_context"], context)
    _close(ns["luong_alignments"], alignments)


def _gru(x, h, kernel, recurrent_kernel, bias):
    """tf.keras GRUCell (reset_after=True, sigmoid gates)."""
    n = h.shape[-1]
    from_x = x @ kernel + bias[0]
    from_h = h @ recurrent_kernel + bias[1]
    z = _sigmoid(from_x[:, :n] + from_h[:, :n])
    r = _sigmoid(from_x[:, n : 2 * n] + from_h[:, n : 2 * n])
    candidate = np.tanh(from_x[:, 2 * n :] + r * from_h[:, 2 * n :])
    return z * h + (1.0 - z) * candidate


def check_tfa_attention_wrapper(ns):
    """tfa AttentionWrapper(attention_layer_size=None), step by step."""
    memory, targets, state = _f64(
        ns["memory"], ns["targets"], ns["encoder_state"]
    )
    mask = ns["memory_mask"]
    gru = _f64(*ns["gru"])
    bahdanau = _f64(*ns["bahdanau"])
    attention = np.zeros((memory.shape[0], memory.shape[-1]))
    outputs, history = [], []
    for t in range(targets.shape[1]):
        cell_input = np.concatenate([targets[:, t], attention], axis=-1)
        state = _gru(cell_input, state, *gru)
        attention, alignments = _tfa_bahdanau(state, memory, mask, *bahdanau)
        outputs.append(attention)
        history.append(alignments)
    _close(ns["outputs"], np.stack(outputs, axis=1))
    _close(ns["alignments"], np.stack(history, axis=1))


def check_tfa_sequence_loss(ns):
    logits = np.asarray(ns["logits"], dtype="float64")
    targets, weights = ns["targets"], ns["weights"]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    crossentropy = -np.take_along_axis(log_probs, targets[..., None], -1)[
        ..., 0
    ]
    _close(ns["loss"], np.sum(crossentropy * weights) / np.sum(weights))


def check_multi_head_wrapper(ns):
    """keras-multi-head's `MultiHead(Dense(3), 2, reg_index=0, ...)`."""
    x = np.asarray(ns["inputs"], dtype="float64")
    k1, b1, k2, b2 = _f64(*ns["old_weights"])
    _close(ns["output"], np.stack([x @ k1 + b1, x @ k2 + b2], axis=-1))
    # MultiHead.build: factor · Σ (W Wᵀ − I)², rows the flattened kernels.
    w = np.stack([k1.ravel(), k2.ravel()])
    _close(ns["penalty"], 0.1 * np.sum(np.square(w @ w.T - np.eye(2))))


def check_multi_head_hidden_dim(ns):
    """`MultiHead(Dense(3), 2, hidden_dim=4)`: `x W_i + b_i`, then copy i."""
    x = np.asarray(ns["inputs"], dtype="float64")
    w, b, k1, b1, k2, b2 = _f64(*ns["old_weights"])
    heads = [(x @ w + b)[:, 4 * i : 4 * i + 4] for i in range(2)]
    expected = [heads[0] @ k1 + b1, heads[1] @ k2 + b2]
    _close(ns["output"], np.stack(expected, axis=-1))


CHECKS = {
    name[len("check_") :]: function
    for name, function in list(globals().items())
    if name.startswith("check_")
}
