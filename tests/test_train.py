"""Training guards: the arbiter names parameters that do not learn; the guard stops the NaN
chain and sends the poisoned rows back to ``clean``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from spr_data.outdir import REJECTS_DIR  # noqa: E402
from spr_data.train import (  # noqa: E402
    FiniteStepGuard,
    GradientFlowError,
    TrainingDiverged,
    assert_gradient_flow,
    check_gradient_flow,
)


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.hidden = nn.Linear(16, 16)
        self.out = nn.Linear(16, 50, bias=False)
        self.out.weight = self.embed.weight  # tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(self.embed(x))))


def lm_loss(model: nn.Module) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randint(0, 50, (4, 7))
    return nn.functional.cross_entropy(model(x).reshape(-1, 50), x.reshape(-1))


def test_a_healthy_model_passes_and_tied_weights_are_named_together():
    torch.manual_seed(0)
    flow = check_gradient_flow(Tiny(), lm_loss)
    assert flow == {"embed.weight (= out.weight)": "ok", "hidden.weight": "ok",
                    "hidden.bias": "ok"}
    assert_gradient_flow(Tiny(), lm_loss)


def test_a_parameter_detached_in_forward_is_missing():
    class Detached(Tiny):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = nn.functional.linear(self.embed(x), self.hidden.weight.detach(), self.hidden.bias)
            return self.out(torch.tanh(h))

    with pytest.raises(GradientFlowError, match=r"hidden.weight: missing"):
        assert_gradient_flow(Detached(), lm_loss)


def test_a_parameter_unused_in_forward_is_missing_unless_allowed():
    class Unused(Tiny):
        def __init__(self) -> None:
            super().__init__()
            self.pooler = nn.Linear(16, 16)

    with pytest.raises(GradientFlowError) as caught:
        assert_gradient_flow(Unused(), lm_loss)
    assert "pooler.weight: missing" in str(caught.value) and "pooler.bias" in str(caught.value)
    assert "hidden" not in str(caught.value)
    assert_gradient_flow(Unused(), lm_loss, allow_unused=["pooler.*"])
    flow = check_gradient_flow(Unused(), lm_loss, allow_unused=["pooler.*"])
    assert flow["pooler.weight"] == flow["pooler.bias"] == "allowed"  # not "ok": it got nothing
    assert flow["hidden.weight"] == "ok"


class ZeroGradKernel(torch.autograd.Function):
    """A 'fused kernel' with a correct forward and a backward that returns zeros."""

    @staticmethod
    def forward(ctx, x, weight):  # type: ignore[no-untyped-def]
        return x @ weight.t()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        return grad @ torch.zeros(16, 16), torch.zeros(16, 16)


def test_a_kernel_that_returns_zero_gradients_is_caught_while_the_loss_still_falls():
    class Fused(Tiny):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = ZeroGradKernel.apply(self.embed(x), self.hidden.weight) + self.hidden.bias
            return self.out(torch.tanh(h))

    flow = check_gradient_flow(Fused(), lm_loss)
    assert flow["hidden.weight"] == "zero" and flow["hidden.bias"] == "ok"
    with pytest.raises(GradientFlowError, match=r"hidden\.weight: zero"):
        assert_gradient_flow(Fused(), lm_loss)


def test_a_nan_producing_op_is_non_finite():
    class Nan(Tiny):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.hidden(self.embed(x))
            return self.out(torch.sqrt(h - 100.0) * 0 + h)  # sqrt of negatives: NaN gradient

    with pytest.raises(GradientFlowError, match=r"hidden\.weight: non_finite"):
        assert_gradient_flow(Nan(), lm_loss)


def poisoned_setup():
    """A regressor, a clean batch, and a batch of junk rows whose gradients are huge but
    finite in fp32 — until a loss scaler multiplies them past the fp32 range."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    clean = (torch.randn(16, 8), torch.randn(16, 1))
    junk = (torch.full((4, 8), 3e17), torch.zeros(4, 1))
    return model, clean, junk


def scaled_backward(model, scaler, batch):  # type: ignore[no-untyped-def]
    x, y = batch
    loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    return loss


def test_without_the_guard_the_nan_chain_ruins_the_model():
    model, clean, junk = poisoned_setup()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    for batch in (clean, junk):  # the standard sequence: unscale, clip, step
        scaled_backward(model, scaler, batch)
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        scaler.update()
        opt.zero_grad(set_to_none=True)
    assert any(not torch.isfinite(p).all() for p in model.parameters())


def test_the_guard_skips_the_poisoned_step_and_quarantines_its_rows(tmp_path: Path):
    model, clean, junk = poisoned_setup()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    guard = FiniteStepGuard(model, opt, scaler=scaler, max_norm=1.0,
                            quarantine=tmp_path / "q.jsonl")
    scaled_backward(model, scaler, clean)
    assert guard.step(row_ids=torch.arange(16))
    before = [p.detach().clone() for p in model.parameters()]
    scale = scaler.get_scale()
    loss = scaled_backward(model, scaler, junk)
    assert not guard.step(loss, row_ids=torch.tensor([101, 202, 303, 404]))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())
    assert scaler.get_scale() < scale  # the scaler saw the overflow
    for _ in range(3):  # training goes on, finite
        scaled_backward(model, scaler, clean)
        assert guard.step(row_ids=torch.arange(16))
        opt.zero_grad(set_to_none=True)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    record = json.loads((tmp_path / "q.jsonl").read_text())
    assert record["row_ids"] == [101, 202, 303, 404] and record["step"] == 1
    assert "0.weight" in record["nonfinite_params"] and guard.skipped == 1


def test_bf16_without_a_scaler_is_guarded_too(tmp_path: Path):
    model, _, junk = poisoned_setup()
    model = model.to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = FiniteStepGuard(model, opt, quarantine=tmp_path / "q.jsonl")
    x, y = junk
    nn.functional.mse_loss(model(x.to(torch.bfloat16) * 1e20), y.to(torch.bfloat16)).backward()
    assert not guard.step(row_ids=[7, 8])
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_finite_gradients_whose_float32_norm_overflows_are_clipped_not_skipped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """Every element finite (about 1e25), only the float32 norm overflows: the norm is taken
    in float64 and the step clipped and taken (it was skipped as "non-finite gradients in 0
    parameters" and its rows quarantined); an element that is not finite still skips."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = FiniteStepGuard(model, opt, max_norm=1.0, quarantine=tmp_path / "q.jsonl")
    (model(torch.ones(2, 4)).sum() * 1e25).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    assert all(torch.isfinite(g).all() for g in grads)
    before = [p.detach().clone() for p in model.parameters()]
    assert guard.step(row_ids=[1, 2])
    assert guard.last_norm == pytest.approx(float(torch.cat([g.double().reshape(-1)
                                                             for g in grads]).norm()))
    moved = torch.cat([(b - p.detach()).reshape(-1) for b, p in zip(
        before, model.parameters(), strict=True)])
    assert float(moved.norm()) == pytest.approx(0.1, rel=1e-4)  # lr x the clipped norm of 1
    assert not (tmp_path / "q.jsonl").read_text()  # nothing quarantined
    opt.zero_grad(set_to_none=True)
    (model(torch.ones(2, 4)).sum() * float("inf")).backward()
    assert not guard.step(row_ids=[3])
    assert "non-finite gradients in 2 parameters" in caplog.text


def test_an_overflowed_norm_where_float64_is_not_at_hand_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch):
    """A device without float64 (MPS): the step is skipped, and the log says why — not that
    the gradients exploded, nor that some parameter was not finite."""
    import spr_data.train as train

    def no_float64(grads: list[torch.Tensor]) -> None:
        return None

    monkeypatch.setattr(train, "_norm64", no_float64)
    model = nn.Linear(4, 1)
    guard = FiniteStepGuard(model, torch.optim.SGD(model.parameters(), lr=0.1),
                            max_norm=1.0, quarantine=tmp_path / "q.jsonl")
    (model(torch.ones(2, 4)).sum() * 1e25).backward()
    assert not guard.step(row_ids=[1, 2])
    assert "overflows float32 and this device cannot take it in float64" in caplog.text


def test_a_run_that_keeps_skipping_is_stopped():
    model, _, junk = poisoned_setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = FiniteStepGuard(model, opt, max_consecutive_skips=3)
    x, y = junk
    with pytest.raises(TrainingDiverged, match="3 steps in a row"):
        for _ in range(5):
            nn.functional.mse_loss(model(x * 1e25), y).backward()
            guard.step()


def test_the_guards_quarantine_flows_back_into_clean(corpora: Path, tmp_path: Path):
    from spr_data import ingest, open_dataset
    from spr_data.pipeline.torch_data import SprIterableDataset
    from tests.conftest import run_cli

    ingest([corpora / "parallel/tatoeba_manythings_eng-ben.tsv"], tmp_path / "ds",
           langs=["en", "bn"])
    batch = next(iter(SprIterableDataset(tmp_path / "ds", batch_size=6, seed=1)))
    model, _, junk = poisoned_setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = FiniteStepGuard(model, opt, quarantine=tmp_path / "q.jsonl")
    x, y = junk
    nn.functional.mse_loss(model(x * 1e25), y).backward()  # the batch's junk rows blow up
    assert not guard.step(row_ids=batch["ids"])
    result = run_cli("clean", tmp_path / "ds", "--out", tmp_path / "clean", "--quarantine",
                     tmp_path / "q.jsonl", "--workers", "1", "--quiet")
    assert result.exit_code == 0, result.stderr
    rejects = open_dataset(tmp_path / "clean" / REJECTS_DIR).take(range(len(
        open_dataset(tmp_path / "clean" / REJECTS_DIR)))).to_pylist()
    quarantined = sorted(r["id"] for r in rejects if r["reason"] == "quarantined")
    assert quarantined == sorted(batch["ids"].tolist())
    kept = open_dataset(tmp_path / "clean")
    assert not set(batch["ids"].tolist()) & set(kept.take(range(len(kept))).column("id")
                                                .to_pylist())


def test_a_run_that_skips_too_often_is_stopped_even_between_good_steps():
    model, clean, junk = poisoned_setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = FiniteStepGuard(model, opt, max_skip_rate=0.05, window=100)
    with pytest.raises(TrainingDiverged, match=r"of the last 100 steps were skipped"):
        for step in range(200):
            x, y = junk if step % 10 == 0 else clean  # one bad batch in ten: 10% > 5%
            nn.functional.mse_loss(model(x * (1e25 if step % 10 == 0 else 1)), y).backward()
            guard.step()
            opt.zero_grad(set_to_none=True)
    assert guard.consecutive == 1 and guard.skipped == 11  # the 11th skip, at step 100


def test_fp16_gradients_with_a_large_but_finite_norm_are_not_skipped():
    model = nn.Linear(32, 32).half()
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    for p in model.parameters():
        p.grad = torch.full_like(p, 3000.0)  # every element finite in fp16 (max 65504)
    guard = FiniteStepGuard(model, opt)
    assert guard.step()  # the norm, 3000 · sqrt(1056) ≈ 97,500, overflows fp16, not float32
    assert guard.last_norm is not None and guard.last_norm > 65504


def test_guard_and_arbiter_misuse_is_a_clear_error(tmp_path: Path):
    from spr_data.errors import InputError, OutputError

    frozen = nn.Linear(3, 1).requires_grad_(False)
    with pytest.raises(InputError, match="no trainable parameters"):
        check_gradient_flow(frozen, lambda m: m(torch.ones(2, 3)).sum())
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(OutputError, match=r"missing/q\.jsonl"):  # at once, not at a first skip
        FiniteStepGuard(model, optimizer, quarantine=tmp_path / "missing/q.jsonl")
    with pytest.raises(OutputError):
        FiniteStepGuard(model, optimizer, quarantine=tmp_path)  # a directory
    with pytest.raises(InputError, match="window >= 1"):
        FiniteStepGuard(model, optimizer, window=0)
