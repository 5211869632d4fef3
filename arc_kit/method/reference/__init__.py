"""The reference decode engine: transformers' own model and cache, the slow, obviously-correct path.

``engine`` (the engine) and ``caches`` (transformers' caches: made, cropped, a prefix shared between
lanes). Only ``method.engines`` imports the engine; the answers' transformers scoring uses the caches.
"""
