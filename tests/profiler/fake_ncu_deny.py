#!/usr/bin/env python3
"""fake_ncu.py on a machine that keeps the GPU's performance counters from this user: every collect is refused."""

print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
raise SystemExit(1)
