"""Training-side guards: every parameter learns, and no step makes the model NaN.

Two silent failures motivate this module. Fused kernels once gave some parameters zero
gradients while the loss still fell: :func:`assert_gradient_flow` runs one forward/backward
and names every trainable parameter whose gradient is missing, zero or non-finite. And junk
pairs once produced huge gradients that the fp16 scaler's unscale turned to Inf, from which
``clip_grad_norm_`` made a NaN norm and a NaN model: :class:`FiniteStepGuard` checks all
gradients *after unscale and before clipping* with one fused reduction, skips the step when
they are not finite, writes the batch's row ids to a quarantine file that
``spr-data clean --quarantine`` turns into rejects, and stops a run that skips too often.
Needs the ``torch`` extra.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from spr_data.errors import InputError, OutputError, SprDataError
from spr_data.fsio import os_error_message

__all__ = [
    "FiniteStepGuard",
    "GradientFlowError",
    "TrainingDiverged",
    "assert_gradient_flow",
    "check_gradient_flow",
]

log = logging.getLogger("spr_data.train")

OK, MISSING, ZERO, NON_FINITE = "ok", "missing", "zero", "non_finite"
#: a parameter ``allow_unused`` names, without a gradient or with a zero one: not a failure,
#: and not "ok" either (a report that said "ok" hid that it got nothing)
ALLOWED = "allowed"


class GradientFlowError(AssertionError):
    """Trainable parameters that did not receive a finite, non-zero gradient."""


class TrainingDiverged(SprDataError):
    """Too many steps were skipped for non-finite gradients: the run is broken, not unlucky."""


def _names_by_tensor(model: torch.nn.Module) -> dict[int, list[str]]:
    """Every name of each trainable parameter (tied weights have several)."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            names.setdefault(id(p), []).append(name)
    return names


def check_gradient_flow(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module], Any], *,
                        allow_unused: Sequence[str] = ()) -> dict[str, str]:
    """Run ``loss_fn(model)`` (one forward pass that returns a scalar loss) and backward once;
    return, per trainable parameter, ``"ok"``, ``"missing"`` (no gradient: unused or detached),
    ``"zero"`` or ``"non_finite"``. Tied weights appear once, as ``"first (= second)"``.
    ``allow_unused`` names (or ``fnmatch`` patterns) may be missing or zero: ``"allowed"``."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}
    if not params:
        raise InputError(f"{type(model).__name__} has no trainable parameters (all frozen, "
                         "or none): there is no gradient flow to check")
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model)
    loss.backward()
    result = {}
    for key, names in _names_by_tensor(model).items():
        grad = params[key].grad
        if grad is None:
            status = MISSING
        elif not bool(torch.isfinite(grad).all()):
            status = NON_FINITE
        elif not bool(grad.any()):
            status = ZERO
        else:
            status = OK
        allowed = any(fnmatch.fnmatchcase(n, pattern) for n in names for pattern in allow_unused)
        if allowed and status in (MISSING, ZERO):
            status = ALLOWED
        label = names[0] if len(names) == 1 else f"{names[0]} (= {', '.join(names[1:])})"
        result[label] = status
    model.zero_grad(set_to_none=True)
    return result


def assert_gradient_flow(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module], Any], *,
                         allow_unused: Sequence[str] = ()) -> None:
    """Raise :class:`GradientFlowError` naming every parameter without a finite, non-zero
    gradient after one forward/backward — a one-line test in a training repo::

        assert_gradient_flow(model, lambda m: m(**batch).loss)
    """
    flow = check_gradient_flow(model, loss_fn, allow_unused=allow_unused)
    bad = {name: status for name, status in flow.items() if status not in (OK, ALLOWED)}
    if bad:
        lines = "\n".join(f"  {name}: {status}" for name, status in bad.items())
        raise GradientFlowError(f"{len(bad)} of {len(flow)} trainable parameters did not get a "
                                f"finite, non-zero gradient:\n{lines}")


def _norm(grads: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """The gradients' L2 norm, each tensor's taken in ``dtype`` (a fused kernel a tensor)."""
    total: torch.Tensor = torch.linalg.vector_norm(
        torch.stack(torch._foreach_norm(grads, 2.0, dtype=dtype)))
    return total


def _norm64(grads: list[torch.Tensor]) -> torch.Tensor | None:
    """:func:`_norm` in float64, or None where the device cannot (MPS has no float64)."""
    try:
        return _norm(grads, torch.float64)
    except (RuntimeError, TypeError):
        return None


class FiniteStepGuard:
    """Wraps ``optimizer.step()`` for fp32, fp16 with a ``GradScaler`` and bf16::

        guard = FiniteStepGuard(model, optimizer, scaler=scaler, max_norm=1.0,
                                quarantine="quarantine.jsonl")
        for batch in loader:
            loss = model(batch)
            scaler.scale(loss).backward()          # or loss.backward() without a scaler
            guard.step(loss, row_ids=batch["ids"])  # unscale, check, clip, step, update
            optimizer.zero_grad(set_to_none=True)

    ``step`` unscales (with a scaler), then checks every gradient at once (a fused norm per
    tensor and one host sync for the lot); when they are all finite it clips to ``max_norm``
    with the norm it already has and steps. Otherwise it zeroes the gradients, skips the step,
    lets the scaler lower its scale, appends the step, loss, the names of the parameters with
    non-finite gradients and the batch's row ids to ``quarantine`` (JSONL), and logs it. It
    raises :class:`TrainingDiverged` after ``max_consecutive_skips`` skips in a row, or when
    more than ``max_skip_rate`` of the last ``window`` steps were skipped.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
                 scaler: Any = None, max_norm: float | None = None,
                 quarantine: str | Path | None = None, max_consecutive_skips: int = 10,
                 max_skip_rate: float = 0.05, window: int = 1000) -> None:
        if window < 1 or max_consecutive_skips < 1 or not 0 <= max_skip_rate <= 1:
            raise InputError(f"FiniteStepGuard needs window >= 1, max_consecutive_skips >= 1 "
                             f"and max_skip_rate in [0, 1]; got {window}, "
                             f"{max_consecutive_skips}, {max_skip_rate}")
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.max_norm = max_norm
        self.quarantine = Path(quarantine) if quarantine is not None else None
        if self.quarantine is not None:  # found out now, not at the first skip hours in
            try:
                with open(self.quarantine, "a", encoding="utf-8"):
                    pass
            except OSError as exc:
                raise OutputError(os_error_message(exc, self.quarantine, "quarantine path")) \
                    from exc
        self.max_consecutive_skips = max_consecutive_skips
        self.max_skip_rate = max_skip_rate
        self.window = window
        self.steps = 0
        self.skipped = 0
        self.consecutive = 0
        self.last_norm: float | None = None
        self._recent: deque[bool] = deque(maxlen=window)
        self._names = {key: names[0] for key, names in _names_by_tensor(model).items()}

    def _grads(self) -> list[torch.Tensor]:
        return [p.grad for group in self.optimizer.param_groups for p in group["params"]
                if p.grad is not None]

    def step(self, loss: torch.Tensor | float | None = None,
             row_ids: Iterable[int] | torch.Tensor | None = None) -> bool:
        """Check, clip and step; return whether the step was taken."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grads = self._grads()
        # in float32: an fp16 gradient's norm overflows fp16 long before its elements do
        total = _norm(grads, torch.float32) if grads else torch.zeros(())
        norm = float(total)  # the one host sync
        no_float64 = False
        if not math.isfinite(norm) and grads and bool(
                torch.stack([torch.isfinite(g).all() for g in grads]).all()):
            # every element finite, only their float32 norm overflowed (elements past about
            # 1e19; bf16 and fp32 gradients get there): the norm in float64, rarely needed
            wide = _norm64(grads)
            if wide is not None:
                total, norm = wide, float(wide)
            no_float64 = wide is None
        self.steps += 1
        if math.isfinite(norm):
            self.last_norm = norm
            if self.max_norm is not None and grads:
                torch.nn.utils.clip_grads_with_norm_(
                    [p for g in self.optimizer.param_groups for p in g["params"]
                     if p.grad is not None], self.max_norm, total)
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.consecutive = 0
            self._recent.append(False)
            return True
        self._skip(loss, row_ids, no_float64)
        return False

    def _skip(self, loss: torch.Tensor | float | None,
              row_ids: Iterable[int] | torch.Tensor | None, no_float64: bool) -> None:
        bad = [self._names.get(id(p), "?") for g in self.optimizer.param_groups
               for p in g["params"]
               if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.update()  # unscale_ recorded the Inf: the scale goes down
        self.skipped += 1
        self.consecutive += 1
        self._recent.append(True)
        value = float(loss.detach() if isinstance(loss, torch.Tensor) else loss) \
            if loss is not None else None
        ids = ([] if row_ids is None else
               [int(i) for i in (row_ids.reshape(-1).tolist()
                                 if isinstance(row_ids, torch.Tensor) else row_ids)])
        record = {"step": self.steps - 1,
                  "loss": value if value is None or math.isfinite(value) else str(value),
                  "grad_norm": None, "nonfinite_params": bad, "row_ids": ids}
        if self.quarantine is not None:
            with open(self.quarantine, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
        if bad:
            log.warning("step %d skipped: non-finite gradients in %d parameters (%s%s); %d "
                        "rows quarantined%s", record["step"], len(bad), ", ".join(bad[:3]),
                        ", …" if len(bad) > 3 else "", len(ids),
                        f" to {self.quarantine}" if self.quarantine else "")
        else:
            log.warning("step %d skipped: every gradient element is finite, but their norm "
                        "overflows float32%s; %d rows quarantined%s", record["step"],
                        " and this device cannot take it in float64" if no_float64
                        else "", len(ids), f" to {self.quarantine}" if self.quarantine else "")
        if self.consecutive >= self.max_consecutive_skips:
            raise TrainingDiverged(f"{self.consecutive} steps in a row had non-finite "
                                   "gradients; the run is diverging, not meeting a bad batch")
        rate = sum(self._recent) / len(self._recent)
        if len(self._recent) >= min(self.window, 100) and rate > self.max_skip_rate:
            raise TrainingDiverged(f"{rate:.1%} of the last {len(self._recent)} steps were "
                                   f"skipped (limit {self.max_skip_rate:.1%})")

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "skipped": self.skipped, "consecutive": self.consecutive,
                "recent": list(self._recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.skipped = int(state["steps"]), int(state["skipped"])
        self.consecutive = int(state["consecutive"])
        self._recent = deque((bool(x) for x in state["recent"]), maxlen=self.window)
