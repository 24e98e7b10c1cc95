"""Small argument checkers shared by the generator, the task geometry and the schema.

Convention: a value of the wrong *type* raises :class:`TypeError`; a value of the right
type but outside its allowed range raises :class:`ValueError`. Every message names the
offending argument and repeats the value received.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence

import numpy as np

__all__ = ["check_int", "check_nonnegative_real", "check_mode_weights"]


def check_int(name: str, value, minimum: int, maximum: Optional[int] = None) -> int:
    """Return ``value`` as a Python int after checking ``minimum <= value <= maximum``.

    Raises:
        TypeError: ``value`` is not an integer (``bool`` is rejected; NumPy integers are accepted).
        ValueError: ``value`` is out of range.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_nonnegative_real(name: str, value) -> float:
    """Return ``value`` as a float after checking it is a finite real number ``>= 0``.

    Raises:
        TypeError: not a real number (``bool`` is rejected).
        ValueError: negative, NaN or infinite.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def check_mode_weights(mode_weights: Optional[Sequence[float]], num_modes: int, task_name: str) -> Optional[np.ndarray]:
    """Validate and normalise ``mode_weights``.

    Args:
        mode_weights: ``None`` (balanced modes) or one non-negative finite weight per mode.
        num_modes: total number of modes of the task.
        task_name: used in error messages only.

    Returns:
        ``None`` or a float64 array of shape ``(num_modes,)`` summing to 1.

    Raises:
        TypeError: not a 1-D sequence of real numbers.
        ValueError: wrong length, a negative/NaN/infinite weight, or all weights zero.
    """
    if mode_weights is None:
        return None
    if isinstance(mode_weights, (str, bytes)):
        raise TypeError(f"mode_weights must be a sequence of numbers, got {mode_weights!r}")
    try:
        weights = np.asarray(mode_weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"mode_weights must be a sequence of numbers, got {mode_weights!r}") from exc
    if weights.ndim != 1:
        raise ValueError(f"mode_weights must be one-dimensional, got shape {weights.shape}")
    if weights.shape[0] != num_modes:
        raise ValueError(
            f"mode_weights has {weights.shape[0]} entries but task {task_name!r} has {num_modes} modes: "
            f"give exactly one weight per mode"
        )
    if not np.all(np.isfinite(weights)):
        raise ValueError(f"mode_weights must be finite, got {weights.tolist()}")
    if np.any(weights < 0):
        raise ValueError(f"mode_weights must be >= 0, got {weights.tolist()}")
    total = weights.sum()
    if total <= 0:
        raise ValueError(f"mode_weights must not all be zero, got {weights.tolist()}")
    return weights / total
