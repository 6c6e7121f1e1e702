"""`flashinfer.prefill`, added to the bundle's flashinfer stub on the offline H200 (see ../README.md).

SGLang 0.5.17's vision attention (`sglang/srt/layers/attention/vision.py`), which the HTTP
server imports through its transcription endpoint, imports this name on CUDA at module level.
"""


def cudnn_batch_prefill_with_kv_cache(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201
    raise RuntimeError("flashinfer is only a stub on this machine (cudnn_batch_prefill_with_kv_cache)")
