"""The encoder-decoder Transformer translator.

`blocks` holds the pre-norm encoder and decoder blocks (`linear_block`
the Gated DeltaNet block of a hybrid decoder-only model), `cell` the decoder
stepped by `keras_attention.seq2seq`'s decoders with its key/value cache,
`model` the `TransformerTranslator` built from them. `keras_attention.models`
re-exports them; they live here, in the library core, so that a saved
model loads after `import keras_attention` alone, as `Translator` does.
"""

from keras_attention.seq2seq.transformer.blocks import (
    TransformerDecoderBlock as TransformerDecoderBlock,
)
from keras_attention.seq2seq.transformer.blocks import (
    TransformerEncoderBlock as TransformerEncoderBlock,
)
from keras_attention.seq2seq.transformer.cell import (
    TransformerDecoderCell as TransformerDecoderCell,
)
from keras_attention.seq2seq.transformer.linear_block import (
    GatedDeltaBlock as GatedDeltaBlock,
)
from keras_attention.seq2seq.transformer.model import (
    TransformerTranslator as TransformerTranslator,
)
