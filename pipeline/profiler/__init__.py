"""The profiler: NCU metrics, roofline classification and a bottleneck report (`egg profile`).

- `static`: compile Triton kernels for sm_90 on any machine; registers, spills, shared memory, wgmma/TMA.
- `survey`: every kernel configuration a candidate launches (intercepted in a subprocess on meta tensors).
- `ncu`, `counters`, `trace`: collect and read NCU counters or torch-profiler times.
- `ceilings`, `classify`: the device's measured roofline, and what limits each kernel, with evidence.
- `profiling.profile_candidate`: all of it, cached -> `report.ProfileReport`.
"""
