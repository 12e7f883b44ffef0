"""The simulated SGLang server: a separate process that behaves like SGLang, driven by a profile.

``python -m orchestrator.sim.server`` takes SGLang's launch flags plus ``--sim-profile`` and
``--sim-state-dir``; ``FakeNvml`` reads the GPU memory it reports. The memory and speed models are pure
functions, usable (and tested) without starting anything.
"""

from orchestrator.sim.nvml import FakeNvml, GpuStateWriter
from orchestrator.sim.profile import SimProfile, builtin_profiles, load_profile

__all__ = ["FakeNvml", "GpuStateWriter", "SimProfile", "builtin_profiles", "load_profile"]
