"""Eager JAX calls compiled once (private module).

On JAX every operation called outside a trace is compiled for its shapes
on its first call: a layer call at a new length compiled dozens of small
programs, about 30 ms each on a CPU (a fused attention call at a new
length took 0.97 s eager against 0.16 s through one `jax.jit`). Two
wrappers send eager calls through one compiled program instead; inside a
trace (`jax.jit`, `jax.grad`, Keras's compiled functions) both call the
function as it is, and on the other backends they are not involved.

`compiled_when_eager` wraps a pure function of tensors and plain values
(the package's kernels and the rotation): its plain arguments are the
key, its arrays the arguments of the compiled function.

`compiled_once` is the block kernel's:

JAX caches a loop (`fori_loop`, `scan`, `map`) by the identity of its
body, and the block kernel's bodies are closures made on each call (they
read the call's blocks and mods): outside `jax.jit`, every eager call
traced and compiled its loops again (a repeated chunked
`MultiHeadAttention` call took 1.5 s against 0.007 s dense). An eager
call is run instead through one `jax.jit` per configuration of the
kernel: the `Spec`'s plain values and mods are the key, its tensors the
arguments, so a second call of the same configuration and shapes
compiles nothing.

Only this package's mods whose config is their whole state are keys
(`Mod`s equal by their config, and their `and_masks` / `or_masks`); a
spec with a mod that holds tensors, with a function of the user's (whose
closure may change between calls) or with a scale or limit that is a
tensor runs as before. Inside a trace (`jax.jit`, `jax.grad`, Keras's
compiled functions) nothing changes: the outer trace caches the whole.
"""

import collections
import functools
import numbers

import keras

from keras_attention.ops._mod_base import Mod
from keras_attention.ops.mask_mods import MaskCombination

# The spec's tensors: arguments of the compiled function, not its key.
_TENSORS = ("query_mask", "key_mask", "kinds", "scales")
# Compiled functions kept: one per configuration, the oldest dropped.
_SIZE = 64
_compiled = collections.OrderedDict()


# What a part of a spec gives where it cannot be a key.
_NO_KEY = object()


def _is_combination(mod):
    """Whether `mod` is an `and_masks` / `or_masks` combination."""
    return isinstance(mod, MaskCombination)


def _no_key(parts):
    return any(part is _NO_KEY for part in parts)


def _mod_key(mod):
    """A hashable stand-in of `mod`, equal for mods that act alike, or
    `_NO_KEY`."""
    if mod is None:
        return None
    if _is_combination(mod):
        parts = tuple(map(_mod_key, mod.mask_mods))
        return _NO_KEY if _no_key(parts) else ("combination", mod.op, parts)
    plain = (
        isinstance(mod, Mod)
        and type(mod).__module__.startswith("keras_attention.")
        and type(mod).__hash__ is Mod.__hash__
        and not mod.holds_tensors
        and not tuple(mod.tensors)
    )
    if not plain:
        return _NO_KEY
    try:
        hash(mod), mod.get_config()
    except TypeError:
        return _NO_KEY
    return mod


def _plain(value):
    if value is None or isinstance(value, numbers.Number):
        return value
    if isinstance(value, tuple):
        parts = tuple(map(_plain, value))
        return _NO_KEY if _no_key(parts) else parts
    return _NO_KEY


def _key(spec):
    parts = (
        _plain(spec.scale),
        _plain(spec.sizes),
        spec.additive,
        _plain(spec.limits),
        _mod_key(spec.score_mod),
        _mod_key(spec.mask_mod),
    )
    return _NO_KEY if _no_key(parts) else parts


def compiled_once(attend, tensors, spec):
    """`attend(tensors, spec)`, through a `jax.jit` kept per configuration
    where this is an eager JAX call whose spec can be a key."""
    if keras.backend.backend() != "jax":
        return attend(tensors, spec)
    import jax

    arrays = {name: getattr(spec, name) for name in _TENSORS}
    leaves = jax.tree_util.tree_leaves((tensors, arrays))
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        return attend(tensors, spec)
    key = _key(spec)
    if key is _NO_KEY:
        return attend(tensors, spec)
    run = _compiled.get(key)
    if run is None:
        static = spec._replace(**{name: None for name in _TENSORS})

        def traced(tensors, arrays):
            return attend(tensors, static._replace(**arrays))

        run = _compiled[key] = jax.jit(traced)
        if len(_compiled) > _SIZE:
            _compiled.popitem(last=False)
    _compiled.move_to_end(key)
    return run(list(tensors), arrays)


def _is_static(value):
    """Whether `value` is part of the key, not a tensor: a plain value, or
    one of this package's mods that are equal by their config."""
    if value is None or isinstance(value, (bool, numbers.Number, str)):
        return not hasattr(value, "shape")
    if isinstance(value, tuple):
        return all(map(_is_static, value))
    return (isinstance(value, Mod) or _is_combination(value)) and (
        _mod_key(value) is not _NO_KEY
    )


def _static_key(value):
    """`value` with the type of each plain part beside it (1, 1.0 and True
    are equal but are not the same argument)."""
    if isinstance(value, tuple):
        return tuple(map(_static_key, value))
    if isinstance(value, Mod) or _is_combination(value):
        return _mod_key(value)
    return (type(value), value)


def compiled_when_eager(function):
    """`function`, pure, run on eager JAX through a `jax.jit` per key.

    The key is which arguments are plain values (None, numbers, strings,
    tuples of them, this package's mods that are equal by their config)
    and what they are; the arrays (JAX's or NumPy's) are
    the compiled function's arguments. A call with anything else (a Keras
    variable, a tracer, a symbolic tensor) calls `function` itself; on
    another backend `function` is returned as it is.
    """
    if keras.backend.backend() != "jax":
        # The backend is fixed when the package is imported.
        return function
    kept = collections.OrderedDict()

    @functools.wraps(function)
    def run(*args, **kwargs):
        import jax
        import numpy as np

        named = sorted(kwargs.items())
        static, dynamic = [], []
        for where, value in [*enumerate(args), *named]:
            if _is_static(value):
                static.append((where, value))
            elif isinstance(value, (np.ndarray, np.generic, jax.Array)) and (
                not isinstance(value, jax.core.Tracer)
            ):
                dynamic.append(where)
            else:
                return function(*args, **kwargs)
        key = (
            len(args),
            tuple((where, _static_key(value)) for where, value in static),
            tuple(dynamic),
        )
        compiled = kept.get(key)
        if compiled is None:
            plain, count = dict(static), len(args)
            names = [name for name, _ in named]

            def traced(arrays):
                given = {**plain, **dict(zip(dynamic, arrays, strict=True))}
                return function(
                    *(given[i] for i in range(count)),
                    **{name: given[name] for name in names},
                )

            compiled = kept[key] = jax.jit(traced)
            if len(kept) > _SIZE:
                kept.popitem(last=False)
        kept.move_to_end(key)
        values = dict([*enumerate(args), *named])
        return compiled([values[where] for where in dynamic])

    return run
