"""The reference decode engine: transformers' own model and cache, the slow, obviously-correct path.

``engine`` (the engine), ``caches`` (transformers' caches: made, cropped, a prefix shared between
lanes) and ``nlls`` (answers' NLLs after a prompt on its cache, and the slow reference of one full
forward per answer that tests hold every faster path against). Only ``method.engines`` imports the
engine.
"""
