import numpy as np
import pytest

pytest.importorskip("matplotlib")

from keras_attention import visualize  # noqa: E402
from tests import subprocesses  # noqa: E402

# Checks plots and HTML of NumPy weights, not a backend: TensorFlow lane.
pytestmark = pytest.mark.backend_independent

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _read_png(path):
    import matplotlib.image

    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    return matplotlib.image.imread(path)


def _tick_texts(labels):
    return [label.get_text() for label in labels]


def test_package_imports_without_matplotlib_networkx_or_tfds():
    # Keras itself imports matplotlib when it can, so "not in sys.modules"
    # proves nothing; blocking them makes any import of them by our
    # modules fail instead.
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "sys.modules['tensorflow_datasets'] = None\n"
        "sys.modules['networkx'] = None\n"
        "import keras_attention, keras_attention.data\n"
        "import keras_attention.visualize\n"
        "print('imported')"
    )
    result = subprocesses.run_python(["-c", code])
    assert result.stdout.strip().splitlines()[-1] == "imported"


def test_plot_attention_labels_rows_and_columns(tmp_path):
    weights = np.array([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]])
    fig = visualize.plot_attention(
        weights,
        x_labels=["not", "bad", "<pad>"],
        y_labels=["hop 1", "hop 2"],
        title="example",
    )
    heatmap, colorbar = fig.axes
    assert _tick_texts(heatmap.get_xticklabels()) == ["not", "bad", "<pad>"]
    assert _tick_texts(heatmap.get_yticklabels()) == ["hop 1", "hop 2"]
    assert heatmap.get_title() == "example"
    assert heatmap.get_xticklabels()[0].get_rotation() == 60
    np.testing.assert_allclose(heatmap.images[0].get_array(), weights)
    path = tmp_path / "attention.png"
    fig.savefig(path)
    image = _read_png(path)
    assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50


def test_plot_attention_defaults_and_one_dimensional_weights():
    fig = visualize.plot_attention([0.2, 0.8], x_labels=["a", "b"])
    heatmap = fig.axes[0]
    assert _tick_texts(heatmap.get_yticklabels()) == ["0"]
    assert heatmap.get_title() == ""


def test_plot_attention_draws_into_a_given_axes():
    from matplotlib.figure import Figure

    figure = Figure()
    ax = figure.add_subplot()
    returned = visualize.plot_attention([[1.0, 0.0]], ["a", "b"], ax=ax)
    assert returned is figure
    assert _tick_texts(ax.get_xticklabels()) == ["a", "b"]


def test_mismatched_x_labels_raise_naming_both_shapes():
    with pytest.raises(ValueError, match=r"x_labels.*\(5,\).*\(2, 6\)"):
        visualize.plot_attention(np.ones((2, 6)), x_labels=list("abcde"))


def test_mismatched_y_labels_raise_naming_both_shapes():
    with pytest.raises(ValueError, match=r"y_labels.*\(3,\).*\(2, 6\)"):
        visualize.plot_attention(
            np.ones((2, 6)), x_labels=list("abcdef"), y_labels=list("abc")
        )


@pytest.mark.parametrize("shape", [(2, 3, 4), (0,)])
def test_weights_of_wrong_rank_or_empty_raise(shape):
    with pytest.raises(ValueError, match=r"weights\.shape="):
        visualize.plot_attention(np.ones(shape), x_labels=[])


def test_plot_attention_grid_stacks_sentences_and_saves_png(tmp_path):
    path = tmp_path / "grid.png"
    fig = visualize.plot_attention_grid(
        [np.full((2, 3), 1 / 3), np.array([0.9, 0.1])],
        [["a", "good", "film"], ["not", "bad"]],
        y_labels_list=[["hop 1", "hop 2"], None],
        titles=["label 1", "label 1"],
        path=path,
    )
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 2
    assert _tick_texts(heatmaps[1].get_xticklabels()) == ["not", "bad"]
    assert _tick_texts(heatmaps[0].get_yticklabels()) == ["hop 1", "hop 2"]
    assert [ax.get_title() for ax in heatmaps] == ["label 1", "label 1"]
    assert _read_png(path).shape[0] > 50


def test_plot_attention_grid_without_path_writes_nothing(tmp_path):
    visualize.plot_attention_grid([[0.5, 0.5]], [["a", "b"]])
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"x_labels_list": []}, "x_labels_list"),
        ({"titles": ["a", "b"]}, "titles"),
        ({"y_labels_list": []}, "y_labels_list"),
    ],
)
def test_plot_attention_grid_rejects_mismatched_lists(kwargs, match):
    arguments = {"x_labels_list": [["a", "b"]], **kwargs}
    with pytest.raises(ValueError, match=match):
        visualize.plot_attention_grid([[0.5, 0.5]], **arguments)


def test_plot_attention_grid_rejects_empty_list():
    with pytest.raises(ValueError, match="empty"):
        visualize.plot_attention_grid([], [])


def test_attention_html_escapes_tokens_and_scales_opacity():
    page = visualize.attention_html(
        [["<script>", "a&b", '"q"'], ["fine"]],
        [np.array([0.25, 0.5, 0.25]), [1.0]],
        titles=["<b>label</b>", "second"],
    )
    assert page.startswith("<!DOCTYPE html>")
    assert "<script>" not in page and "<b>" not in page
    assert "&lt;script&gt;" in page
    assert "a&amp;b" in page
    assert "&quot;q&quot;" in page
    assert "&lt;b&gt;label&lt;/b&gt;" in page
    assert page.count('<span class="token"') == 4
    assert page.count('<div class="sentence">') == 2
    assert 'title="0.2500"' in page and 'title="0.5000"' in page
    # Opacity is the weight over the sentence's largest weight.
    assert 'rgba(255, 120, 0, 0.500)">&lt;script&gt;' in page
    assert 'rgba(255, 120, 0, 1.000)">a&amp;b' in page


def test_attention_html_handles_all_zero_weights():
    page = visualize.attention_html([["a", "b"]], [[0.0, 0.0]])
    assert page.count("rgba(255, 120, 0, 0.000)") == 2


def test_attention_html_rejects_multi_hop_weights_with_advice():
    with pytest.raises(ValueError, match="average over the hops"):
        visualize.attention_html([["a", "b"]], [np.ones((2, 2))])


@pytest.mark.parametrize(
    "tokens, weights, titles, match",
    [
        ([["a", "b"]], [[1.0]], None, "2 tokens"),
        ([["a"]], [[1.0], [1.0]], None, "weights_list"),
        ([["a"]], [[1.0]], ["x", "y"], "titles"),
    ],
)
def test_attention_html_rejects_mismatches(tokens, weights, titles, match):
    with pytest.raises(ValueError, match=match):
        visualize.attention_html(tokens, weights, titles=titles)


def test_save_attention_html_writes_the_page(tmp_path):
    path = tmp_path / "attention.html"
    visualize.save_attention_html(path, [["ünïcode"]], [[1.0]])
    text = path.read_text(encoding="utf-8")
    assert text == visualize.attention_html([["ünïcode"]], [[1.0]])


def test_plot_attention_grid_shares_one_labelled_colour_scale():
    fig = visualize.plot_attention_grid(
        [np.array([[0.2, 0.8]]), np.array([[0.3, 0.3, 0.4]])],
        [["a", "b"], ["c", "d", "e"]],
        colorbar_label="weight per hop",
    )
    heatmaps = [ax for ax in fig.axes if ax.images]
    # Both panels map 0.8 (the top weight of either) to the top colour.
    limits = [ax.images[0].get_clim() for ax in heatmaps]
    np.testing.assert_allclose(limits, [(0.0, 0.8)] * 2)
    bars = [ax for ax in fig.axes if not ax.images]
    assert len(bars) == 1
    assert bars[0].get_ylabel() == "weight per hop"


def test_plot_attention_labels_its_colour_bar():
    fig = visualize.plot_attention([[0.5, 0.5]], ["a", "b"])
    (bar,) = [ax for ax in fig.axes if not ax.images]
    assert bar.get_ylabel() == "attention weight"
    fig = visualize.plot_attention([[0.5, 0.5]], ["a", "b"], colorbar=False)
    assert len(fig.axes) == 1


def test_attention_html_says_what_the_colours_mean():
    page = visualize.attention_html(
        [["a"]], [[1.0]], note="Averaged over the 3 hops & more."
    )
    assert visualize.HTML_NOTE in page
    assert "Averaged over the 3 hops &amp; more." in page
