"""visualize/plots.py: matplotlib heatmaps of NumPy weights."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from keras_attention import visualize  # noqa: E402

pytestmark = pytest.mark.backend_independent

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _read_png(path):
    import matplotlib.image

    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    return matplotlib.image.imread(path)


def _tick_texts(labels):
    return [label.get_text() for label in labels]


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
