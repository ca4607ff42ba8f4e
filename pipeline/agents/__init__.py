"""The three agents of every EGG sub-stage: Profile (diagnoses), Code (writes kernels), Debug (repairs them)."""
