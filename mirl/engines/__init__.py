"""Policy engines: token ids in, sampled ids and the sampler's logprobs out (and text for text calls).

- `generator`: the `Generator` contract every engine keeps (what RL trains on);
- `embedded`: the CPU engine (transformers, concurrent requests batched by `embedded_batch`);
- `paged`: the continuous-batching engine for a GPU (paged KV, CUDA graphs; eagerly on a CPU);
- `vllm_engine`: vLLM in-process, at scale;
- `weights`: where weights come from (the embedded SmolLM2 .gguf, checkpoints, state dicts);
- `registry`: the process-wide engine behind each `local/<name>` model, and which engine to use.

The LLM choke point (`mirl.llm`) serves these engines to roles; nothing here imports it.
"""

# The share of its GPU a process may take for KV pages, when several processes share one GPU: `mirl batch
# --parallel N` sets it to 1/N in each training's kernel; without it a process takes its engine's full share.
GPU_SHARE_ENV = "MIRL_GPU_SHARE"
