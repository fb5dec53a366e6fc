"""Where a model attends: weights of every layer, rollout, plots and views.

- `collect_attention(model, inputs)`: one forward pass, every attention
  layer's weights `(batch, heads, query_time, key_time)` by layer path.
- `attention_rollout` and `attention_flow` (Abnar & Zuidema, 2020): the
  layers' weights combined into each output token's share of the inputs.
- `head_view`, `model_view`, `alignment_view`: interactive standalone HTML
  pages (no network, open from disk).
- `save_hop_report`: the sentiment example's hop view and rollout lines.
- `plot_attention`, `plot_attention_grid`: matplotlib heatmaps;
  `attention_html`, `save_attention_html`: tokens highlighted by weight.

matplotlib and networkx are imported only inside the functions that use
them, so importing this package imports neither.

Example:

>>> fig = keras_attention.visualize.plot_attention(
...     [[0.1, 0.7, 0.2]], x_labels=["not", "bad", "film"], title="hop 1"
... )
>>> page = keras_attention.visualize.attention_html(
...     [["not", "bad"]], [[0.4, 0.6]]
... )
>>> page.count("<span")
2
"""

from keras_attention.visualize.collect import AttentionMaps as AttentionMaps
from keras_attention.visualize.collect import (
    collect_attention as collect_attention,
)
from keras_attention.visualize.highlight import HTML_NOTE as HTML_NOTE
from keras_attention.visualize.highlight import attention_html as attention_html
from keras_attention.visualize.highlight import (
    save_attention_html as save_attention_html,
)
from keras_attention.visualize.plots import plot_attention as plot_attention
from keras_attention.visualize.plots import (
    plot_attention_grid as plot_attention_grid,
)
from keras_attention.visualize.reports import save_hop_report as save_hop_report
from keras_attention.visualize.rollout import attention_flow as attention_flow
from keras_attention.visualize.rollout import (
    attention_rollout as attention_rollout,
)
from keras_attention.visualize.views import alignment_view as alignment_view
from keras_attention.visualize.views import head_view as head_view
from keras_attention.visualize.views import model_view as model_view
