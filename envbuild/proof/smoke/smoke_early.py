"""The smoke worker's first moments, before ``import torch`` (standalone: no envbuild, no torch).

``start`` opens the GPU's CUDA context and NVML on a thread, through ``ctypes`` on the driver's own
libraries, while the main thread imports torch (about 1.7 s of Python that holds the GIL; the
driver's calls release it). The context is the device's primary context, the one torch's runtime
then retains: CUDA's initialisation (1.5-2.5 s per GPU on a warm 4x H200 run, most of it in the
driver) is taken off the critical path instead of following the import. ``CUDA_MODULE_LOADING``
is set to ``LAZY`` first, as torch would set it, since ``cuInit`` reads it.
``ENVBUILD_SMOKE_EARLY_CUDA=0`` turns it off (the bench compares both).

``nvml_sample`` reads the GPU's SM clock, throttle reasons, temperature, power and compute
processes through the same NVML handle (``libnvidia-ml.so.1``: no Python package needed; else
``nvidia-smi``), fast enough to be taken while the timed matrix products run.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any

EARLY_ENV = "ENVBUILD_SMOKE_EARLY_CUDA"  # "0": off
OWN_PART_ENV = "ENVBUILD_SMOKE_HAS_PART"  # set by smoke_part in a worker that started one

# NVML's clock event ("throttle") reasons, by bit
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

# what the early thread did: began / ready (time.time()), error; nvml: the library, once open
STATE: dict[str, Any] = {}
_DONE = threading.Event()
_NVML_LOCK = threading.Lock()


def process_started() -> float:
    """When this process started (``time.time()`` scale, 10 ms ticks), from ``/proc``; now
    elsewhere."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            # field 22, starttime: ticks after boot
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return time.time() - (
            time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        )
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


def start() -> bool:
    """Open the CUDA context and NVML on a thread (see above); False where there is nothing to
    open (turned off, or no GPU visible: ``CUDA_VISIBLE_DEVICES`` empty)."""
    if os.environ.get(EARLY_ENV) == "0" or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        _DONE.set()
        return False
    os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")
    threading.Thread(target=_open, name="envbuild-early-cuda", daemon=True).start()
    return True


def _open() -> None:
    STATE["began"] = time.time()
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        for call, args in (
            ("cuInit", (0,)),
            ("cuDeviceGet", (ctypes.byref(dev), 0)),
            # the primary context: the one torch's runtime uses (retained here, kept to the end)
            ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), dev)),
        ):
            rc = getattr(cuda, call)(*args)
            if rc != 0:
                STATE["error"] = f"{call} returned CUDA error {rc}"
                return
        STATE["ready"] = time.time()
        _nvml()  # the library and its init, for the sample taken during the timed products
        STATE["nvml_ready"] = time.time()
    except Exception as exc:  # noqa: BLE001 - no driver here: torch says so in its own words
        STATE["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        _DONE.set()


def release_context() -> None:
    """Destroy the GPU's primary context (the worker is done with the GPU; nothing touches CUDA
    after this): its teardown, which the process's exit would otherwise wait for, happens now.
    A no-op where the early thread opened none."""
    if "began" not in STATE or not _DONE.wait(timeout=60) or "ready" not in STATE:
        return
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0:
            began = time.time()
            cuda.cuDevicePrimaryCtxReset(dev)
            STATE["released"] = [began, time.time()]
    except OSError:
        pass


def summary() -> dict[str, Any]:
    """What the early thread did, for the result (times as ``time.time()``)."""
    return {k: v for k, v in STATE.items() if k != "nvml"}


def _nvml() -> Any:
    """``libnvidia-ml.so.1``, initialised once; None without it."""
    with _NVML_LOCK:
        if "nvml" not in STATE:
            try:
                lib = ctypes.CDLL("libnvidia-ml.so.1")
                STATE["nvml"] = lib if lib.nvmlInit_v2() == 0 else None
            except (OSError, AttributeError):
                STATE["nvml"] = None
        return STATE["nvml"]


def nvml_sample(uuid: str) -> dict[str, Any] | None:
    """This GPU's (by UUID, ``GPU-...``) SM clock and its maximum, throttle reasons, temperature,
    power and compute processes, from NVML or else ``nvidia-smi``; None without either."""
    lib = _nvml()
    if lib is not None:
        try:
            return _nvml_read(lib, uuid)
        except (OSError, AttributeError, RuntimeError):
            pass
    return _smi_sample(uuid)


def _nvml_read(lib: Any, uuid: str) -> dict[str, Any]:
    c_uint, ref = ctypes.c_uint, ctypes.byref
    handle = ctypes.c_void_p()

    def ok(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what}: NVML error {rc}")

    ok(lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ref(handle)), "handle")
    sm, sm_max, temp, power = c_uint(), c_uint(), c_uint(), c_uint()
    reasons = ctypes.c_ulonglong()
    ok(lib.nvmlDeviceGetClockInfo(handle, 1, ref(sm)), "clock")  # 1: NVML_CLOCK_SM
    ok(lib.nvmlDeviceGetMaxClockInfo(handle, 1, ref(sm_max)), "max clock")
    reasons_of = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
    reasons_of = reasons_of or lib.nvmlDeviceGetCurrentClocksThrottleReasons
    ok(reasons_of(handle, ref(reasons)), "reasons")
    ok(lib.nvmlDeviceGetTemperature(handle, 0, ref(temp)), "temperature")  # 0: the GPU die
    ok(lib.nvmlDeviceGetPowerUsage(handle, ref(power)), "power")  # milliwatts
    out: dict[str, Any] = {
        "source": "nvml",
        "sm_clock_mhz": sm.value,
        "sm_clock_max_mhz": sm_max.value,
        "throttle_reasons": [w for bit, w in THROTTLE_REASONS.items() if reasons.value & bit],
        "temperature_c": float(temp.value),
        "power_w": power.value / 1000.0,
    }
    for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses"):
        count = c_uint(0)
        try:
            rc = getattr(lib, name)(handle, ref(count), None)
        except AttributeError:
            continue
        if rc in (0, 7):  # success (none), or NVML_ERROR_INSUFFICIENT_SIZE with the count
            out["processes"] = count.value
            # of which this smoke's own: the worker, and its torch.compile process (smoke_part)
            out["own_processes"] = 2 if os.environ.get(OWN_PART_ENV) else 1
        break
    return out


def _smi_sample(uuid: str) -> dict[str, Any] | None:
    import subprocess

    query = "clocks.sm,clocks.max.sm,clocks_throttle_reasons.active,temperature.gpu,power.draw"
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "-i",
                uuid or "0",
                f"--query-gpu={query}",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
        sm, sm_max, reasons, temp, power = (v.strip() for v in out.stdout.strip().split(","))
        bits = int(reasons, 16)
        return {
            "source": "nvidia-smi",
            "sm_clock_mhz": int(sm),
            "sm_clock_max_mhz": int(sm_max),
            "throttle_reasons": [w for bit, w in THROTTLE_REASONS.items() if bits & bit],
            "temperature_c": float(temp),
            "power_w": float(power),
        }
    except Exception:  # noqa: BLE001 - neither: the finding has no clocks
        return None
