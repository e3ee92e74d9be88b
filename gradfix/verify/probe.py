"""The child side of verification: run one scenario in this (fresh) process and record it.

Run as ``python -m gradfix.verify.probe SCENARIO.py DEVICE WORKDIR OUT [--repeat N] [--scale K]``. The
scenario module is imported from its path and its ``gradfix_scenario(probe)`` is called once
with observation on (the run that is compared), then once more without observation to measure
peak memory; with ``--repeat N`` (benchmarks) N more unobserved runs are timed.

Determinism: Python's and torch's seeds are set to 0 before every run,
``torch.use_deterministic_algorithms(True)``, one CPU thread, cuDNN benchmarking off,
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (set by the harness before the process starts).

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated`` minus the allocation at the start of
the run (and per call name: minus what was allocated when the call started). On CPU, the peak of the net bytes allocated by torch's CPU allocator during the run,
read from the profiler's allocation events (``torch.profiler.profile(profile_memory=True)``:
every allocation and free, in time order): tensors and autograd graphs, not the Python heap
or the interpreter; per call name, the peak inside the call above what was live when it
started (the calls are marked with ``record_function`` ranges). The profiled run is separate
from the timed one. Time: wall and CPU (``time.process_time``) time inside ``probe.call``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import random
import shutil
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402

_SCALARS = (bool, int, float, str, bytes, type(None))


class Probe:
    """What a scenario receives: the device, a work folder, and ``watch``/``call``."""

    def __init__(self, device: str, workdir: Path, observe: bool = True, scale: int = 1):
        self.device = device
        #: Size multiplier for benchmarks (``bench/memory_time.py --scale``); scenarios may
        #: multiply their batch sizes by it. Always 1 for verification.
        self.scale = scale
        self.workdir = Path(workdir)
        self.observe = observe
        self.modules: dict[str, torch.nn.Module] = {}
        self.calls: list[dict] = []
        self.initial_state: dict[str, torch.Tensor] = {}
        self.elapsed = 0.0  # wall time inside probe.call, all calls
        self.per_call: dict[str, list[float]] = {}  # call name -> [wall s, CPU s] (summed)
        self.call_peaks: dict[str, int] = {}  # call name -> peak bytes (max over its calls)
        self._range = None  # set by the memory run: opens a profiler range per call
        self._forwards: list[tuple] | None = None
        self._current: str | None = None

    # -- scenario API ---------------------------------------------------------------------
    def path(self, name: str) -> str:
        """A file path inside the run's work folder (files written there are observed)."""
        return str(self.workdir / name)

    def watch(self, **modules: torch.nn.Module) -> None:
        """Observe these modules: parameters, buffers, grads, ``.training``, forward modes."""
        for name, module in modules.items():
            self.modules[name] = module
            if not self.observe:
                continue
            for sub_name, sub in module.named_modules(prefix=name):
                sub.register_forward_pre_hook(self._hook(sub_name))
            self.initial_state.update(self._state(name, module))

    def call(self, fn: Callable, *args: Any, name: str | None = None, **kwargs: Any) -> Any:
        """Call ``fn`` and record what it returned and the state it left behind."""
        label = name or getattr(fn, "__name__", "call")
        self._current = label
        self._forwards = []
        _sync(self.device)
        scope = self._range(label) if self._range is not None else contextlib.nullcontext()
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            with scope:
                result = fn(*args, **kwargs)
                _sync(self.device)
        finally:
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            self.elapsed += wall
            totals = self.per_call.setdefault(label, [0.0, 0.0])
            totals[0] += wall
            totals[1] += cpu
        self._current = None
        if self.observe:
            self.calls.append(self._record(label, result))
        return result

    # -- recording ------------------------------------------------------------------------
    def _hook(self, module_name: str):
        def hook(module, inputs):
            if self._forwards is not None and self.observe:
                self._forwards.append(
                    (module_name, module.training, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
                )

        return hook

    @staticmethod
    def _state(prefix: str, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        state = {}
        for key, value in list(module.named_parameters(prefix=prefix)) + list(module.named_buffers(prefix=prefix)):
            state[key] = _cpu(value)
        return state

    def _record(self, label: str, result: Any) -> dict:
        returned: dict[str, Any] = {}
        requires_grad: dict[str, bool] = {}
        inference: dict[str, bool] = {}
        numbers: dict[str, float] = {}
        for key, value in _flatten(result):
            if isinstance(value, torch.Tensor):
                requires_grad[key] = value.requires_grad
                inference[key] = value.is_inference()
                returned[key] = _cpu(value)
                if value.numel() == 1 and not value.is_complex():
                    numbers[key] = float(value.detach().reshape(()).cpu().item())
            else:
                returned[key] = value
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    numbers[key] = float(value)
        training = {}
        state = {}
        for name, module in self.modules.items():
            for sub_name, sub in module.named_modules(prefix=name):
                training[sub_name] = sub.training
            state.update(self._state(name, module))
        return {
            "index": len(self.calls),
            "name": label,
            "returned": returned,
            "requires_grad": requires_grad,
            "inference": inference,
            "numbers": numbers,
            "grad_enabled": torch.is_grad_enabled(),
            "inference_mode": torch.is_inference_mode_enabled(),
            "training": training,
            "state": state,
            "forwards": tuple(self._forwards or ()),
        }

    def final(self) -> dict:
        state, grads = {}, {}
        for name, module in self.modules.items():
            state.update(self._state(name, module))
            for key, param in module.named_parameters(prefix=name):
                grads[key] = None if param.grad is None else _cpu(param.grad)
        return {"final_state": state, "grads": grads}


def _cpu(t: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode(False), torch.no_grad():
        if t.is_inference():
            return t.detach().to("cpu", copy=True).clone()
        return t.detach().to("cpu", copy=True)


def _flatten(value: Any, key: str = ""):
    if isinstance(value, torch.Tensor) or isinstance(value, _SCALARS):
        yield key or "", value
    elif isinstance(value, (tuple, list)):
        if not value:
            yield key, type(value).__name__ + "()"
        for i, item in enumerate(value):
            yield from _flatten(item, f"{key}[{i}]")
    elif isinstance(value, dict):
        for k in value:
            yield from _flatten(value[k], f"{key}[{k!r}]")
    else:
        yield key, f"<{type(value).__name__}>"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _seed() -> None:
    random.seed(0)
    torch.manual_seed(0)
    torch.set_grad_enabled(True)


def _setup(device: str) -> None:
    torch.set_num_threads(1)
    # The public torch.use_deterministic_algorithms also imports torch._inductor (1.4 s per
    # process) only to set inductor's flag; scenarios do not compile, so set the core flag.
    # On CUDA, warn_only: an op without a deterministic kernel warns instead of raising (the
    # comparison there is tolerance-based anyway); a raise would hide the scenario's behaviour.
    warn_only = device.startswith("cuda")
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is not None:
        setter(True, warn_only=warn_only)
    else:  # pragma: no cover - older/newer torch
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
    assert torch.are_deterministic_algorithms_enabled()
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def load_scenario(path: str):
    spec = importlib.util.spec_from_file_location(f"gradfix_scenario_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _files(workdir: Path) -> dict[str, bytes]:
    return {
        p.relative_to(workdir).as_posix(): p.read_bytes() for p in sorted(workdir.rglob("*")) if p.is_file()
    }


def _run_once(entry, device: str, workdir: Path, observe: bool, scale: int = 1, range_=None) -> tuple[Probe, dict | None]:
    workdir.mkdir(parents=True, exist_ok=True)
    _seed()
    probe = Probe(device, workdir, observe, scale)
    probe._range = range_
    exception = None
    old = os.getcwd()
    os.chdir(workdir)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            entry(probe)
    except Exception as exc:  # the scenario's own behaviour: an observation, not a failure
        exception = {"type": type(exc).__name__, "message": str(exc).strip().split("\n")[0], "call": probe._current}
    finally:
        os.chdir(old)
    return probe, exception


_CALL_RANGE = "gradfix_verify_call::"


def _cpu_peak(entry, device: str, workdir: Path, scale: int = 1) -> tuple[int, dict[str, int]]:
    """Peak net bytes of the CPU allocator over the run, and per call name (see module doc)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    def range_(label):
        return record_function(_CALL_RANGE + label)

    with contextlib.redirect_stdout(io.StringIO()):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            _run_once(entry, device, workdir, observe=False, scale=scale, range_=range_)
    raw = list(prof.profiler.kineto_results.events())
    events = sorted((e.start_ns(), e.nbytes()) for e in raw if e.name() == "[memory]")
    ranges = [(e.name()[len(_CALL_RANGE):], e.start_ns(), e.end_ns()) for e in raw if e.name().startswith(_CALL_RANGE)]
    timeline = []  # (time, live bytes after this event)
    current = peak = 0
    for when, nbytes in events:
        current += nbytes
        peak = max(peak, current)
        timeline.append((when, current))
    per_call: dict[str, int] = {}
    for label, start, end in ranges:
        before = [live for when, live in timeline if when < start]
        base = before[-1] if before else 0
        inside = [live for when, live in timeline if start <= when <= end]
        call_peak = max(inside, default=base) - base
        per_call[label] = max(per_call.get(label, 0), call_peak)
    return peak, per_call


def _cuda_peak(entry, device: str, workdir: Path, scale: int = 1) -> tuple[int, dict[str, int]]:
    """``max_memory_allocated`` over the run and per call name, above what was live before."""
    per_call: dict[str, int] = {}

    @contextlib.contextmanager
    def range_(label):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        outer_peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        try:
            yield
        finally:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            per_call[label] = max(per_call.get(label, 0), peak - base)
            state["peak"] = max(state["peak"], outer_peak, peak)

    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    state = {"peak": 0}
    _run_once(entry, device, workdir, observe=False, scale=scale, range_=range_)
    torch.cuda.synchronize()
    return max(state["peak"], torch.cuda.max_memory_allocated()) - start, per_call


def main(argv: list[str]) -> int:
    scenario, device, workdir, out = argv[:4]
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 0
    scale = int(argv[argv.index("--scale") + 1]) if "--scale" in argv else 1
    _setup(device)
    module = load_scenario(scenario)
    entry = getattr(module, "gradfix_scenario")
    workdir = Path(workdir)
    probe, exception = _run_once(entry, device, workdir / "run", observe=True, scale=scale)
    observation = {
        "calls": probe.calls,
        "initial_state": probe.initial_state,
        **probe.final(),
        "files": _files(workdir / "run"),
        "exception": exception,
        "grad_enabled_end": torch.is_grad_enabled(),
        "observed_time_s": probe.elapsed,
        "device": device,
        "torch": torch.__version__,
    }
    measure = _cuda_peak if device.startswith("cuda") else _cpu_peak
    observation["peak_bytes"], observation["call_peak_bytes"] = measure(entry, device, workdir / "mem", scale)
    observation["per_call_s"] = probe.per_call
    # the time shown by `gradfix verify`: one more run, without observation hooks or profiler
    quiet, _ = _run_once(entry, device, workdir / "timed", observe=False, scale=scale)
    observation["time_s"] = quiet.elapsed
    if repeat:
        times, per_call = [], []
        for i in range(repeat + 1):  # the first one warms up
            timed, _ = _run_once(entry, device, workdir / f"t{i}", observe=False, scale=scale)
            shutil.rmtree(workdir / f"t{i}", ignore_errors=True)
            if i:
                times.append(timed.elapsed)
                per_call.append(timed.per_call)
        observation["times_s"] = times
        observation["per_call_runs"] = per_call  # per run: call name -> [wall s, CPU s]
    torch.save(observation, out)
    return 0


def forked_main(argv: list[str], log: str) -> None:
    """Entry of a process forked by the harness's fork server (which has only imported this
    module, torch and torch._dynamo): output goes to ``log``, the exit code says how it went."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
    try:
        code = main(argv)
    except BaseException:
        traceback.print_exc()
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception:
        traceback.print_exc()
        sys.exit(3)
