"""The base of the mods (private module): `Mod`, a mod of plain values
with a config, and `TensorMod`, a mod of one call's tensors."""

import copy

import keras


def register(cls):
    return keras.saving.register_keras_serializable(package="keras_attention")(
        cls
    )


def positive_integer(value, name):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(
            f"Expected `{name}` to be a positive integer. Received: "
            f"{name}={value!r}"
        )
    return value


def with_scalars(mod, convert):
    """`mod.with_scalars(convert)` (`Mod.with_scalars`), or a user's own
    function as it is."""
    method = getattr(mod, "with_scalars", None)
    return mod if method is None else method(convert)


class Mod:
    """Base of the mods: a config of plain values, no tensors.

    `limits` is `(left, right)` for a mask mod that is a band of positions
    (query `i` sees keys `i - left <= j <= i + right`, `None` for an open
    side), which the chunked paths read to skip whole blocks; `None` for
    any other mod.
    """

    tensors = ()
    limits = None
    holds_tensors = False
    #: The attributes that are plain numbers entering only the mod's
    #: arithmetic, never its Python control flow (`with_scalars`).
    scalars = ()

    def with_scalars(self, convert):
        """This mod with each plain number of its `scalars` as
        `convert(number)`; `None` and tensors are kept.

        PyTorch's compiled FlexAttention guards on a Python number that a
        mod holds and compiles again for each new value (8 times, then it
        runs uncompiled, 20x slower); a tensor it takes as an input.
        """
        numbers = {}
        for name in self.scalars:
            value = getattr(self, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                numbers[name] = convert(value)
        if not numbers:
            return self
        mod = copy.copy(self)
        for name, value in numbers.items():
            setattr(mod, name, value)
        return mod

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __eq__(self, other):
        return type(self) is type(other) and (
            self.get_config() == other.get_config()
        )

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class TensorMod(Mod):
    """A mod of per-call tensors: usable in calls, not saved in configs."""

    holds_tensors = True

    def get_config(self):
        raise TypeError(
            f"`{type(self).__name__}` holds tensors of one call and has no "
            "config: pass it to the layer's call, not its constructor"
        )

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"{type(self).__name__}(...)"
