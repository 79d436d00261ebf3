"""A stand-in for the pynvml module: the calls kbopt makes, with scripted readings and failures."""
from __future__ import annotations

from types import SimpleNamespace

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_CLOCK_SM = 1


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__({3: "Not Supported", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
                          15: "GPU is lost"}.get(value, f"error {value}"))
        self.value = value


class FakeNVML:
    """`readings`: (gpu %, memory %, used GiB) per sample. `fail_init`: an NVML error code.
    `lose_after` / `interrupt_after`: samples before the GPU is lost / Ctrl-C arrives."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_CLOCK_SM = NVML_CLOCK_SM

    def __init__(self, readings=((55, 30, 70.0),), name="NVIDIA A100-SXM4-80GB", capability=(8, 0), count=1,
                 total_gib=80.0, power_supported=True, fail_init=None, lose_after=None, interrupt_after=None,
                 power_limit_mw=400_000, max_sm_clock=1410, clocks=(1410,)):
        self.readings, self.name, self.capability, self.count = list(readings), name, capability, count
        self.total = int(total_gib * 2**30)
        self.power_supported, self.fail_init = power_supported, fail_init
        self.lose_after, self.interrupt_after = lose_after, interrupt_after
        self.power_limit_mw, self.max_sm_clock, self.clocks = power_limit_mw, max_sm_clock, list(clocks)
        self.sampled = 0
        self.shut_down = False

    def nvmlInit(self):
        if self.fail_init:
            raise NVMLError(self.fail_init)

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def nvmlDeviceGetName(self, handle):
        return self.name

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self.capability

    def nvmlDeviceGetMigMode(self, handle):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def _reading(self):
        return self.readings[min(self.sampled, len(self.readings) - 1)]

    def nvmlDeviceGetUtilizationRates(self, handle):
        if self.lose_after is not None and self.sampled >= self.lose_after:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if self.interrupt_after is not None and self.sampled >= self.interrupt_after:
            raise KeyboardInterrupt
        gpu, memory, _ = self._reading()
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetMemoryInfo(self, handle):
        used = int(self._reading()[2] * 2**30)
        return SimpleNamespace(total=self.total, used=used, free=self.total - used)

    def nvmlDeviceGetPowerUsage(self, handle):
        if not self.power_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return 250_000

    def nvmlDeviceGetClockInfo(self, handle, clock):
        value = self.clocks[min(self.sampled, len(self.clocks) - 1)]
        self.sampled += 1          # the last call of a sample: the next reading follows
        return value

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        if not self.power_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self.power_limit_mw

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return self.max_sm_clock


class FakeClock:
    """Time that advances only when the collector sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class ThrottledNVML(FakeNVML):
    """A GPU held at its power cap (throttle reason 0x4, SW power cap) in every sample, or in the
    samples `reasons` says (one mask a sample, the last repeated)."""

    def __init__(self, *args, reasons=(0x4,), **kwargs):
        super().__init__(*args, **kwargs)
        self.reasons = list(reasons)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        # Read after the SM clock, which has already moved `sampled` on to the next sample.
        return self.reasons[min(max(0, self.sampled - 1), len(self.reasons) - 1)]
