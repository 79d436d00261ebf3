"""Facts sampled from NVML (the `pynvml` module of nvidia-ml-py).

NVML's "gpu" utilization is the share of time any kernel ran, and its "memory" utilization the
share of time device memory was read or written: proxies, not SM activity or DRAM bandwidth.
They are recorded as such (quality `proxy`), so that better sources (DCGM profiling metrics) win
when given, and rules can tell. Each fact is the mean of its series; the note gives p50/p95.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TextIO, TypeVar

from kbopt.collectors.collected import Collected
from kbopt.errors import KboptError
from kbopt.kb.provenance import Provenance

# Clock throttle (clock event) reasons that slow a busy GPU down: SW power cap 0x4, HW slowdown 0x8,
# SW thermal 0x20, HW thermal 0x40, HW power brake 0x80. Idle (0x1), application clocks (0x2),
# sync boost (0x10) and display clocks (0x100) are not a slowdown under load.
SLOWDOWN_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
NO_NVML_HINT = ("pass --metrics with a dcgm-exporter endpoint or dump (and/or an engine's /metrics) "
                "and --workload with a request trace, or run `kbopt collect` on the GPU host")

T = TypeVar("T")


class MemoryInfo(Protocol):
    total: int      # bytes
    used: int


class Utilization(Protocol):
    gpu: int        # percent of time a kernel ran
    memory: int     # percent of time device memory was read or written


class Nvml(Protocol):
    """The part of NVML kbopt calls: the pynvml module itself, or the tests' stand-in. A device handle
    is opaque (`object`): it only goes back into these calls."""

    NVMLError: type[Exception]      # carries the NVML_ERROR_* code in `.value`
    NVML_ERROR_NOT_SUPPORTED: int
    NVML_ERROR_NO_PERMISSION: int
    NVML_ERROR_DRIVER_NOT_LOADED: int
    NVML_ERROR_LIBRARY_NOT_FOUND: int
    NVML_ERROR_GPU_IS_LOST: int
    NVML_CLOCK_SM: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> object: ...
    def nvmlDeviceGetName(self, handle: object, /) -> str | bytes: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: object, /) -> tuple[int, int]: ...
    def nvmlDeviceGetMemoryInfo(self, handle: object, /) -> MemoryInfo: ...
    def nvmlDeviceGetMigMode(self, handle: object, /) -> Sequence[int]: ...           # [current, pending]
    def nvmlDeviceGetUtilizationRates(self, handle: object, /) -> Utilization: ...
    def nvmlDeviceGetPowerUsage(self, handle: object, /) -> int: ...                  # milliwatts
    def nvmlDeviceGetClockInfo(self, handle: object, clock: int, /) -> int: ...       # MHz
    def nvmlDeviceGetMaxClockInfo(self, handle: object, clock: int, /) -> int: ...    # MHz
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object, /) -> int: ...          # milliwatts
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object, /) -> int: ...   # a bit mask; older pynvml lacks it


@dataclass
class Series:
    values: list[float] = field(default_factory=list)

    def summary(self) -> tuple[float, str]:
        ordered = sorted(self.values)
        def pct(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
        mean = sum(ordered) / len(ordered)
        return mean, f"mean {mean:.3g}, p50 {pct(0.5):.3g}, p95 {pct(0.95):.3g}, max {ordered[-1]:.3g}"


class Progress:
    """A one-line terminal progress bar on stderr; silent when stderr is not a terminal."""

    def __init__(self, total_s: float, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total_s = total_s

    def update(self, elapsed_s: float, samples: int) -> None:
        if not self.enabled:
            return
        done = min(1.0, elapsed_s / self.total_s) if self.total_s else 1.0
        bar = "#" * int(done * 30)
        self.stream.write(f"\rsampling NVML [{bar:<30}] {elapsed_s:5.1f}/{self.total_s:g} s, {samples} samples")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")


def _error_code(nvml: Nvml, error: Exception) -> int | None:
    code = getattr(error, "value", None)
    return code if isinstance(code, int) else None


def open_nvml(nvml: Nvml) -> None:
    """nvmlInit with a message a person can act on."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        code = _error_code(nvml, error)
        if code == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            raise KboptError(f"NVML is not available here (no NVIDIA driver library): {NO_NVML_HINT}") from None
        if code == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
            raise KboptError(f"the NVIDIA driver is not loaded (NVML: {error}): load it, or {NO_NVML_HINT}") from None
        if code == nvml.NVML_ERROR_NO_PERMISSION:
            raise KboptError(f"no permission to use NVML ({error}): run as a user with access to /dev/nvidia*") from None
        raise KboptError(f"NVML failed to start: {error}; {NO_NVML_HINT}") from None


def sample_nvml(nvml: Nvml, gpu: int = 0, duration_s: float = 30.0, interval_s: float = 0.5,
                clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                progress: Progress | None = None) -> Collected:
    """Sample GPU `gpu` for `duration_s`; stop early (keeping the samples) on Ctrl-C or a lost GPU."""
    if duration_s <= 0 or interval_s <= 0:
        raise KboptError("--duration and --interval must be positive")
    open_nvml(nvml)
    out = Collected()
    try:
        count = nvml.nvmlDeviceGetCount()
        if not 0 <= gpu < count:
            raise KboptError(f"--gpu {gpu}: this host has {count} GPU(s), numbered 0 to {count - 1}")
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
        _static_facts(nvml, handle, count, out)
        series = _sample(nvml, handle, duration_s, interval_s, clock, sleep, progress or Progress(duration_s), out)
        _series_facts(series, out, interval_s)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
    return out


def _optional(nvml: Nvml, call: Callable[[], T], what: str, out: Collected) -> T | None:
    try:
        return call()
    except nvml.NVMLError as error:
        if _error_code(nvml, error) == nvml.NVML_ERROR_NOT_SUPPORTED:
            out.notes.append(f"NVML: {what} is not supported on this GPU; skipped")
            return None
        raise


def _static_facts(nvml: Nvml, handle: object, count: int, out: Collected) -> None:
    def measured(metric: str) -> Provenance:
        return Provenance("nvml", "measured", metric=metric)
    name = nvml.nvmlDeviceGetName(handle)
    out.put("hardware.gpu_name", name.decode() if isinstance(name, bytes) else name, measured("nvmlDeviceGetName"))
    capability = _optional(nvml, lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle), "compute capability", out)
    if capability:
        out.put("hardware.compute_capability", f"{capability[0]}.{capability[1]}", measured("nvmlDeviceGetCudaComputeCapability"))
    if count > 1:
        out.notes.append(f"NVML: this host has {count} GPUs; give hardware.gpu_count (GPUs per replica) yourself")
    else:
        out.put("hardware.gpu_count", 1, measured("nvmlDeviceGetCount"))
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    out.put("hardware.memory_total_gib", memory.total / 2**30, measured("nvmlDeviceGetMemoryInfo.total"))
    host = host_memory_gib()
    if host is not None and count >= 1:
        out.put("hardware.host_memory_gib_per_gpu", host / count, Provenance(
            "host", "measured", metric="/proc/meminfo MemTotal / nvmlDeviceGetCount"))
    mig = _optional(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle), "MIG mode", out)
    if mig:
        out.put("hardware.mig_enabled", bool(mig[0]), measured("nvmlDeviceGetMigMode"))
    # The limit the board enforces (the lower of what was set and what the platform allows), in mW.
    limit = _optional(nvml, lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle), "enforced power limit", out)
    if limit:
        out.put("hardware.power_limit_watts", limit / 1000, measured("nvmlDeviceGetEnforcedPowerLimit"))
    top = _optional(nvml, lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM), "max SM clock", out)
    if top:
        out.put("hardware.max_sm_clock_mhz", top, measured("nvmlDeviceGetMaxClockInfo(SM)"))


def _sample(nvml: Nvml, handle: object, duration_s: float, interval_s: float, clock: Callable[[], float],
            sleep: Callable[[float], None], progress: Progress, out: Collected) -> dict[str, Series]:
    series: dict[str, Series] = {name: Series() for name in ("gpu", "memory", "used", "power", "sm_clock", "throttled")}
    supported = {"power": True, "sm_clock": True, "throttled": hasattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons")}
    start = clock()
    samples = 0
    try:
        while True:
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                series["gpu"].values.append(rates.gpu / 100)
                series["memory"].values.append(rates.memory / 100)
                series["used"].values.append(memory.used / memory.total)
                for name, call in (("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000),
                                   ("sm_clock", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                                   ("throttled", lambda: float(bool(
                                       nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) & SLOWDOWN_REASONS)))):
                    if supported[name]:
                        value = _optional(nvml, call, {"power": "power draw", "sm_clock": "SM clock",
                                                       "throttled": "clock throttle reasons"}[name], out)
                        if value is None:
                            supported[name] = False
                        else:
                            series[name].values.append(value)
            except nvml.NVMLError as error:
                if _error_code(nvml, error) == nvml.NVML_ERROR_GPU_IS_LOST:
                    out.notes.append(f"NVML: the GPU was lost after {samples} samples; kept what was sampled (partial)")
                    break
                raise KboptError(f"NVML failed while sampling: {error}") from None
            samples += 1
            elapsed = clock() - start
            progress.update(elapsed, samples)
            if elapsed >= duration_s:
                break
            sleep(interval_s)
    except KeyboardInterrupt:
        out.notes.append(f"NVML: interrupted after {samples} samples; kept what was sampled (partial)")
    finally:
        progress.close()
    if samples == 0:
        raise KboptError("NVML gave no samples before it stopped; nothing to write")
    series["elapsed"] = Series([clock() - start])
    out.notes.append(f"NVML: {samples} samples over {clock() - start:.1f} s")
    return series


def _series_facts(series: dict[str, Series], out: Collected, interval_s: float) -> None:
    window = round(series["elapsed"].values[0], 3)
    def put(path: str, name: str, quality: str, metric: str, note: str = "") -> None:
        if series[name].values:
            mean, spread = series[name].summary()
            out.put(path, mean, Provenance("nvml", quality, metric=metric, samples=len(series[name].values),
                                           window_s=window, note=f"{spread}{note}"))
    put("telemetry.kernel_time_ratio", "gpu", "measured", "nvmlDeviceGetUtilizationRates.gpu")
    put("telemetry.compute_utilization", "gpu", "proxy", "nvmlDeviceGetUtilizationRates.gpu",
        "; share of time a kernel ran, not SM activity")
    put("telemetry.bandwidth_utilization", "memory", "proxy", "nvmlDeviceGetUtilizationRates.memory",
        "; share of time memory was read or written, not DRAM bandwidth")
    put("telemetry.memory_used_ratio", "used", "measured", "nvmlDeviceGetMemoryInfo.used/total")
    put("telemetry.power_watts", "power", "measured", "nvmlDeviceGetPowerUsage")
    put("telemetry.sm_clock_mhz", "sm_clock", "measured", "nvmlDeviceGetClockInfo(SM)")
    if series["sm_clock"].values:
        out.notes.append(f"NVML: SM clock {series['sm_clock'].summary()[1]} MHz")
    throttled = series["throttled"].values
    if throttled:
        out.put("telemetry.throttle_ratio", sum(throttled) / len(throttled), Provenance(
            "nvml", "measured", metric="nvmlDeviceGetCurrentClocksThrottleReasons", samples=len(throttled), window_s=window,
            note="share of samples with a power, thermal or hardware slowdown reason (idle and application clocks not counted)"))
    if throttled and any(throttled):
        out.notes.append(f"NVML: clocks were held down (power, thermal or reliability limits) in "
                         f"{sum(throttled) / len(throttled):.0%} of samples; utilization figures understate demand")


def load_pynvml() -> Nvml:
    try:
        import pynvml  # pynvml: optional, only where a GPU is sampled
    except ImportError:
        raise KboptError(f"the pynvml module (package nvidia-ml-py) is not installed: {NO_NVML_HINT}") from None
    module: Nvml = pynvml   # pynvml is untyped: this is where it is taken to be the Nvml protocol
    return module


def host_memory_gib(meminfo: str = "/proc/meminfo") -> float | None:
    """This host's memory (MemTotal), or None where it cannot be read (not Linux)."""
    try:
        with open(meminfo, encoding="ascii", errors="replace") as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                if name == "MemTotal":
                    words = rest.split()
                    return int(words[0]) / 2**20 if words and words[0].isdigit() and words[1:2] == ["kB"] else None
    except OSError:
        return None
    return None
