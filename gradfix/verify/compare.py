"""Observations as named observables, and their comparison (bitwise on CPU, tolerance on CUDA)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Iterator

import torch

#: Tolerance on CUDA (kernels may differ between the two programs even with deterministic
#: algorithms, e.g. a graph-free forward picks another GEMM): torch.allclose(rtol, atol).
CUDA_RTOL = 1e-5
CUDA_ATOL = 1e-6


def observables(obs: dict) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` for everything observed, in the order it happened."""
    for call in obs["calls"]:
        label = f"call {call['index']} {call['name']}"
        for key, value in call["returned"].items():
            yield f"{label}: returned{key}", value
        for key, value in call["requires_grad"].items():
            yield f"{label}: returned{key}.requires_grad", value
        for key, value in call["inference"].items():
            yield f"{label}: returned{key}.is_inference", value
        yield f"{label}: grad mode after", call["grad_enabled"]
        yield f"{label}: inference mode after", call["inference_mode"]
        for key, value in call["training"].items():
            yield f"{label}: training {key}", value
        yield f"{label}: forwards", call["forwards"]
        for key, value in call["state"].items():
            yield f"{label}: state {key}", value
    yield "exception", obs["exception"]
    yield "grad mode at end", obs["grad_enabled_end"]
    for key, value in obs["final_state"].items():
        yield f"final state {key}", value
    for key, value in obs["grads"].items():
        yield f"grad {key}", value
    for key, value in obs["files"].items():
        yield f"file {key}", value


@dataclass(frozen=True)
class Difference:
    key: str
    call: int | None  # index of the call it belongs to (None: final observables)
    description: str

    def __str__(self) -> str:
        return f"{self.key}: {self.description}"


def _call_index(key: str) -> int | None:
    if key.startswith("call "):
        return int(key.split(" ", 2)[1])
    return None


class Comparator:
    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def same(self, a: Any, b: Any) -> bool:
        return self.why(a, b) is None

    def why(self, a: Any, b: Any) -> str | None:
        """None when equal, else a short description of the difference."""
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
                return f"{_show(a)} vs {_show(b)}"
            if a.dtype != b.dtype or a.shape != b.shape:
                return f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
            if self.cuda and a.is_floating_point():
                ok = torch.allclose(a, b, rtol=CUDA_RTOL, atol=CUDA_ATOL, equal_nan=True)
            else:
                ok = torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num()))
            if ok:
                return None
            diff = (a.double() - b.double()).abs() if a.is_floating_point() else (a != b)
            return f"values differ (max |diff| {diff.max().item():.3g}; {_show(a)} vs {_show(b)})"
        if isinstance(a, bytes) and isinstance(b, bytes):
            if a == b:
                return None
            if self.cuda:  # same checkpoint up to tolerance?
                try:
                    la = torch.load(io.BytesIO(a), map_location="cpu", weights_only=True)
                    lb = torch.load(io.BytesIO(b), map_location="cpu", weights_only=True)
                except Exception:
                    la = lb = None
                if la is not None and self.same(la, lb):
                    return None
            return f"{len(a)} bytes vs {len(b)} bytes, contents differ"
        if isinstance(a, dict) and isinstance(b, dict):
            if list(a) != list(b):
                return f"keys {list(a)} vs {list(b)}"
            for k in a:
                why = self.why(a[k], b[k])
                if why:
                    return f"[{k!r}] {why}"
            return None
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            if len(a) != len(b):
                return f"{len(a)} items vs {len(b)} items"
            for i, (x, y) in enumerate(zip(a, b)):
                why = self.why(x, y)
                if why:
                    return f"[{i}] {why}"
            return None
        if type(a) is not type(b) or a != b:
            return f"{_show(a)} vs {_show(b)}"
        return None

    def differences(self, before: dict, after: dict) -> list[Difference]:
        left = dict(observables(before))
        right = dict(observables(after))
        out = []
        order = {k: i for i, k in enumerate(list(left) + [k for k in right if k not in left])}
        keys = sorted(order, key=lambda k: (_call_index(k) if _call_index(k) is not None else 1 << 30, order[k]))
        for key in keys:
            if key not in right:
                out.append(Difference(key, _call_index(key), f"{_show(left[key])} vs (not observed)"))
            elif key not in left:
                out.append(Difference(key, _call_index(key), f"(not observed) vs {_show(right[key])}"))
            else:
                why = self.why(left[key], right[key])
                if why:
                    out.append(Difference(key, _call_index(key), why))
        return out


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        flat = value.detach().reshape(-1)
        head = ", ".join(f"{v:.6g}" if value.is_floating_point() else str(v) for v in flat[:3].tolist())
        more = ", ..." if flat.numel() > 3 else ""
        return f"tensor[{head}{more}]"
    if isinstance(value, dict) and set(value) == {"type", "message", "call"}:
        return f"{value['type']}: {value['message']} (in {value['call']})"
    if isinstance(value, bytes):
        return f"{len(value)} bytes"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
