"""Thin adapters between tensorhub.torch and the inference engines and RL
frameworks that load weights from a trainer: one module each, importable
without the engine (the engine's own classes are used when it is installed).

- tensorhub.adapters.vllm: a backend for vLLM's weight-transfer engine
  (init / start / update / finish with a weight version) and a worker
  extension for collective_rpc, both loading through model.load_weights.
- tensorhub.adapters.sglang: a custom weight loader for SGLang's
  update_weights_from_tensor, which carries a reference to a version instead
  of the weights.
- tensorhub.adapters.verl: a verl checkpoint-engine backend (prepare /
  build_topology / init_process_group / send_weights / receive_weights /
  finalize).
"""
