"""The fast decode engine: a static KV cache and one fixed-shape step that ``torch.compile`` can capture.

``static_engine`` (the engine), ``static_forward`` (the model's forward re-implemented on the
static cache), ``decode_weights`` (the weights it reads, and which models it runs) and ``four_bit``
(bitsandbytes' 4-bit projections). Only ``method.engines`` imports it.
"""
